"""The scheduler of endpoint calls, on its own: which call goes next, when a slot is freed, and the reply cache that
its workers store replies in from many threads at once.

- of the calls that are due, the one submitted first goes first: a retry whose wait is over goes before calls not
  yet tried (each call's retries run while the others are asked, not at the end of a run);
- a result that ``settle`` stored frees its slot before the caller takes it, and at most ``concurrency`` such results
  wait for the caller; an unstored result (a failure) holds its slot until the caller has taken it;
- the reply cache commits replies stored from many threads (together), and a reply that comes after it was closed
  is refused, not written into a closed database.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import pytest

from queerbench.base.http import Attempt, Outcome
from queerbench.models.generation.cache import ResponseCache
from queerbench.models.generation.scheduler import CallScheduler


class Recorder:
    """An ``attempt`` that records each payload it is asked for; ``fail_first`` payloads get one transient failure
    (``Retry-After: 0``) before their answer."""

    def __init__(self, fail_first: set[str] = frozenset()) -> None:
        self.asked: list[str] = []
        self._failed: set[str] = set()
        self._fail_first = set(fail_first)
        self._lock = threading.Lock()

    def __call__(self, payload: str) -> Attempt:
        with self._lock:
            self.asked.append(payload)
            if payload in self._fail_first and payload not in self._failed:
                self._failed.add(payload)
                return Attempt(problem="HTTP 429", retry=True, retry_after=0.0, status=429)
        return Attempt(value=payload.upper(), ok=True, status=200)


def _scheduler(attempt: Any, concurrency: int, settle: Any = None) -> CallScheduler:
    kwargs = {} if settle is None else {"settle": settle}
    return CallScheduler(
        attempt,
        concurrency=concurrency,
        max_retries=5,
        backoff=lambda n, retry_after: retry_after or 0.0,
        pace=lambda sleep: None,
        **kwargs,
    )


def _wait_for(condition: Any, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_a_retry_whose_wait_is_over_goes_before_calls_not_yet_tried():
    attempt = Recorder(fail_first={"a", "b"})
    scheduler = _scheduler(attempt, concurrency=1)
    for payload in "abcd":
        scheduler.submit(payload, payload)
    scheduler.close()
    got = {key: outcome.value for key, outcome in scheduler.results()}
    assert got == {"a": "A", "b": "B", "c": "C", "d": "D"}
    # before: a b c d a b (every retry after every first try)
    assert attempt.asked == ["a", "a", "b", "b", "c", "d"]


def test_a_retry_still_waiting_lets_the_other_calls_go_first():
    asked: list[str] = []

    def attempt(payload: str) -> Attempt:
        asked.append(payload)
        if payload == "a" and asked.count("a") == 1:
            return Attempt(problem="HTTP 500", retry=True, status=500)  # backoff 0.3 s
        return Attempt(value=payload, ok=True, status=200)

    scheduler = CallScheduler(
        attempt, concurrency=1, max_retries=5, backoff=lambda n, retry_after: 0.3, pace=lambda sleep: None
    )
    for payload in "abc":
        scheduler.submit(payload, payload)
    scheduler.close()
    assert sorted(key for key, _ in scheduler.results()) == ["a", "b", "c"]
    assert asked == ["a", "b", "c", "a"]


def _stored(key: Hashable, outcome: Outcome) -> tuple[Any, bool]:
    return outcome, outcome.ok


@pytest.mark.parametrize(("settle", "ahead"), [(None, 0), (_stored, 1)])
def test_a_stored_result_frees_its_slot_and_at_most_concurrency_wait_for_the_caller(settle: Any, ahead: int):
    """One slot; the caller holds its first result. Unstored, nothing more is asked; stored, one more call is made
    (its result waits, holding the slot, for the first one to be taken) and no other."""
    attempt = Recorder()
    scheduler = _scheduler(attempt, concurrency=1, settle=settle)
    for payload in "abcdef":
        scheduler.submit(payload, payload)
    scheduler.close()
    results = scheduler.results()
    first = next(results)
    assert first[0] == "a"
    time.sleep(0.3)  # a worker that could run ahead has had the time to
    assert len(attempt.asked) == 1 + ahead
    assert [key for key, _ in results] == list("bcdef")


def test_an_unstored_failure_holds_its_slot_until_the_caller_takes_it():
    def attempt(payload: str) -> Attempt:
        asked.append(payload)
        return Attempt(problem="HTTP 400", status=400) if payload == "a" else Attempt(value=payload, ok=True)

    asked: list[str] = []
    scheduler = _scheduler(attempt, concurrency=1, settle=_stored)
    for payload in "abc":
        scheduler.submit(payload, payload)
    scheduler.close()
    results = scheduler.results()
    key, outcome = next(results)
    assert key == "a" and not outcome.ok
    time.sleep(0.3)
    assert asked == ["a"]  # a caller that stops after the failure has made no further request
    results.close()
    assert asked == ["a"]


def test_a_settle_that_fails_stops_the_workers_and_is_raised_to_the_caller():
    def settle(key: Hashable, outcome: Outcome) -> tuple[Any, bool]:
        raise OSError(28, "No space left on device")

    attempt = Recorder()
    scheduler = _scheduler(attempt, concurrency=2, settle=settle)
    for payload in "abcdef":
        scheduler.submit(payload, payload)
    scheduler.close()
    with pytest.raises(OSError, match="No space left"):
        list(scheduler.results())
    time.sleep(0.2)
    assert len(attempt.asked) <= 2 + 2  # the first settles stopped the others: no run to the end


def test_replies_stored_from_many_threads_are_all_committed_and_read_back(tmp_path: Path):
    cache = ResponseCache(tmp_path / "replies.sqlite")

    def store(t: int) -> None:
        for i in range(200):
            assert cache.keep(f"k{t}-{i}", f"row{i}", 0, f"reply {t} {i}", {"thread": t})

    threads = [threading.Thread(target=store, args=(t,)) for t in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert cache.count() == 16 * 200
    cache.close()
    with ResponseCache(tmp_path / "replies.sqlite") as again:
        assert again.count() == 16 * 200
        assert again.get("k7-123") == {"text": "reply 7 123", "meta": {"thread": 7}}


def test_a_reply_that_comes_after_the_cache_closed_is_refused_not_written(tmp_path: Path):
    cache = ResponseCache(tmp_path / "replies.sqlite")
    cache.put("a", "row", 0, "first", {})
    cache.close()
    assert cache.keep("b", "row", 0, "late", {}) is False
    with ResponseCache(tmp_path / "replies.sqlite") as again:
        assert again.count() == 1 and again.get("b") is None
