"""The OpenAI-compatible runner against a local fake server: retries, exact call counts, cache, key hygiene."""

from __future__ import annotations

import pandas as pd
import pytest

from queerbench.scm.cache import ResponseCache
from queerbench.scm.dataset import scm_splits, select_rows
from queerbench.scm.runners import GenerationSettings, OpenAIChatRunner, RunAbortedError, collect
from tests.openai_server import FakeOpenAI

KEY = "sk-test-SECRET-123456"


def _runner(url: str, sleeps: list[float], monkeypatch: pytest.MonkeyPatch, **kw: object) -> OpenAIChatRunner:
    monkeypatch.setenv("QB_TEST_KEY", KEY)
    return OpenAIChatRunner(
        url,
        "fake-model",
        api_key_env="QB_TEST_KEY",
        requests_per_minute=6000,
        sleep=sleeps.append,
        max_retries=kw.pop("max_retries", 4),
        **kw,
    )  # type: ignore[arg-type]


def _rows(n: int) -> pd.DataFrame:
    return select_rows(scm_splits()["survey"], n)


def test_retries_then_everything_arrives_and_rerun_makes_no_calls(tmp_path, monkeypatch) -> None:
    sleeps: list[float] = []
    rows = _rows(4)
    settings = GenerationSettings(samples=2, temperature=0.9)
    with FakeOpenAI(script=["429", "500", "malformed", "nochoices"]) as server:
        runner = _runner(server.url, sleeps, monkeypatch)
        cache = ResponseCache(tmp_path / "c.sqlite")
        frame = collect(runner, rows, settings, cache)
        assert server.calls == 8 + 4  # 8 replies, the first one needed 4 extra attempts
        assert (frame["status"] == "ok").all() and len(frame) == 8
        assert set(frame["id"]) == set(rows["id"])
        # the first reply's four failed attempts back off 1, 2, 4, 8 s (base 1 s doubling; 429's Retry-After: 0 is
        # shorter); the other sleeps are the rate limiter's waits of at most 10 ms (6,000 requests per minute)
        assert [s for s in sleeps if s > 0.01] == [1.0, 2.0, 4.0, 8.0] and all(
            0 <= s <= 0.01 for s in sleeps if s <= 0.01
        )
        assert set(server.auth_headers) == {f"Bearer {KEY}"}
        assert {b["seed"] for b in server.bodies} and server.bodies[-1]["temperature"] == 0.9
        again = collect(runner, rows, settings, cache)
        assert server.calls == 12  # rerun: everything from the cache
        assert again["cached"].all()
        assert again["response"].tolist() == frame["response"].tolist()
        cache.close()
    dumped = frame.to_json() + (tmp_path / "c.sqlite").read_bytes().decode("latin-1")
    assert KEY not in dumped


def test_gives_up_per_item_and_reports_error_without_key(tmp_path, monkeypatch) -> None:
    sleeps: list[float] = []
    with FakeOpenAI(script=["500"] * 3 + ["401"]) as server:
        runner = _runner(server.url, sleeps, monkeypatch, max_retries=2)
        cache = ResponseCache(tmp_path / "c.sqlite")
        frame = collect(runner, _rows(3), GenerationSettings(), cache)
        assert server.calls == 3 + 1 + 1  # 3 tries for item 1, 401 is final for item 2, item 3 ok
        assert frame["status"].tolist() == ["error", "error", "ok"]
        assert "gave up after 3 attempts" in frame["error"][0] and "HTTP 401" in frame["error"][1]
        assert KEY not in frame.to_json()
        assert cache.count("ok") == 1 and cache.count("error") == 2
        again = collect(runner, _rows(3), GenerationSettings(), cache)  # errors are retried on rerun
        assert server.calls == 7 and (again["status"] == "ok").all()
        cache.close()


def test_endpoint_down_aborts_but_keeps_what_arrived(tmp_path, monkeypatch) -> None:
    with FakeOpenAI() as server:
        url = server.url
        runner = _runner(url, [], monkeypatch, max_retries=0)
        cache = ResponseCache(tmp_path / "c.sqlite")
        collect(runner, _rows(2), GenerationSettings(), cache)
    # server is gone now: every call fails with a connection error
    with pytest.raises(RunAbortedError, match="rerun the same command to resume"):
        collect(runner, _rows(6), GenerationSettings(), cache, max_consecutive_errors=3)
    assert cache.count("ok") == 2
    cache.close()


def test_bad_endpoint_arguments_fail_early() -> None:
    with pytest.raises(ValueError, match="http"):
        OpenAIChatRunner("localhost:8000", "m")
    with pytest.raises(ValueError, match="--model"):
        OpenAIChatRunner("http://127.0.0.1:1/v1", "")
