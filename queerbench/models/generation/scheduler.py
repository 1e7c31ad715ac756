"""Calls kept flowing through a fixed number of slots: a call that waits for its retry holds no slot.

:class:`CallScheduler` runs calls to a remote API on ``concurrency`` worker threads. Each worker takes the next call
that is due, makes one attempt (:meth:`queerbench.base.http.HttpClient.attempt`) and, when the attempt asks for
another, puts the call back with the time it is due again (the server's ``Retry-After``, else exponential backoff
with jitter): the slot goes to the next call at once, so one prompt in backoff never leaves the others idle. Calls can
be submitted while others run (a run streams all its prompts through one scheduler, re-asks included), and results
come out as they arrive. A result holds its slot until the caller has dealt with it (asks for the next), so nothing
runs ahead of a caller that stops: with one slot, a caller that stops after a failure has made no further request.
A fatal error (a rejected key, an unreachable server) stops every worker and is raised to the caller; closing the
results early (an abort, Ctrl-C) stops them too.
"""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from queerbench.base.http import Attempt, Outcome, retries_spent

__all__ = ["CallScheduler"]

_DONE = object()


class CallScheduler:
    """Calls to one API through ``concurrency`` slots (see the module doc).

    ``attempt(payload)`` makes one attempt; ``backoff(n, retry_after)`` is the wait before the next retry, ``n``
    counting the call's retries so far that came without a ``Retry-After`` (a server that paces its answers does not
    lengthen the backoff of later failures); ``max_retries`` retries of each kind
    (:func:`~queerbench.base.http.retries_spent`);
    ``max_retries`` retries per call; ``pace(sleep)`` waits for the rate limit before each attempt; ``sleep``, when
    given, replaces the waits (tests record them instead of waiting); ``clock`` times them.
    """

    def __init__(
        self,
        attempt: Callable[[Any], Attempt],
        *,
        concurrency: int,
        max_retries: int,
        backoff: Callable[[int, float | None], float],
        pace: Callable[[Callable[[float], Any]], None],
        sleep: Callable[[float], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._attempt, self._backoff, self._pace = attempt, backoff, pace
        self._max_retries, self._sleep, self._clock = max_retries, sleep, clock
        self._due: list[tuple[float, int, Hashable, Any, int, tuple[int, int], list[str]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._open = True
        self._outstanding = 0
        self._results: queue.SimpleQueue[tuple[Hashable, Any]] = queue.SimpleQueue()
        self._slots = threading.Semaphore(concurrency)
        self._stop = threading.Event()
        self._workers = [
            threading.Thread(target=self._work, daemon=True, name=f"qb-call-{k}") for k in range(concurrency)
        ]
        for worker in self._workers:
            worker.start()

    # ------------------------------------------------------------------------------------------ the caller's side
    def submit(self, key: Hashable, payload: Any) -> None:
        """A call to make (its result comes out under ``key``)."""
        with self._cond:
            if not self._open:
                raise RuntimeError("the scheduler takes no more calls")
            self._outstanding += 1
            heapq.heappush(self._due, (self._clock(), next(self._seq), key, payload, 0, (0, 0), []))
            self._cond.notify()

    def close(self) -> None:
        """No more calls will be submitted: idle workers exit once every call has ended."""
        with self._cond:
            self._open = False
            self._cond.notify_all()

    def results(self) -> Iterator[tuple[Hashable, Outcome]]:
        """``(key, outcome)`` of every call submitted so far as it ends (its value, or why it failed for good), calls
        submitted while iterating included, until none is left; a fatal error is raised here. Closing this iterator
        early (or an error in the caller) stops the workers."""
        try:
            while True:
                with self._cond:
                    if self._outstanding == 0 and self._results.empty():
                        return
                key, item = self._results.get()
                if item is _DONE:
                    continue
                if isinstance(item, BaseException):
                    raise item
                yield key, item
                self._slots.release()  # the caller has dealt with this result: its slot may serve another call
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every worker (no new attempt starts; calls waiting for a retry are dropped)."""
        self._stop.set()
        with self._cond:
            self._open = False
            self._cond.notify_all()
        for _ in self._workers:
            self._slots.release()

    # ----------------------------------------------------------------------------------------- the workers' side
    def _next(self) -> tuple[Hashable, Any, int, tuple[int, int], list[str]] | None:
        """The next due call (waiting for one), or None when the workers should exit."""
        with self._cond:
            while not self._stop.is_set():
                if self._due:
                    due_at = self._due[0][0]
                    wait = due_at - self._clock()
                    if wait <= 0 or self._sleep is not None:
                        _, _, key, payload, n, retried, problems = heapq.heappop(self._due)
                        return key, payload, n, retried, problems
                    self._cond.wait(timeout=wait)
                elif not self._open:
                    return None
                else:
                    self._cond.wait()
            return None

    def _finish(self, key: Hashable, outcome: Outcome) -> None:
        with self._cond:  # the result and the count change together: a caller never sees one without the other
            self._results.put((key, outcome))
            self._outstanding -= 1
            self._cond.notify_all()

    def _work(self) -> None:
        while not self._stop.is_set():
            self._slots.acquire()
            if self._stop.is_set():
                break
            job = self._next()
            if job is None:
                self._slots.release()
                break
            key, payload, n, (blind, paced), problems = job
            try:
                self._pace(self._sleep or self._stop.wait)
                if self._stop.is_set():
                    break
                tried = self._attempt(payload)
            except Exception as exc:  # fatal: stop the others now, the caller's thread raises it
                self._stop.set()
                self._results.put((key, exc))
                break
            if tried.ok:
                self._finish(key, Outcome(value=tried.value, attempts=n + 1, status=tried.status))
                continue  # the slot comes back when the caller takes the result
            problems = [*problems, tried.problem]
            if not tried.retry:
                self._finish(
                    key,
                    Outcome(problems=problems, attempts=n + 1, status=tried.status, final=True, detail=tried.detail),
                )
                continue
            if retries_spent(self._max_retries, blind, paced, tried.retry_after):
                self._finish(key, Outcome(problems=problems, attempts=n + 1, status=tried.status))
                continue
            delay = self._backoff(blind, tried.retry_after)  # a Retry-After does not advance the exponent
            retried = (blind + 1, paced) if tried.retry_after is None else (blind, paced + 1)
            if self._sleep is not None:
                self._sleep(delay)  # a test's recorded wait: no time passes
            with self._cond:
                heapq.heappush(
                    self._due, (self._clock() + delay, next(self._seq), key, payload, n + 1, retried, problems)
                )
                self._cond.notify()
            self._slots.release()  # waiting for its retry, the call holds no slot
        self._results.put((None, _DONE))
