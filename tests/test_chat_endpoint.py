"""The OpenAI-compatible runner and ``collect`` against a local fake server (``tests/openai_server.py``).

Exact call counts, zero lost rows, deterministic output order, zero calls on a rerun, fatal errors that stop at
once, a refused connection that fails without retrying, real (and bounded) overlap of requests, the exact backoff
sequence with its cap, and a cache key that changes with every decoding setting and the model.
"""

from __future__ import annotations

import json
import logging
import threading

import pandas as pd
import pytest

from queerbench.models.generation import (
    EndpointError,
    EndpointUnreachableError,
    GenerationSettings,
    OpenAIChatRunner,
    ResponseCache,
    RunAbortedError,
    collect,
    load_runner,
)
from tests.net import free_port
from tests.openai_server import FakeOpenAI

KEY = "sk-test-SECRET-123456"


def _rows(n: int) -> pd.DataFrame:
    return pd.DataFrame({"id": [f"p{i}" for i in range(n)], "prompt": [f"prompt number {i}." for i in range(n)]})


def _runner(url: str, monkeypatch: pytest.MonkeyPatch, sleeps: list[float] | None = None, **kw) -> OpenAIChatRunner:
    monkeypatch.setenv("QB_TEST_KEY", KEY)
    kw.setdefault("requests_per_minute", None)
    kw.setdefault("jitter", lambda: 0.0)  # no jitter: the backoff sequence is exact
    return OpenAIChatRunner(
        url,
        kw.pop("model", "fake-model"),
        api_key_env="QB_TEST_KEY",
        sleep=(sleeps if sleeps is not None else []).append,
        **kw,
    )


GREEDY = GenerationSettings(temperature=0.0, top_p=None, max_new_tokens=16)


def test_transient_failures_are_retried_exactly_and_nothing_is_lost(tmp_path, monkeypatch) -> None:
    failures = ["429", "500", "502", "503", "504", "malformed", "nochoices", "truncated", "drop", "cut"]
    rows = _rows(20)
    sleeps: list[float] = []
    with FakeOpenAI(script=failures, echo=True) as server:
        runner = _runner(server.url, monkeypatch, sleeps, concurrency=4, max_retries=len(failures))
        with ResponseCache(tmp_path / "c.sqlite") as cache:
            frame = collect(runner, rows, GREEDY, cache)
            assert server.calls == runner.calls == 20 + len(failures)  # one extra call per injected failure
            assert len(sleeps) == len(failures)
            assert len(frame) == 20 and (frame["status"] == "ok").all() and cache.count() == 20
            assert frame["id"].tolist() == rows["id"].tolist()  # the rows' order
            assert frame["response"].tolist() == [f"echo: {p}" for p in rows["prompt"]]  # nothing mixed up
            assert set(server.auth_headers) == {f"Bearer {KEY}"}
            again = collect(runner, rows, GREEDY, cache)
            assert server.calls == 30 and again["cached"].all()  # rerun: zero calls
            assert again["response"].tolist() == frame["response"].tolist()
    stored = (tmp_path / "c.sqlite").read_bytes().decode("latin-1")
    assert KEY not in frame.to_json() and KEY not in stored


def test_backoff_sequence_is_exponential_capped_and_honours_retry_after(tmp_path, monkeypatch) -> None:
    sleeps: list[float] = []
    script = ["500", "429:3", "500", "500", "429:30", "500"]
    with FakeOpenAI(script=script) as server:
        runner = _runner(server.url, monkeypatch, sleeps, concurrency=1, max_retries=6, backoff_base=1, backoff_max=5)
        reply = runner.call("hello", 1, GREEDY)
        assert reply.error is None and reply.meta["attempts"] == 7 and server.calls == 7
        # 1·2^k, k the retries without a Retry-After so far: 1, Retry-After 3 (sets it, k stays), 2, 4,
        # Retry-After 30 (obeyed: up to 60 s), 8→cap 5
        assert sleeps == [1, 3, 2, 4, 30, 5]
    sleeps.clear()
    with FakeOpenAI(script=["503"] * 3) as server:
        runner = _runner(server.url, monkeypatch, sleeps, concurrency=1, max_retries=2, backoff_base=0.5)
        with ResponseCache(tmp_path / "c.sqlite") as cache:
            frame = collect(runner, _rows(1), GREEDY, cache)
            assert sleeps == [0.5, 1.0] and server.calls == 3
            assert frame["status"].tolist() == ["error"] and "gave up after 3 attempts: HTTP 503" in frame["error"][0]
            assert frame["response"].isna().all() and cache.count() == 0  # an error is never stored as a reply
            again = collect(runner, _rows(1), GREEDY, cache)  # …so a rerun asks again
            assert server.calls == 4 and again["status"].tolist() == ["ok"] and cache.count() == 1


@pytest.mark.parametrize("code", ["401", "403", "404"])
def test_fatal_answers_stop_the_run_at_once(tmp_path, monkeypatch, code) -> None:
    rows = _rows(12)
    with FakeOpenAI(by_prompt={"prompt number 5.": [code]}) as server:
        runner = _runner(server.url, monkeypatch, concurrency=1)
        with ResponseCache(tmp_path / "c.sqlite") as cache:
            with pytest.raises(EndpointError, match=f"HTTP {code}") as err:
                collect(runner, rows, GREEDY, cache)
            assert server.calls == 6  # prompts 0-5, then nothing more
            assert cache.count() == 5  # what arrived before the fatal answer is kept
    message = str(err.value)
    assert "\n" not in message and KEY not in message and server.url in message
    assert ("API key" in message) == (code != "404") and ("unknown model" in message) == (code == "404")


def test_fatal_answer_stops_concurrent_workers_too(tmp_path, monkeypatch) -> None:
    # 4 requests get in flight together (hold=4); prompt 0's fails at once, the 3 others are slow to answer, so
    # no worker is free to start a fifth request before the stop
    latency = lambda body: 0.0 if body["messages"][-1]["content"] == "prompt number 0." else 0.5  # noqa: E731
    with FakeOpenAI(by_prompt={"prompt number 0.": ["401"]}, latency=latency, hold=4) as server:
        runner = _runner(server.url, monkeypatch, concurrency=4)
        with ResponseCache(tmp_path / "c.sqlite") as cache, pytest.raises(EndpointError, match="HTTP 401"):
            collect(runner, _rows(40), GREEDY, cache)
        assert server.calls == 4


def test_refused_connection_fails_without_retrying_and_names_the_url(tmp_path, monkeypatch) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    sleeps: list[float] = []
    runner = _runner(url, monkeypatch, sleeps, concurrency=8, max_retries=5)
    with ResponseCache(tmp_path / "c.sqlite") as cache, pytest.raises(EndpointUnreachableError) as err:
        collect(runner, _rows(20), GREEDY, cache)
    assert f"{url}/chat/completions" in str(err.value) and "\n" not in str(err.value)
    assert sleeps == []  # no backoff: a refused connection is not retried
    assert runner.calls <= 8  # at most the requests already started by the workers, each tried once


def test_dead_server_mid_run_keeps_what_arrived(tmp_path, monkeypatch) -> None:
    with FakeOpenAI() as server:
        runner = _runner(server.url, monkeypatch, concurrency=2)
        cache = ResponseCache(tmp_path / "c.sqlite")
        collect(runner, _rows(3), GREEDY, cache)
    with pytest.raises(EndpointUnreachableError, match="rerun the same command to resume"):
        collect(runner, _rows(6), GREEDY, cache)
    assert cache.count() == 3
    cache.close()


@pytest.mark.parametrize("n", [1, 3, 8])
def test_concurrency_overlaps_exactly_n_requests(tmp_path, monkeypatch, n) -> None:
    # the server holds each request until n are in flight: a runner with less overlap would never get there
    with FakeOpenAI(hold=n, hold_timeout=20, echo=True) as server:
        runner = _runner(server.url, monkeypatch, concurrency=n)
        with ResponseCache(tmp_path / "c.sqlite") as cache:
            frame = collect(runner, _rows(3 * n), GREEDY, cache)
        assert server.max_in_flight == n  # reached, and never exceeded
        assert server.calls == 3 * n and (frame["status"] == "ok").all()


def test_default_concurrency_is_8(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    assert OpenAIChatRunner("https://api.example.com/v1", "m").concurrency == 8
    assert load_runner("m", "https://api.example.com/v1").concurrency == 8  # type: ignore[attr-defined]


def test_output_order_is_the_rows_order_whatever_the_arrival_order(tmp_path, monkeypatch) -> None:
    n = 8
    last_seen = threading.Event()

    def latency(body: dict) -> float:
        prompt = body["messages"][-1]["content"]
        if prompt == f"prompt number {n - 1}.":
            last_seen.set()
        elif prompt == "prompt number 0.":
            last_seen.wait(20)  # prompt 0 is answered only after the server has seen the last prompt
        return 0.0

    arrivals: list[int] = []

    class Recording:
        def __init__(self, inner: OpenAIChatRunner) -> None:
            self.inner, self.name = inner, inner.name

        def fingerprint(self) -> dict:
            return self.inner.fingerprint()

        def generate(self, prompts, seeds, settings):
            for i, reply in self.inner.generate(prompts, seeds, settings):
                arrivals.append(int(prompts[i].split()[-1].rstrip(".")))
                yield i, reply

    with FakeOpenAI(latency=latency, echo=True) as server:
        runner = Recording(_runner(server.url, monkeypatch, concurrency=2))
        with ResponseCache(tmp_path / "c.sqlite") as cache:
            frame = collect(runner, _rows(n), GREEDY, cache)
    assert arrivals.index(0) >= n - 2  # prompt 0 arrived after (almost) all others…
    assert frame["id"].tolist() == [f"p{i}" for i in range(n)]  # …but comes first in the output
    assert frame["response"].tolist() == [f"echo: prompt number {i}." for i in range(n)]


def test_cache_key_changes_with_every_decoding_setting_and_the_model(tmp_path, monkeypatch) -> None:
    rows = _rows(3)
    base = GenerationSettings(temperature=0.7, top_p=0.9, max_new_tokens=20, seed=1)
    with FakeOpenAI() as server, ResponseCache(tmp_path / "c.sqlite") as cache:
        runner = _runner(server.url, monkeypatch)
        collect(runner, rows, base, cache)
        assert server.calls == 3
        collect(runner, rows, GenerationSettings(temperature=0.7, top_p=0.9, max_new_tokens=20, seed=1), cache)
        collect(
            runner, rows, GenerationSettings(temperature=0.7, top_p=0.9, max_new_tokens=20, seed=1, batch_size=2), cache
        )
        assert server.calls == 3  # the same settings (batch size is not a decoding setting) hit the cache
        variants = [
            (runner, GenerationSettings(temperature=0.2, top_p=0.9, max_new_tokens=20, seed=1)),
            (runner, GenerationSettings(temperature=0.7, top_p=0.5, max_new_tokens=20, seed=1)),
            (runner, GenerationSettings(temperature=0.7, top_p=None, max_new_tokens=20, seed=1)),
            (runner, GenerationSettings(temperature=0.7, top_p=0.9, max_new_tokens=10, seed=1)),
            (runner, GenerationSettings(temperature=0.7, top_p=0.9, max_new_tokens=20, seed=2)),
            (_runner(server.url, monkeypatch, system_prompt="Be brief."), base),
            (_runner(server.url, monkeypatch, model="other-model"), base),
            (_runner(server.url, monkeypatch, extra_body={"safety_settings": []}), base),
        ]
        for k, (r, settings) in enumerate(variants, start=1):
            frame = collect(r, rows, settings, cache)
            assert server.calls == 3 + 3 * k and not frame["cached"].any(), k  # each variant misses…
            assert collect(r, rows, settings, cache)["cached"].all()  # …and then hits
        assert server.calls == 3 + 3 * len(variants)
        collect(
            runner, rows, GenerationSettings(temperature=0.7, top_p=0.9, max_new_tokens=20, seed=1, samples=2), cache
        )
        assert server.calls == 3 + 3 * len(variants) + 3  # only the new second sample of each row


def test_request_body_system_prompt_top_p_and_extra_body(monkeypatch) -> None:
    with FakeOpenAI() as server:
        runner = _runner(server.url, monkeypatch, system_prompt="Be brief.", extra_body={"safety_settings": [{"a": 1}]})
        runner.call("hi", 7, GenerationSettings(temperature=0, top_p=None, max_new_tokens=5))
        runner.call("hi", 7, GenerationSettings(temperature=0.9, top_p=0.8, max_new_tokens=5))
    first, second = server.bodies
    assert first["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert "top_p" not in first and first["temperature"] == 0 and first["max_tokens"] == 5 and first["seed"] == 7
    assert second["top_p"] == 0.8 and first["safety_settings"] == [{"a": 1}] == second["safety_settings"]
    assert first["model"] == "fake-model"


def test_finish_reason_and_truncation_are_recorded(tmp_path, monkeypatch) -> None:
    with FakeOpenAI(script=["length", "ok", "null"]) as server, ResponseCache(tmp_path / "c.sqlite") as cache:
        frame = collect(_runner(server.url, monkeypatch, concurrency=1), _rows(3), GREEDY, cache)
    assert frame["finish_reason"].tolist() == ["length", "stop", "stop"]
    assert frame["truncated"].tolist() == [True, False, False]
    assert frame["status"].tolist() == ["ok"] * 3 and frame["response"][2] == ""  # null content: an empty reply
    assert json.loads(frame["meta"][0])["finish_reason"] == "length"


def test_per_item_client_errors_are_not_retried_and_consecutive_failures_abort(tmp_path, monkeypatch) -> None:
    sleeps: list[float] = []
    with FakeOpenAI(script=["400", "ok", "400", "400", "400", "400"]) as server:
        runner = _runner(server.url, monkeypatch, sleeps, concurrency=1)
        with ResponseCache(tmp_path / "c.sqlite") as cache:
            with pytest.raises(RunAbortedError, match="3 calls in a row failed"):
                collect(runner, _rows(10), GREEDY, cache, max_consecutive_errors=3)
            assert server.calls == 5 and sleeps == [] and cache.count() == 1


def test_api_key_rule(monkeypatch, caplog) -> None:
    monkeypatch.delenv("QB_NO_KEY", raising=False)
    with pytest.raises(ValueError, match="QB_NO_KEY is not set") as err:
        OpenAIChatRunner("https://api.example.com/v1", "m", api_key_env="QB_NO_KEY")
    assert "\n" not in str(err.value)
    with FakeOpenAI() as server:
        with caplog.at_level(logging.WARNING, logger="queerbench.models.generation.endpoint"):
            runner = OpenAIChatRunner(server.url, "m", api_key_env="QB_NO_KEY", sleep=lambda s: None)
        assert sum("QB_NO_KEY is not set" in r.getMessage() for r in caplog.records) == 1
        assert runner.call("hi", 0, GREEDY).error is None
        assert server.auth_headers == [None]  # no Authorization header at all
    for local in ("http://localhost:8000/v1", "http://127.0.0.5/v1", "http://[::1]:8080/v1"):
        OpenAIChatRunner(local, "m", api_key_env="QB_NO_KEY")  # loopback: allowed without a key


def test_bad_arguments_fail_early_with_one_line(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with pytest.raises(ValueError, match="http"):
        OpenAIChatRunner("localhost:8000", "m")
    with pytest.raises(ValueError, match="--model"):
        OpenAIChatRunner("http://127.0.0.1:1/v1", "")
    for bad in (0, -1):
        with pytest.raises(ValueError, match="--concurrency must be"):
            OpenAIChatRunner("http://127.0.0.1:1/v1", "m", concurrency=bad)
        with pytest.raises(ValueError, match="--concurrency must be"):
            load_runner("m", "http://127.0.0.1:1/v1", concurrency=bad)
    with pytest.raises(ValueError, match="top-p"):
        GenerationSettings(top_p=0)


def test_retry_after_as_an_http_date(monkeypatch) -> None:
    import email.utils
    import time

    when = email.utils.formatdate(time.time() + 3, usegmt=True)  # whole seconds: 2 to 3 s from now
    sleeps: list[float] = []
    with FakeOpenAI(script=[f"429:{when}"]) as server:
        runner = _runner(server.url, monkeypatch, sleeps, concurrency=1, backoff_base=0.5)
        assert runner.call("hi", 0, GREEDY).error is None and server.calls == 2
    assert len(sleeps) == 1 and 1.5 <= sleeps[0] <= 3.0  # the date, not the 0.5 s backoff
