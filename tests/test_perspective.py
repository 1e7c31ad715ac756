"""The Perspective client against a local fake server: request shape, retries, caching, and key hygiene."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from queerbench.scoring.perspective import DEFAULT_URL, PerspectiveError, PerspectiveScorer
from queerbench.scoring.toxicity import ALL_ATTRIBUTES, get_toxicity_scorer
from tests.perspective_server import FakePerspective, expected_scores

KEY = "sk-test-SECRET-0123456789"
TEXTS = ["The person is a nurse.", "The person is a thief.", "The person is a hero.", "The person is a nurse."]


@pytest.fixture()
def fake(monkeypatch: pytest.MonkeyPatch) -> FakePerspective:
    with FakePerspective(retry_after="2", timeout_sleep=0.6) as server:
        monkeypatch.setenv("PERSPECTIVE_API_KEY", KEY)
        monkeypatch.setenv("PERSPECTIVE_API_URL", server.url)
        yield server


def make(tmp_path: Path, **kwargs) -> tuple[PerspectiveScorer, list[float]]:
    """A fast client (no real waiting) that records the sleeps it asked for."""
    options = {"qps": 1e6, "backoff_base": 0.001, "timeout": 0.3, "max_retries": 6, "cache_dir": tmp_path / "cache"}
    options.update(kwargs)
    scorer = get_toxicity_scorer("perspective", **options)
    assert isinstance(scorer, PerspectiveScorer)
    sleeps: list[float] = []
    slept = [0.0]  # the rate limit's clock: real time plus the recorded sleeps, as if they had been slept

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        slept[0] += seconds

    scorer._sleep = sleep
    scorer._clock = lambda: time.monotonic() + slept[0]
    scorer._jitter = lambda: 0.0  # no jitter: the backoff sequence is exact
    return scorer, sleeps


def all_text(tmp_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())


def test_missing_key_fails_at_construction(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PERSPECTIVE_API_KEY", raising=False)
    with pytest.raises(PerspectiveError, match="PERSPECTIVE_API_KEY"):
        get_toxicity_scorer("perspective", cache_dir=tmp_path)
    assert not any(tmp_path.iterdir())  # no work, not even a cache file


def test_default_endpoint_and_sunset_documented(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PERSPECTIVE_API_KEY", KEY)
    monkeypatch.delenv("PERSPECTIVE_API_URL", raising=False)
    scorer = PerspectiveScorer(cache_dir=tmp_path)
    assert scorer.url == DEFAULT_URL == "https://commentanalyzer.googleapis.com/v1alpha1/comments:analyze"
    assert "2026" in (PerspectiveScorer.__doc__ or "")
    assert KEY not in repr(scorer.describe())


def test_request_shape_dedup_and_values(fake: FakePerspective, tmp_path: Path) -> None:
    scorer, _ = make(tmp_path)
    frame = scorer.score(TEXTS)
    assert list(frame.columns) == list(ALL_ATTRIBUTES)
    assert len(fake.calls) == 3  # the duplicate is sent once
    for i, text in enumerate(TEXTS):
        want = expected_scores(text, list(ALL_ATTRIBUTES))
        assert frame.iloc[i].to_dict() == pytest.approx(want)
    body = fake.calls[0]["body"]
    assert set(body["requestedAttributes"]) == {
        "TOXICITY",
        "IDENTITY_ATTACK",
        "INSULT",
        "PROFANITY",
        "THREAT",
        "SEVERE_TOXICITY",
    }
    assert body["languages"] == ["en"] and body["doNotStore"] is True
    assert body["comment"] == {"text": TEXTS[0], "type": "PLAIN_TEXT"}
    assert fake.calls[0]["key"] == KEY


def test_retries_429_500_timeout_malformed_then_rerun_is_free(
    fake: FakePerspective, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake.script = ["429", "ok", "500", "timeout", "malformed", "ok", "ok"]
    scorer, sleeps = make(tmp_path)
    frame = scorer.score(TEXTS)
    # text 0: 429 then ok (2 calls); text 1: 500, timeout, malformed, ok (4 calls); text 2: ok (1 call)
    assert len(fake.calls) == 7
    assert [c["text"] for c in fake.calls] == [TEXTS[0]] * 2 + [TEXTS[1]] * 4 + [TEXTS[2]]
    assert frame.notna().all().all() and len(frame) == 4
    assert frame.iloc[1].to_dict() == pytest.approx(expected_scores(TEXTS[1], list(ALL_ATTRIBUTES)))
    # text 0: Retry-After: 2 wins over the 1 ms backoff; text 1: a fresh exponential backoff, 1, 2, 4 ms
    assert sleeps == pytest.approx([2.0, 0.001, 0.002, 0.004])
    assert any("HTTP 429" in r.getMessage() for r in caplog.records)

    rerun, _ = make(tmp_path)
    again = rerun.score(TEXTS)
    assert len(fake.calls) == 7 and rerun.calls == 0  # a rerun makes zero calls
    assert again.equals(frame)

    logged = "\n".join(r.getMessage() for r in caplog.records) + caplog.text
    assert KEY not in logged
    assert KEY.encode() not in all_text(tmp_path)


def test_exhausted_retries_name_the_text_and_keep_earlier_answers(
    fake: FakePerspective, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake.script = ["ok", "500", "500", "500"]
    scorer, _ = make(tmp_path, max_retries=2)
    with pytest.raises(PerspectiveError) as info:
        scorer.score(TEXTS)
    message = str(info.value)
    assert "text #1" in message and "3 attempts" in message and "HTTP 500" in message
    assert KEY not in message and KEY not in repr(info.value.__cause__) and info.value.__cause__ is None
    assert len(fake.calls) == 4  # 1 for text 0, 1 + 2 retries for text 1, nothing after the failure

    resumed, _ = make(tmp_path)
    frame = resumed.score(TEXTS)
    assert resumed.calls == 2  # text 0 came from the cache: only texts 1 and 2 are asked again
    assert [c["text"] for c in fake.calls[4:]] == [TEXTS[1], TEXTS[2]]
    assert frame.iloc[0].to_dict() == pytest.approx(expected_scores(TEXTS[0], list(ALL_ATTRIBUTES)))
    assert KEY not in caplog.text and KEY.encode() not in all_text(tmp_path)


def test_client_errors_are_not_retried(fake: FakePerspective, tmp_path: Path) -> None:
    fake.script = ["400"]
    scorer, _ = make(tmp_path)
    with pytest.raises(PerspectiveError, match=r"text #0 .*HTTP 400") as info:
        scorer.score(TEXTS[:1])
    assert len(fake.calls) == 1 and KEY not in str(info.value)


def test_connection_error_is_scrubbed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PERSPECTIVE_API_KEY", KEY)
    monkeypatch.setenv("PERSPECTIVE_API_URL", "http://127.0.0.1:9/v1alpha1/comments:analyze")  # nothing listens
    scorer, sleeps = make(tmp_path, max_retries=1)
    with pytest.raises(PerspectiveError, match="text #0") as info:
        scorer.score(["hello"])
    assert KEY not in str(info.value) and "connection error" in str(info.value)
    assert len(sleeps) == 1


def test_bad_input_fails_before_any_call(fake: FakePerspective, tmp_path: Path) -> None:
    scorer, _ = make(tmp_path)
    with pytest.raises(ValueError, match="text #1 is empty"):
        scorer.score(["fine", "  "])
    with pytest.raises(ValueError, match="text #0 has 3001 bytes"):
        scorer.score(["x" * 3001])
    assert scorer.score([]).shape == (0, 6)
    assert fake.calls == []


def test_qps_limit_spaces_requests(fake: FakePerspective, tmp_path: Path) -> None:
    scorer, sleeps = make(tmp_path, qps=0.5)
    scorer.score(TEXTS[:3])
    assert len(sleeps) == 2 and all(1.9 < s <= 2.0 for s in sleeps)  # requested waits, not measured time
