"""The generation layer's bookkeeping without a model: decoding settings, per-call seeds, the reply cache and
``collect`` (reuse, order, shared prompts, errors never cached, the consecutive-failure abort).

The runner here is a scripted stand-in for a model backend (the :class:`~queerbench.models.generation.settings.Runner` protocol),
not a mock of the code under test: ``collect``, ``ResponseCache`` and ``cache_key`` run for real. Fast on purpose:
``tools/mutation.py`` runs this file against every mutant of ``cache.py``, ``collect.py`` and ``settings.py``.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

import pandas as pd
import pytest

from queerbench.models.generation import (
    DEFAULT_MODEL,
    GenerationSettings,
    Reply,
    ResponseCache,
    RunAbortedError,
    cache_key,
    collect,
    item_seed,
    settings_dict,
)

FP = {"kind": "scripted", "model": "m"}


class Scripted:
    """Replies ``text(prompt, seed)`` for each prompt, or an error for prompts listed in ``fail``; yields in
    ``order`` (a permutation of the indices; default reversed, so arrival order differs from the rows')."""

    def __init__(self, fail: Sequence[str] = (), meta: dict | None = None, reverse: bool = True) -> None:
        self.name = "scripted#m"
        self.fail, self.meta, self.reverse = (
            set(fail),
            meta or {"finish_reason": "stop", "prompt_format": "chat"},
            reverse,
        )
        self.asked: list[tuple[str, int]] = []
        self.closed = 0

    def fingerprint(self) -> dict:
        return dict(FP)

    def generate(self, prompts: Sequence[str], seeds: Sequence[int], settings: GenerationSettings) -> Iterator:
        order = list(range(len(prompts)))
        return self._replies(prompts, seeds, order[::-1] if self.reverse else order)

    def _replies(self, prompts, seeds, order) -> Iterator[tuple[int, Reply]]:
        try:
            for i in order:
                self.asked.append((prompts[i], seeds[i]))
                if prompts[i] in self.fail:
                    yield i, Reply(None, f"HTTP 500 for {prompts[i]}", {"attempts": 3})
                else:
                    yield i, Reply(f"reply to {prompts[i]} #{seeds[i]}", None, dict(self.meta))
        finally:
            self.closed += 1


def _rows(prompts: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"id": [f"r{i}" for i in range(len(prompts))], "prompt": prompts, "extra": range(len(prompts))})


GREEDY = GenerationSettings(temperature=0.0, top_p=None, max_new_tokens=8)


# ------------------------------------------------------------------------------------------------ settings
def test_settings_defaults_and_decoding():
    s = GenerationSettings()
    assert (s.temperature, s.top_p, s.max_new_tokens, s.seed, s.samples, s.batch_size) == (0.6, 0.9, 200, 0, 1, 8)
    assert s.decoding() == {"temperature": 0.6, "top_p": 0.9, "max_new_tokens": 200, "seed": 0}
    assert settings_dict(GenerationSettings(samples=3, batch_size=2)) == {
        "temperature": 0.6,
        "top_p": 0.9,
        "max_new_tokens": 200,
        "seed": 0,
        "samples": 3,
        "batch_size": 2,
    }
    assert DEFAULT_MODEL == "embedded:smollm2-135m-instruct"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -0.1}, "--temperature must be >= 0 and --top-p in (0, 1]"),
        ({"top_p": 0.0}, "--temperature must be >= 0 and --top-p in (0, 1]"),
        ({"top_p": 1.01}, "--temperature must be >= 0 and --top-p in (0, 1]"),
        ({"max_new_tokens": 0}, "--max-new-tokens, --samples and --batch-size must be at least 1"),
        ({"samples": 0}, "--max-new-tokens, --samples and --batch-size must be at least 1"),
        ({"batch_size": 0}, "--max-new-tokens, --samples and --batch-size must be at least 1"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict, message: str):
    with pytest.raises(ValueError) as info:
        GenerationSettings(**kwargs)
    assert str(info.value) == message


@pytest.mark.parametrize(
    "edge", [{"temperature": 0.0}, {"top_p": 1.0}, {"top_p": None}, {"max_new_tokens": 1}, {"samples": 1}, {"batch_size": 1}]
)  # fmt: skip
def test_the_edges_of_the_settings_are_allowed(edge: dict):
    assert all(getattr(GenerationSettings(**edge), k) == v for k, v in edge.items())


def test_item_seed_is_a_stable_hash_of_seed_prompt_and_sample():
    expected = int(hashlib.sha256(b"7:r3:2").hexdigest()[:8], 16)
    assert item_seed(7, "r3", 2) == expected < 2**32
    assert len({item_seed(0, "a", 0), item_seed(1, "a", 0), item_seed(0, "b", 0), item_seed(0, "a", 1)}) == 4


def test_a_reply_is_truncated_only_at_the_length_cap():
    assert Reply("x", None, {"finish_reason": "length"}).truncated is True
    assert Reply("x", None, {"finish_reason": "stop"}).truncated is False
    assert Reply("x").truncated is False and Reply("x").meta == {} and Reply("x").error is None


# ------------------------------------------------------------------------------------------------ cache
def test_cache_key_is_the_sha256_of_model_prompt_sample_and_settings():
    settings = GREEDY.decoding()
    blob = json.dumps({"model": FP, "prompt": "p", "sample": 0, "settings": settings}, sort_keys=True)
    assert cache_key(FP, "p", 0, settings) == hashlib.sha256(blob.encode("utf-8")).hexdigest()
    keys = {
        cache_key(FP, "p", 0, settings),
        cache_key({**FP, "model": "other"}, "p", 0, settings),
        cache_key(FP, "q", 0, settings),
        cache_key(FP, "p", 1, settings),
        cache_key(FP, "p", 0, {**settings, "seed": 1}),
    }
    assert len(keys) == 5
    assert cache_key(dict(reversed(list(FP.items()))), "p", 0, settings) == cache_key(FP, "p", 0, settings)


def test_the_cache_stores_replies_across_reopening(tmp_path: Path):
    path = tmp_path / "sub" / "dir" / "c.sqlite"  # the folders are created
    with ResponseCache(path) as cache:
        assert cache.path == path and cache.get("k") is None and cache.count() == 0
        cache.put("k", "r0", 0, "doctor", {"b": 1, "a": [2]})
        cache.put("k2", "r1", 1, "", {})  # an empty reply is a reply
        cache.put("k", "r0", 0, "nurse", {"z": 1, "a": 2})  # the same key again: replaced, not added
        assert cache.count() == 2
    with ResponseCache(path) as cache:
        assert cache.get("k") == {"text": "nurse", "meta": {"z": 1, "a": 2}} and cache.get("k2") == {
            "text": "",
            "meta": {},
        }
        with pytest.raises(TypeError) as info:
            cache.put("k3", "r2", 0, None, {})  # type: ignore[arg-type]
        assert str(info.value) == ("ResponseCache.put stores replies only (text must be a str); errors are not cached")
        assert cache.count() == 2
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT key, prompt_id, sample, status, text, error, meta FROM responses ORDER BY key")
        assert rows.fetchall() == [
            ("k", "r0", 0, "ok", "nurse", None, '{"a": 2, "z": 1}'),  # meta stored with sorted keys
            ("k2", "r1", 1, "ok", "", None, "{}"),
        ]
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_reply_not_marked_ok_is_never_served(tmp_path: Path):
    path = tmp_path / "c.sqlite"
    ResponseCache(path).close()
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO responses VALUES ('bad', 'r', 0, 'error', NULL, 'HTTP 500', '{}', 0)")
        db.execute("INSERT INTO responses VALUES ('bare', 'r', 0, 'ok', 'x', NULL, NULL, 0)")  # no meta stored
    with ResponseCache(path) as cache:
        assert cache.get("bad") is None and cache.count() == 1
        assert cache.get("bare") == {"text": "x", "meta": {}}


def test_a_closed_cache_is_closed(tmp_path: Path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    cache.put("k", "r", 0, "x", {})
    cache.close()
    with pytest.raises(sqlite3.ProgrammingError):
        cache.count()


# ------------------------------------------------------------------------------------------------ collect
def test_collect_returns_the_rows_order_with_every_column(tmp_path: Path):
    runner = Scripted(meta={"finish_reason": "length", "prompt_format": "plain", "attempts": 1})
    rows = _rows(["a", "b", "c"])
    settings = GenerationSettings(temperature=0.0, top_p=None, max_new_tokens=8, seed=5)
    seen: list[tuple[int, int]] = []
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        frame = collect(runner, rows, settings, cache, progress=lambda done, total: seen.append((done, total)))
    assert list(frame.columns) == ["id", "prompt", "extra", "sample", "seed", "model", "response", "status", "error",
                                   "cached", "prompt_format", "finish_reason", "truncated", "meta"]  # fmt: skip
    assert frame["id"].tolist() == ["r0", "r1", "r2"] and frame["extra"].tolist() == [0, 1, 2]
    seeds = [item_seed(5, f"r{i}", 0) for i in range(3)]
    assert frame["seed"].tolist() == seeds and frame["sample"].tolist() == [0, 0, 0]
    assert frame["response"].tolist() == [f"reply to {p} #{s}" for p, s in zip("abc", seeds, strict=True)]
    assert set(frame["model"]) == {"scripted#m"} and set(frame["status"]) == {"ok"}
    assert frame["error"].isna().all() and not frame["cached"].any()
    assert set(frame["prompt_format"]) == {"plain"} and set(frame["finish_reason"]) == {"length"}
    assert frame["truncated"].all()
    assert json.loads(frame["meta"][0]) == {"attempts": 1, "finish_reason": "length", "prompt_format": "plain"}
    assert frame["meta"][0] == json.dumps(json.loads(frame["meta"][0]), sort_keys=True)
    assert seen == [(1, 3), (2, 3), (3, 3)]
    assert runner.closed == 1
    with sqlite3.connect(tmp_path / "c.sqlite") as db:  # each reply stored with its row id and sample index
        stored = db.execute("SELECT prompt_id, sample, text FROM responses ORDER BY prompt_id").fetchall()
    assert stored == [(f"r{i}", 0, f"reply to {p} #{s}") for i, (p, s) in enumerate(zip("abc", seeds, strict=True))]


def test_a_runner_may_return_any_iterator(tmp_path: Path):
    class Listing(Scripted):
        def generate(self, prompts, seeds, settings):
            return iter([(i, Reply(f"r{i}", None, {})) for i in range(len(prompts))])  # no close()

    with ResponseCache(tmp_path / "c.sqlite") as cache:
        frame = collect(Listing(), _rows(["a", "b"]), GREEDY, cache)
    assert frame["response"].tolist() == ["r0", "r1"]


def test_a_rerun_is_served_from_the_cache_and_asks_nothing(tmp_path: Path):
    rows = _rows(["a", "b"])
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        first = collect(Scripted(), rows, GREEDY, cache)
        again_runner = Scripted()
        again = collect(again_runner, rows, GREEDY, cache)
        assert again_runner.asked == [] and again["cached"].all()
        assert again["response"].tolist() == first["response"].tolist()
        assert json.loads(again["meta"][0]) == {"finish_reason": "stop", "prompt_format": "chat"}
        assert set(again["prompt_format"]) == {"chat"} and not again["truncated"].any()
        # other decoding settings or another model: asked again
        other = Scripted()
        collect(other, rows, GenerationSettings(temperature=0.0, top_p=None, max_new_tokens=9), cache)
        assert len(other.asked) == 2


def test_samples_and_shared_prompts(tmp_path: Path):
    runner = Scripted(reverse=False)
    rows = _rows(["same", "same", "other"])
    settings = GenerationSettings(temperature=1.0, samples=2)
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        frame = collect(runner, rows, settings, cache)
        assert cache.count() == 4  # (same, 0), (same, 1), (other, 0), (other, 1)
    assert len(runner.asked) == 4 and sorted(p for p, _ in runner.asked) == ["other", "other", "same", "same"]
    assert frame["id"].tolist() == ["r0", "r0", "r1", "r1", "r2", "r2"] and frame["sample"].tolist() == [0, 1] * 3
    # the second row with the same prompt gets the first one's replies (asked once), but its own seed column
    assert frame["response"][2] == frame["response"][0] and frame["response"][3] == frame["response"][1]
    assert frame["seed"][2] == item_seed(0, "r1", 0) != frame["seed"][0]
    # the shared prompt was asked once, as the first row that has it: under that row's seed
    assert frame["response"][0] == f"reply to same #{item_seed(0, 'r0', 0)}"


def test_errors_are_reported_never_cached_and_retried_on_the_next_run(tmp_path: Path):
    rows = _rows(["a", "bad", "c"])
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        frame = collect(Scripted(fail=["bad"]), rows, GREEDY, cache)
        assert frame["status"].tolist() == ["ok", "error", "ok"] and cache.count() == 2
        assert frame["cached"].tolist() == [False, False, False]
        assert frame["error"][1] == "HTTP 500 for bad" and pd.isna(frame["response"][1])
        assert json.loads(frame["meta"][1]) == {"attempts": 3} and frame["prompt_format"][1] == ""
        assert pd.isna(frame["finish_reason"][1]) and not frame["truncated"][1]
        retry = Scripted()
        again = collect(retry, rows, GREEDY, cache)
        assert [p for p, _ in retry.asked] == ["bad"] and again["status"].tolist() == ["ok"] * 3
        assert again["cached"].tolist() == [True, False, True]


def test_a_reply_with_neither_text_nor_error_is_an_error(tmp_path: Path):
    class Silent(Scripted):
        def _replies(self, prompts, seeds, order):
            yield 0, Reply(None, None, {})

    with ResponseCache(tmp_path / "c.sqlite") as cache:
        frame = collect(Silent(), _rows(["a"]), GREEDY, cache)
        assert frame["status"].tolist() == ["error"] and frame["error"][0] == "no reply" and cache.count() == 0


def test_consecutive_failures_abort_keeping_every_reply(tmp_path: Path):
    prompts = ["ok0", "ok1"] + [f"bad{i}" for i in range(4)] + ["ok2"]
    runner = Scripted(fail=[p for p in prompts if p.startswith("bad")], reverse=False)
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        with pytest.raises(RunAbortedError) as info:
            collect(runner, _rows(prompts), GREEDY, cache, max_consecutive_errors=4)
        assert cache.count() == 2 and runner.closed == 1  # the runner is stopped at once
        assert len(runner.asked) == 6  # nothing asked after the fourth failure in a row
    assert str(info.value) == (
        f"4 calls in a row failed (last: HTTP 500 for bad3); stopping. 2 replies are saved in {tmp_path / 'c.sqlite'}; "
        "fix the model/endpoint and rerun the same command to resume."
    )


def test_a_reply_resets_the_failure_count(tmp_path: Path):
    prompts = ["bad0", "bad1", "ok0", "bad2", "bad3", "ok1", "bad4", "bad5"]
    runner = Scripted(fail=[p for p in prompts if p.startswith("bad")], reverse=False)
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        frame = collect(runner, _rows(prompts), GREEDY, cache, max_consecutive_errors=3)
    assert frame["status"].tolist().count("ok") == 2 and len(runner.asked) == 8
    with ResponseCache(tmp_path / "d.sqlite") as cache, pytest.raises(RunAbortedError, match=r"^10 calls in a row"):
        collect(Scripted(fail=[f"p{i}" for i in range(12)], reverse=False), _rows([f"p{i}" for i in range(12)]), GREEDY, cache)  # fmt: skip


def test_nothing_to_ask_still_returns_every_row(tmp_path: Path):
    rows = _rows(["a"])
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        collect(Scripted(), rows, GREEDY, cache)
        runner = Scripted()
        frame = collect(runner, rows, GREEDY, cache, progress=lambda *_: pytest.fail("no call, no progress"))
    assert runner.asked == [] and len(frame) == 1 and frame["cached"].all()
