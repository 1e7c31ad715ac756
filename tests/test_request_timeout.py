"""An endpoint that never answers ends a run in seconds with one line, ``--request-timeout`` sets the wait per
request, and a server that has answered once is retried as usual (issue 30: "no output for over 5 minutes")."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from queerbench.base.http import Attempt
from queerbench.cli import main
from queerbench.models.generation import EndpointUnreachableError, load_runner
from tests.test_instructed_method import BlankServer

FAST = ["--bootstrap", "20", "--permutations", "20", "--toxicity", "none", "--requests-per-minute", "100000"]


def test_a_server_that_never_answers_ends_the_run_in_seconds_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    out = tmp_path / "run"
    with BlankServer({"[MASK]": ["doctor"]}, latency=30.0) as server:  # answers after 30 s: never, for the run
        args = ["run", "--endpoint", server.url, "--model", "served", "--limit", "1", "--top-k", "1"]
        started = time.monotonic()
        code = main([*args, "--out", str(out), "--concurrency", "2", "--request-timeout", "0.5", *FAST])
        took = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 2 and took < 20, (code, took)  # 2 rounds of 2 requests at 0.5 s, and one backoff: seconds
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"queerbench: error: {server.url}/chat/completions answered none of 4 requests (no answer")
    assert "is the server up and serving served? A slow model needs a longer --request-timeout (now 0.5 s)" in line
    assert "Traceback" not in err and not out.exists()  # nothing was saved: no folder is left behind


def test_once_a_server_has_answered_its_timeouts_are_retried_as_usual(monkeypatch: pytest.MonkeyPatch):
    runner = load_runner("served", "http://127.0.0.1:9/v1", concurrency=2, requests_per_minute=None)
    timed_out = Attempt(problem="no answer within 60 s (ReadTimeout)", retry=True)
    runner._watch_silence(timed_out)
    runner._watch_silence(timed_out)
    runner._watch_silence(timed_out)  # 3 of the 4 a dead server gets
    runner._watch_silence(Attempt(ok=True, status=200))
    for _ in range(100):  # a slow spell later: every call is retried by its own rules, the run goes on
        runner._watch_silence(timed_out)
    fresh = load_runner("served", "http://127.0.0.1:9/v1", concurrency=2, requests_per_minute=None)
    for _ in range(3):
        fresh._watch_silence(timed_out)
    with pytest.raises(EndpointUnreachableError, match="answered none of 4 requests"):
        fresh._watch_silence(timed_out)


@pytest.mark.parametrize("value", ["0", "-1", "soon", "inf"])
def test_request_timeout_must_be_a_positive_number(value: str, capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit):
        main(["run", "--endpoint", "http://127.0.0.1:9/v1", "--model", "m", "--request-timeout", value])
    err = capsys.readouterr().err
    assert "--request-timeout" in err and err.count("\n") == 1
