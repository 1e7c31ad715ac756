"""Retries as serving clients do them, and failed prompts that do not stop the others.

- the delay: a ``Retry-After`` (or ``retry-after-ms``) the server sends sets it, capped, 0 meaning at once; only
  without one, exponential backoff shortened by 0–25 % jitter (both clients: endpoint and Perspective);
- a prompt that fails after its retries: every other prompt is asked and saved, the failures are reported (which,
  how many, why), ``queerbench run`` exits 1, nothing failed is cached, and a rerun asks only the failed prompts,
  also when the failure is in an earlier chunk than others.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from requests.structures import CaseInsensitiveDict

from queerbench.base.http import JITTER, retry_after_from_headers, retry_delay
from queerbench.cli import main
from queerbench.models.generation import GenerationSettings, OpenAIChatRunner, ResponseCache, collect
from queerbench.models.generation.failures import FailedPrompt, describe_failures, failed_prompts, short_reason
from queerbench.run import pipeline as run_module
from queerbench.run.pipeline import RunOptions
from tests.openai_server import FakeOpenAI
from tests.test_instructed_method import BlankServer

GREEDY = GenerationSettings(temperature=0.0, top_p=None, max_new_tokens=4)
FAST = ["--bootstrap", "20", "--permutations", "20", "--toxicity", "none", "--requests-per-minute", "1000000"]


# ------------------------------------------------------------------------------------------------ the delay
@pytest.mark.parametrize(("hint", "expected"), [(0.0, 0.0), (0.25, 0.25), (3.0, 3.0), (99.0, 10.0)])
def test_a_retry_after_sets_the_delay_whatever_the_attempt(hint: float, expected: float):
    for attempt in (0, 3, 6):  # exponential alone would be 1, 8, 10 (capped)
        assert retry_delay(attempt, hint, base=1.0, cap=10.0, rand=lambda: 0.9) == expected


def test_an_endpoint_backs_off_like_the_openai_client_but_obeys_a_longer_retry_after():
    """0.5 s doubling to at most 8 s without a Retry-After (a call in backoff holds no slot; a short cap keeps one
    unlucky prompt from trailing a run); a server's Retry-After is obeyed up to 60 s, beyond the backoff's cap."""
    runner = OpenAIChatRunner("http://127.0.0.1:9/v1", "m", requests_per_minute=None, jitter=lambda: 0.0)
    assert [runner.backoff(a) for a in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert runner.backoff(0, 30.0) == 30.0 and runner.backoff(5, 600.0) == 60.0 and runner.backoff(2, 0.0) == 0.0


def test_without_retry_after_the_backoff_is_exponential_with_up_to_a_quarter_off():
    assert [retry_delay(a, None, base=0.5, cap=6.0, rand=lambda: 0.0) for a in range(5)] == [0.5, 1.0, 2.0, 4.0, 6.0]
    assert retry_delay(2, None, base=0.5, cap=6.0, rand=lambda: 1.0) == 2.0 * (1 - JITTER) == 1.5
    assert retry_delay(2, None, base=0.5, cap=6.0, rand=lambda: 0.5) == 1.75
    assert retry_delay(10_000, None, base=1.0, cap=60.0, rand=lambda: 0.0) == 60.0  # no overflow for many attempts
    import random

    rng = random.Random(7)
    draws = [retry_delay(1, None, base=1.0, cap=60.0, rand=rng.random) for _ in range(200)]
    assert all(1.5 < d <= 2.0 for d in draws) and len(set(draws)) == 200  # spread over the band, never the same


def test_retry_after_ms_wins_over_retry_after_and_headers_are_case_blind():
    assert retry_after_from_headers(CaseInsensitiveDict({"retry-after-ms": "250", "Retry-After": "9"})) == 0.25
    assert retry_after_from_headers(CaseInsensitiveDict({"RETRY-AFTER": "0"})) == 0.0
    assert retry_after_from_headers({"retry-after-ms": "soon", "Retry-After": "2"}) == 2.0  # unreadable ms: ignored
    assert retry_after_from_headers({}) is None and retry_after_from_headers({"Retry-After": "soon"}) is None


def _runner(url: str, monkeypatch: pytest.MonkeyPatch, sleeps: list[float], **kw) -> OpenAIChatRunner:
    monkeypatch.setenv("QB_RETRY_KEY", "sk-retry")
    return OpenAIChatRunner(url, "m", api_key_env="QB_RETRY_KEY", requests_per_minute=None, sleep=sleeps.append, **kw)


def test_the_endpoint_retries_a_retry_after_0_at_once_and_jitters_only_without_one(monkeypatch):
    sleeps: list[float] = []
    with FakeOpenAI(script=["429", "429:2", "500", "503"]) as server:
        runner = _runner(server.url, monkeypatch, sleeps, max_retries=4, backoff_base=1.0, jitter=lambda: 1.0)
        reply = runner.call("hi", 0, GREEDY)
    assert reply.error is None and server.calls == 5
    # 429 + Retry-After: 0 → 0 (no 1 s floor); Retry-After: 2 → 2; 500/503 → 1·0.75, 2·0.75 (jitter at its largest:
    # the server's paced retries do not advance the exponent)
    assert sleeps == [0.0, 2.0, 0.75, 1.5]


def test_the_endpoint_jitter_comes_from_the_injected_source_and_stays_in_its_band(monkeypatch):
    draws = iter([0.0, 0.5, 0.999])
    sleeps: list[float] = []
    with FakeOpenAI(script=["500", "500", "500"]) as server:
        runner = _runner(server.url, monkeypatch, sleeps, max_retries=3, backoff_base=2.0, jitter=lambda: next(draws))
        assert runner.call("hi", 0, GREEDY).error is None
    assert sleeps == pytest.approx([2.0, 4.0 * 0.875, 8.0 * (1 - 0.25 * 0.999)])


def test_the_perspective_client_shares_the_policy(monkeypatch, tmp_path: Path):
    from queerbench.scoring.perspective import PerspectiveScorer
    from tests.perspective_server import FakePerspective

    with FakePerspective(retry_after="0") as server:
        monkeypatch.setenv("PERSPECTIVE_API_KEY", "k-retry")
        monkeypatch.setenv("PERSPECTIVE_API_URL", server.url)
        scorer = PerspectiveScorer(qps=1e6, backoff_base=1.0, backoff_max=5.0, cache_dir=tmp_path / "c")
        sleeps: list[float] = []
        scorer._sleep, scorer._jitter = sleeps.append, lambda: 1.0
        server.script = ["429", "503", "ok"]
        scorer.score(["The person is a nurse."])
    assert sleeps == [0.0, 0.75]  # Retry-After: 0 at once; then 1 s (the first blind retry) less the largest jitter


# -------------------------------------------------------------------------------------------- failed prompts
def test_short_reasons_and_the_report():
    assert short_reason("gave up after 6 attempts: HTTP 500; HTTP 429; no answer within 60 s (ReadTimeout)") == (
        "no answer within 60 s (ReadTimeout)"
    )
    assert short_reason("HTTP 400: {'error': 'prompt rejected'}") == "HTTP 400"
    failures = [FailedPrompt(f"s{i}", 0, "gave up after 2 attempts: HTTP 500; HTTP 503") for i in range(11)]
    failures.append(FailedPrompt("s99", 1, "HTTP 400: rejected"))
    text = describe_failures(failures, 700, what="sentence")
    lines = text.splitlines()
    assert lines[0] == (
        "12 of 700 calls got no reply after their retries (HTTP 503 ×11, HTTP 400 ×1); every other reply is saved: "
        "rerun the same command to ask only these 12"
    )
    assert lines[1] == "  sentence s0, sample 0: gave up after 2 attempts: HTTP 500; HTTP 503"
    assert len(lines) == 1 + 10 + 1 and lines[-1] == "  … and 2 more"


def test_a_prompt_that_fails_its_retries_does_not_stop_the_others_and_is_never_cached(tmp_path: Path, monkeypatch):
    rows = pd.DataFrame({"id": [f"p{i}" for i in range(12)], "prompt": [f"prompt number {i}." for i in range(12)]})
    sleeps: list[float] = []
    with FakeOpenAI(by_prompt={"number 3.": ["500"] * 3}) as server:
        runner = _runner(server.url, monkeypatch, sleeps, concurrency=4, max_retries=2, jitter=lambda: 0.0)
        with ResponseCache(tmp_path / "c.sqlite") as cache:
            frame = collect(runner, rows, GREEDY, cache)
            assert frame["status"].tolist() == ["ok"] * 3 + ["error"] + ["ok"] * 8
            assert failed_prompts(frame) == [
                FailedPrompt("p3", 0, "gave up after 3 attempts: HTTP 500; HTTP 500; HTTP 500")
            ]
            assert cache.count() == 11 and server.calls == 11 + 3
            again = collect(runner, rows, GREEDY, cache)  # the rerun asks only the failed prompt
            assert server.calls == 14 + 1 and (again["status"] == "ok").all()
            assert again["cached"].sum() == 11 and not again.loc[3, "cached"]


def _sentences_with(words: list[str]) -> tuple[list[str], list[str]]:
    frame = run_module.run_items(RunOptions(limit=1))
    keys, ids = [], []
    for word in words:
        hits = frame[frame["masked_sentence"].str.contains(word, regex=False)]
        assert len(hits) == 1, (word, hits["masked_sentence"].tolist())  # the key picks exactly one sentence
        keys.append(hits["masked_sentence"].iloc[0])
        ids.append(hits["id"].iloc[0])
    return keys, ids


def test_a_run_with_failed_prompts_finishes_the_others_exits_1_and_a_rerun_asks_only_those(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    frame = run_module.run_items(RunOptions(limit=1))
    keys, ids = _sentences_with([frame["masked_sentence"].iloc[2], frame["masked_sentence"].iloc[40]])
    out = tmp_path / "run"
    # each failing prompt is answered 429 + Retry-After: 0 six times (the runner's 1 + 5 attempts): no waiting
    with BlankServer({"[MASK]": ["doctor"]}, by_prompt={k: ["429"] * 6 for k in keys}) as server:
        args = ["run", "--endpoint", server.url, "--model", "served", "--limit", "1", "--top-k", "1"]
        args += ["--out", str(out), *FAST]
        assert main(args) == 1
        err = capsys.readouterr().err
        assert server.calls == 75 + 2 * 6  # every other sentence was asked once, each failed one six times
        lines = err[err.index("queerbench: error:") :].strip().splitlines()  # after the progress bar's lines
        assert lines[0].startswith(
            "queerbench: error: 2 of 77 calls got no reply after their retries (HTTP 429 ×2); every other reply is "
            "saved: rerun the same command to ask only these 2"
        ), err
        assert any(
            line.startswith(f"  sentence {ids[0]}, sample 0: gave up after 6 attempts: HTTP 429") for line in lines
        )
        assert any(f"sentence {ids[1]}, sample 0" in line for line in lines) and "Traceback" not in err
        assert not (out / "predictions.parquet").exists()
        saved = {sid for p in (out / ".chunks").glob("chunk-*.parquet") for sid in pd.read_parquet(p)["id"]}
        assert saved == set(frame["id"]) - set(ids)  # every sentence with its replies is saved, the failed two not
        with ResponseCache(out / ".chunks" / "replies.sqlite") as cache:
            assert cache.count() == 75  # the failed calls are not stored as replies
        assert main(args) == 0  # the server answers now
        assert server.calls == 87 + 2  # the rerun asked only the two failed prompts
    preds = pd.read_parquet(out / "predictions.parquet")
    assert preds["tokens"].map(list).tolist() == [["doctor"]] * 77
    assert json.loads((out / "scores.json").read_text())["generation"]["overall"]["parse_rate"] == 1.0


def test_all_of_the_first_calls_failing_still_aborts_the_run(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with FakeOpenAI(script=["400"] * 200) as server:  # a server that rejects every request: a dead run, not a few
        args = ["run", "--endpoint", server.url, "--model", "served", "--limit", "1", "--top-k", "1"]
        code = main([*args, "--concurrency", "1", "--out", str(tmp_path / "dead"), *FAST])
    err = capsys.readouterr().err
    assert code == 2 and "10 calls in a row failed" in err and server.calls == 10
