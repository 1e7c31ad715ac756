"""The Perspective client's retry schedule, exactly: exponential, capped, Retry-After honoured, which codes retry.

The client asks for its waits through an injected ``sleep`` (recorded here, never slept), so the sequence is exact
and the tests take no time. The server is the local fake in ``tests/perspective_server.py``.
"""

from __future__ import annotations

import email.utils
import time
from pathlib import Path

import pytest

from queerbench.scoring.perspective import PerspectiveError, PerspectiveScorer
from tests.perspective_server import FakePerspective

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
    slept = [0.0]  # the rate limit's clock: real time plus the recorded sleeps, as if they had been slept

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        slept[0] += seconds

    scorer._sleep = sleep
    scorer._clock = lambda: time.monotonic() + slept[0]
    scorer._jitter = lambda: 0.0  # no jitter: the backoff sequence is exact
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


def test_retry_after_seconds_sets_the_wait_within_the_cap(fake: FakePerspective, tmp_path: Path):
    fake.script = ["503@7", "503@0.5", "503@3", "503@0", "ok"]
    scorer, sleeps = client(tmp_path)
    scorer.score(["The person is a nurse."])
    # the server's value, longer or shorter than base·2^attempt (1, 2, 4, 8), capped at backoff_max (5); 0 is now
    assert sleeps == [5.0, 0.5, 3.0, 0.0]


def test_retry_after_as_an_http_date(fake: FakePerspective, tmp_path: Path):
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    past = email.utils.formatdate(time.time() - 3600, usegmt=True)
    fake.script = [f"503@{when}", f"503@{past}", "503@soon", "ok"]
    scorer, sleeps = client(tmp_path, backoff_max=60.0)
    scorer.score(["The person is a nurse."])
    assert 27.0 <= sleeps[0] <= 30.0  # about 30 s from now (the date has whole seconds)
    assert sleeps[1:] == [0.0, 1.0]  # a date in the past: now; an unreadable value: the backoff alone (its first)


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


# ------------------------------------------------------------------------------------------ what the client reports
def test_defaults_are_the_documented_ones(fake: FakePerspective, tmp_path: Path):
    scorer = PerspectiveScorer(cache_dir=tmp_path)
    assert scorer._sleep is time.sleep  # the injection point these tests replace
    assert (scorer.qps, scorer.max_retries, scorer.backoff_base, scorer.backoff_max) == (1.0, 6, 1.0, 64.0)
    assert (scorer.timeout, scorer.max_text_bytes) == (30.0, 3000)
    assert scorer.describe() == {
        "scorer": "perspective",
        "name": "perspective",
        "endpoint": fake.url,
        "attributes": ["TOXICITY", "IDENTITY_ATTACK", "INSULT", "PROFANITY", "THREAT", "SEVERE_TOXICITY"],
        "languages": ["en"],
        "doNotStore": True,
        "note": "Perspective API, sunset after 2026; model versions drift over time",
    }


def test_request_body_exactly(fake: FakePerspective, tmp_path: Path):
    scorer, _ = client(tmp_path)
    scorer.score(["The person is a nurse."])
    assert fake.calls[0]["body"] == {
        "comment": {"text": "The person is a nurse.", "type": "PLAIN_TEXT"},
        "requestedAttributes": {
            a: {} for a in ("TOXICITY", "IDENTITY_ATTACK", "INSULT", "PROFANITY", "THREAT", "SEVERE_TOXICITY")
        },
        "languages": ["en"],
        "doNotStore": True,
        "spanAnnotations": False,
    }
    assert list((tmp_path / "cache").rglob("*"))  # answers are cached where the caller said


def test_zero_backoff_and_a_zero_retry_after_mean_no_wait(fake: FakePerspective, tmp_path: Path):
    past = email.utils.formatdate(time.time() - 3600, usegmt=True)
    fake.script = ["503@0", f"503@{past}", "502", "ok"]
    scorer, sleeps = client(tmp_path, backoff_base=0.0, backoff_max=0.0)
    scorer.score(["x y"])
    assert sleeps == [0.0, 0.0, 0.0]


def test_each_retry_is_logged_with_its_wait(fake: FakePerspective, tmp_path: Path, caplog: pytest.LogCaptureFixture):
    fake.script = ["503", "504", "ok"]
    scorer, _ = client(tmp_path)
    with caplog.at_level("WARNING", logger="queerbench.scoring.perspective"):
        scorer.score(["x y"])
    assert [r.getMessage() for r in caplog.records if r.name == "queerbench.scoring.perspective"] == [
        "perspective: text #0: HTTP 503; retry 1/6 in 1.00 s",
        "perspective: text #0: HTTP 504; retry 2/6 in 2.00 s",
    ]


def test_scores_must_be_probabilities(fake: FakePerspective, tmp_path: Path):
    fake.fixed = {"edges": {"TOXICITY": 1.0, "THREAT": 0.0}, "too big": {"TOXICITY": 1.5}}
    scorer, _ = client(tmp_path, max_retries=1)
    frame = scorer.score(["edges"])
    assert frame.iloc[0]["TOXICITY"] == 1.0 and frame.iloc[0]["THREAT"] == 0.0
    with pytest.raises(
        PerspectiveError, match=r"after 2 attempts; last error: scores outside \[0, 1\]: \{'TOXICITY': 1.5"
    ):
        scorer.score(["too big"])


def test_text_size_limit_is_inclusive(fake: FakePerspective, tmp_path: Path):
    scorer, _ = client(tmp_path, max_text_bytes=10)
    assert len(scorer.score(["é" * 5])) == 1  # 10 bytes in UTF-8: allowed
    with pytest.raises(ValueError) as info:
        scorer.score(["é" * 5 + "x"])
    assert str(info.value) == "text #0 has 11 bytes, over the Perspective limit of 10 bytes 'éééééx'…; shorten it"


def test_qps_limit_below_one_second(fake: FakePerspective, tmp_path: Path):
    scorer, sleeps = client(tmp_path, qps=2.0)
    scorer.score(["a b", "c d", "e f"])
    assert len(sleeps) == 2 and all(0.4 < s <= 0.5 for s in sleeps)


@pytest.mark.parametrize(
    ("script", "timeout", "last_error"),
    [
        (["timeout"], 0.3, "no answer within 0.3 s (ReadTimeout)"),
        # a generous timeout: the malformed answer comes at once, but on a loaded machine not always within 0.3 s
        (["malformed"], 5.0, "malformed answer (not JSON with attributeScores.*.summaryScore.value)"),
    ],
)
def test_last_error_is_named(
    fake: FakePerspective, tmp_path: Path, script: list[str], timeout: float, last_error: str
) -> None:
    fake.script = list(script)
    fake.timeout_sleep = 0.6
    scorer, _ = client(tmp_path, max_retries=0, timeout=timeout)
    with pytest.raises(PerspectiveError) as info:
        scorer.score(["The person is a nurse."])
    assert str(info.value) == (
        f"Perspective API failed on text #0 ('The person is a nurse.') after 1 attempts; last error: {last_error}. "
        "Scores already received are cached; rerun to resume."
    )


def test_a_client_error_quotes_the_server(fake: FakePerspective, tmp_path: Path):
    fake.script = ["400"]
    scorer, _ = client(tmp_path)
    with pytest.raises(PerspectiveError) as info:
        scorer.score(["x y"])
    assert str(info.value) == (
        "Perspective API failed on text #0 ('x y'): HTTP 400 (not retried): "
        '{"error": {"code": 400, "status": "INVALID_ARGUMENT"}}'
    )


def test_connection_and_request_errors_name_their_kind_without_the_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    monkeypatch.setenv("PERSPECTIVE_API_KEY", KEY)
    monkeypatch.setenv("PERSPECTIVE_API_URL", "http://127.0.0.1:9/v1alpha1/comments:analyze")  # nothing listens
    scorer, _ = client(tmp_path, max_retries=0)
    caplog.set_level("DEBUG")
    with pytest.raises(PerspectiveError) as info:
        scorer.score(["x y"])
    message = str(info.value)
    assert (
        "last error: connection error (NewConnectionError: " in message
        and "Connection refused (http://127.0.0.1:9/v1alpha1/comments:analyze))" in message
    )
    assert KEY not in message
    debug = [r.getMessage() for r in caplog.records if r.name == "urllib3.connectionpool"]
    assert debug and all(KEY not in m for m in debug)
    monkeypatch.setenv("PERSPECTIVE_API_URL", "ftp://127.0.0.1/v1alpha1/comments:analyze")
    scorer, _ = client(tmp_path)
    with pytest.raises(PerspectiveError) as info:
        scorer.score(["x y"])
    assert str(info.value) == (
        "Perspective API failed on text #0 ('x y'): request failed (URLSchemeUnknown: Not supported URL scheme ftp "
        "(ftp://127.0.0.1/v1alpha1/comments:analyze))"
    )


def test_setup_errors_word_for_word(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv("PERSPECTIVE_API_KEY", raising=False)
    with pytest.raises(PerspectiveError) as info:
        PerspectiveScorer(cache_dir=tmp_path)
    assert str(info.value) == (
        "the perspective scorer needs an API key in the environment variable PERSPECTIVE_API_KEY (the API is sunset "
        "after 2026 and new keys may be unobtainable); use toxicity='embedded' for an offline scorer"
    )
    monkeypatch.setenv("PERSPECTIVE_API_KEY", KEY)
    monkeypatch.setenv("PERSPECTIVE_API_URL", "http://127.0.0.1:1/x?key=abc")
    with pytest.raises(PerspectiveError) as info:
        PerspectiveScorer(cache_dir=tmp_path)
    assert str(info.value) == "PERSPECTIVE_API_URL must not carry a key= parameter; put the key in PERSPECTIVE_API_KEY"
    monkeypatch.delenv("PERSPECTIVE_API_URL")
    with pytest.raises(ValueError) as info:
        PerspectiveScorer(cache_dir=tmp_path, timeout=0)
    assert str(info.value) == "timeout must be > 0 and backoff_base/backoff_max >= 0"


def test_long_texts_are_quoted_to_60_characters(fake: FakePerspective, tmp_path: Path):
    text = "The person is " + "very " * 20 + "kind."
    fake.script = ["400"]
    scorer, _ = client(tmp_path, max_text_bytes=50)
    with pytest.raises(ValueError) as info:
        scorer.score([text])
    assert f"limit of 50 bytes {text[:60]!r}…; shorten it" in str(info.value) and text[:61] not in str(info.value)
    scorer, _ = client(tmp_path)
    with pytest.raises(PerspectiveError) as info:
        scorer.score([text])
    assert str(info.value).startswith(f"Perspective API failed on text #0 ({text[:60]!r}): HTTP 400")
    fake.script = ["503"]
    scorer, _ = client(tmp_path / "again", max_retries=0)
    with pytest.raises(PerspectiveError) as info:
        scorer.score([text])
    assert str(info.value).startswith(f"Perspective API failed on text #0 ({text[:60]!r}) after 1 attempts")


def test_key_is_masked_in_the_http_debug_log(fake: FakePerspective, tmp_path: Path, caplog: pytest.LogCaptureFixture):
    caplog.set_level("DEBUG", logger="urllib3.connectionpool")
    scorer, _ = client(tmp_path)
    scorer.score(["x y"])
    lines = [r.getMessage() for r in caplog.records if r.name == "urllib3.connectionpool"]
    assert any('"POST /v1alpha1/comments:analyze?key=*** HTTP/1.1" 200' in line for line in lines), lines
    assert all(KEY not in line for line in lines)


def test_progress_bar_only_when_asked(fake: FakePerspective, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    scorer, _ = client(tmp_path)
    scorer.score(["a b"])
    assert capsys.readouterr().err == ""
    scorer.score(["c d"], progress=True)
    assert "perspective: 100%" in capsys.readouterr().err
