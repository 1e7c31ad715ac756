"""The Perspective client's retry schedule, exactly: exponential, capped, Retry-After honoured, which codes retry.

The client asks for its waits through an injected ``sleep`` (recorded here, never slept), so the sequence is exact
and the tests take no time. The server is the local fake in ``tests/perspective_server.py``.
"""

from __future__ import annotations

import email.utils
import time
from pathlib import Path

import pytest
from perspective_server import FakePerspective

from queerbench.scoring.perspective import PerspectiveError, PerspectiveScorer

KEY = "sk-test-backoff-0123456789"


@pytest.fixture()
def fake(monkeypatch: pytest.MonkeyPatch) -> FakePerspective:
    with FakePerspective(retry_after="3") as server:
        monkeypatch.setenv("PERSPECTIVE_API_KEY", KEY)
        monkeypatch.setenv("PERSPECTIVE_API_URL", server.url)
        yield server


def client(tmp_path: Path, **kwargs) -> tuple[PerspectiveScorer, list[float]]:
    options = {"qps": 1e6, "backoff_base": 1.0, "backoff_max": 5.0, "max_retries": 6, "timeout": 2.0}
    options.update(kwargs)
    scorer = PerspectiveScorer(cache_dir=tmp_path / "cache", **options)
    sleeps: list[float] = []
    scorer._sleep = sleeps.append
    return scorer, sleeps


def test_backoff_doubles_from_the_base_and_stops_at_the_cap(fake: FakePerspective, tmp_path: Path):
    fake.script = ["503"] * 6 + ["ok"]
    scorer, sleeps = client(tmp_path)
    frame = scorer.score(["The person is a nurse."])
    assert sleeps == [1.0, 2.0, 4.0, 5.0, 5.0, 5.0]  # base·2^attempt, capped at backoff_max
    assert len(fake.calls) == 7 and scorer.calls == 7 and frame.notna().all().all()


def test_the_schedule_starts_again_for_each_text(fake: FakePerspective, tmp_path: Path):
    fake.script = ["502", "502", "ok", "504", "ok"]
    scorer, sleeps = client(tmp_path, backoff_base=0.5)
    scorer.score(["first text", "second text"])
    assert sleeps == [0.5, 1.0, 0.5]


def test_no_sleep_after_the_last_attempt(fake: FakePerspective, tmp_path: Path):
    fake.script = ["503"] * 3
    scorer, sleeps = client(tmp_path, max_retries=2)
    with pytest.raises(PerspectiveError, match=r"text #0 .*after 3 attempts; last error: HTTP 503"):
        scorer.score(["The person is a nurse."])
    assert sleeps == [1.0, 2.0] and len(fake.calls) == 3


def test_no_retries_means_one_attempt(fake: FakePerspective, tmp_path: Path):
    fake.script = ["503"]
    scorer, sleeps = client(tmp_path, max_retries=0)
    with pytest.raises(PerspectiveError, match="after 1 attempts"):
        scorer.score(["x y"])
    assert sleeps == [] and len(fake.calls) == 1


def test_retry_after_seconds_wins_when_longer_and_only_then(fake: FakePerspective, tmp_path: Path):
    fake.script = ["503@7", "503@0.5", "503@3", "ok"]
    scorer, sleeps = client(tmp_path)
    scorer.score(["The person is a nurse."])
    # attempt 0: max(1, 7) = 7; attempt 1: max(2, 0.5) = 2; attempt 2: max(4, 3) = 4
    assert sleeps == [7.0, 2.0, 4.0]


def test_retry_after_as_an_http_date(fake: FakePerspective, tmp_path: Path):
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    past = email.utils.formatdate(time.time() - 3600, usegmt=True)
    fake.script = [f"503@{when}", f"503@{past}", "503@soon", "ok"]
    scorer, sleeps = client(tmp_path, backoff_max=60.0)
    scorer.score(["The person is a nurse."])
    assert 27.0 <= sleeps[0] <= 30.0  # about 30 s from now (the date has whole seconds)
    assert sleeps[1:] == [2.0, 4.0]  # a date in the past or an unreadable value: the backoff alone


def test_429_uses_its_retry_after(fake: FakePerspective, tmp_path: Path):
    fake.script = ["429", "ok"]
    scorer, sleeps = client(tmp_path)
    scorer.score(["The person is a nurse."])
    assert sleeps == [3.0]


@pytest.mark.parametrize("status", ["429", "500", "502", "503", "504"])
def test_overload_and_server_errors_are_retried(fake: FakePerspective, tmp_path: Path, status: str):
    fake.script = [status, "ok"]
    scorer, sleeps = client(tmp_path, max_retries=1)
    frame = scorer.score(["The person is a nurse."])
    assert len(fake.calls) == 2 and len(sleeps) == 1 and frame.notna().all().all()


@pytest.mark.parametrize("status", ["400", "401", "403", "404", "501"])
def test_client_errors_fail_at_once(fake: FakePerspective, tmp_path: Path, status: str):
    fake.script = [status]
    scorer, sleeps = client(tmp_path)
    with pytest.raises(PerspectiveError, match=rf"text #0 .*HTTP {status} \(not retried\)") as info:
        scorer.score(["The person is a nurse."])
    assert len(fake.calls) == 1 and sleeps == [] and KEY not in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"qps": 0}, "qps must be > 0"),
        ({"max_retries": -1}, "max_retries must be >= 0"),
        ({"timeout": 0}, "timeout must be > 0"),
        ({"backoff_base": -1}, "backoff_base/backoff_max >= 0"),
        ({"backoff_max": -1}, "backoff_base/backoff_max >= 0"),
    ],
)
def test_bad_retry_settings_fail_at_construction(fake: FakePerspective, tmp_path: Path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        client(tmp_path, **kwargs)
