"""``queerbench scm run --endpoint`` against a local fake server: outputs, resume, one-line errors, key hygiene.

The runner itself (retries, backoff, concurrency, order, cache keys) is tested in ``tests/test_chat_endpoint.py``.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from queerbench.cli import main
from queerbench.models.generation import GenerationSettings, OpenAIChatRunner, ResponseCache, collect
from queerbench.tasks.scm.dataset import scm_splits, select_rows
from tests.net import free_port
from tests.openai_server import FakeOpenAI

KEY = "sk-test-SECRET-123456"


def _cli(url: str, out, *extra: str) -> int:
    args = ["--endpoint", url, "--model", "fake-model", "--api-key-env", "QB_TEST_KEY", "--out", str(out)]
    return main(["scm", "run", *args, "--limit", "2", "--requests-per-minute", "60000", *extra])


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line the CLI printed (after any progress lines), checking there is no traceback."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("queerbench: error:")]
    assert len(errors) == 1, err
    return errors[0]


def test_scm_run_on_an_endpoint_writes_outputs_and_resumes_with_no_calls(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("QB_TEST_KEY", KEY)
    out = tmp_path / "run"
    with FakeOpenAI(hold=4, hold_timeout=20) as server:  # each request waits until 4 are in flight
        assert _cli(server.url, out, "--concurrency", "4", "--samples", "2") == 0
        n = len(pd.read_parquet(out / "responses.parquet"))
        assert n == 8 and server.calls == n  # 2 prompts per split × 2 splits × 2 samples
        assert server.max_in_flight == 4  # --concurrency 4 overlapped requests
        assert _cli(server.url, out, "--concurrency", "4", "--samples", "2") == 0
        assert server.calls == n  # rerun: everything from the cache
    res = json.loads((out / "scm.json").read_text())
    assert res["run"]["calls"] == 0 and res["run"]["cached"] == n
    assert res["run"]["fingerprint"]["model"] == "fake-model"
    frame = pd.read_parquet(out / "responses.parquet")
    assert set(frame["finish_reason"]) == {"stop"} and not frame["truncated"].any()
    for path in out.iterdir():
        assert KEY.encode() not in path.read_bytes(), path.name
    assert KEY not in capsys.readouterr().err


def test_scm_run_endpoint_errors_are_one_line(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("QB_TEST_KEY", KEY)
    with FakeOpenAI(script=["401"]) as server:
        assert _cli(server.url, tmp_path / "a", "--concurrency", "1") == 2
        assert server.calls == 1  # the run stopped at the first answer
    err = _error_line(capsys)
    assert "HTTP 401" in err and KEY not in err
    port = free_port()
    assert _cli(f"http://127.0.0.1:{port}/v1", tmp_path / "b") == 2
    err = _error_line(capsys)
    assert f"127.0.0.1:{port}" in err and "cannot connect" in err
    assert _cli(f"http://127.0.0.1:{port}/v1", tmp_path / "c", "--concurrency", "0") == 2
    assert "--concurrency must be at least 1" in _error_line(capsys)
    monkeypatch.delenv("QB_TEST_KEY")
    assert _cli("https://api.example.com/v1", tmp_path / "d") == 2
    assert "QB_TEST_KEY is not set" in _error_line(capsys)


def test_scm_prompts_through_the_runner_keep_group_and_order(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("QB_TEST_KEY", KEY)
    rows = select_rows(scm_splits()["survey"], 6)
    with FakeOpenAI(echo=True) as server:
        runner = OpenAIChatRunner(server.url, "fake-model", api_key_env="QB_TEST_KEY", requests_per_minute=None)
        with ResponseCache(tmp_path / "c.sqlite") as cache:
            frame = collect(runner, rows, GenerationSettings(samples=2), cache)
    assert frame["id"].tolist() == [i for i in rows["id"] for _ in range(2)]
    assert frame["group"].tolist() == [g for g in rows["group"] for _ in range(2)]
    assert (frame["response"] == "echo: " + frame["prompt"]).all()


@pytest.mark.parametrize("bad", ["localhost:8000", "ftp://x"])
def test_bad_endpoint_url_is_refused(bad) -> None:
    with pytest.raises(ValueError, match="http"):
        OpenAIChatRunner(bad, "m")
