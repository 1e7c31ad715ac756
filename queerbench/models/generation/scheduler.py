"""Calls kept flowing through a fixed number of slots: a call that waits for its retry holds no slot.

:class:`CallScheduler` runs calls to a remote API on ``concurrency`` worker threads. Each worker takes the next call
that is due, makes one attempt (:meth:`queerbench.base.http.HttpClient.attempt`) and, when the attempt asks for
another, puts the call back with the time it is due again (the server's ``Retry-After``, else exponential backoff
with jitter): the slot goes to the next call at once, so one prompt in backoff never leaves the others idle. Of the
calls that are due, the one submitted first goes first, so a retry that has waited out its backoff goes before
calls not yet tried: each call's retries run while the others are asked, instead of piling up at the end of a run.
Calls can be submitted while others run (a run streams all its prompts through one scheduler, re-asks included),
and results come out as they arrive.

Each ended call is *settled* in the worker that ended it (``settle``: a reply is stored on disk there, the moment
it arrives). A result that ``settle`` says is stored frees its slot at once, however busy the caller is; at most
``concurrency`` such results wait for the caller, so a caller that stops has at most that many stored replies it
did not see, and nothing is lost. Any other result (a failure, or a reply that could not be stored) holds its slot
until the caller has dealt with it (asks for the next): nothing runs ahead of a caller that stops, and with one slot
a caller that stops after a failure has made no further request. A fatal error (a rejected key, an unreachable
server, a reply that could not be written) stops every worker and is raised to the caller; closing the results
early (an abort, Ctrl-C) stops them too.
"""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from queerbench.base.http import Attempt, Outcome
from queerbench.base.retry import retries_spent

__all__ = ["CallScheduler"]

_DONE = object()

Settle = Callable[[Hashable, Outcome], tuple[Any, bool]]
"""``settle(key, outcome) -> (result, stored)``: what :meth:`CallScheduler.results` yields for an ended call, and
whether it is stored for good (then its slot is freed before the caller takes it)."""


def _unsettled(key: Hashable, outcome: Outcome) -> tuple[Any, bool]:
    return outcome, False


class CallScheduler:
    """Calls to one API through ``concurrency`` slots (see the module doc).

    ``attempt(payload)`` makes one attempt; ``backoff(n, retry_after)`` is the wait before the next retry, ``n``
    counting the call's retries so far that came without a ``Retry-After`` (a server that paces its answers does not
    lengthen the backoff of later failures); ``max_retries`` retries of each kind
    (:func:`~queerbench.base.http.retries_spent`); ``pace(sleep)`` waits for the rate limit before each attempt;
    ``settle(key, outcome)`` turns each ended call into its result in the worker thread (:data:`Settle`; by default
    the :class:`~queerbench.base.http.Outcome` itself, not stored); ``sleep``, when given, replaces the waits (tests
    record them instead of waiting: a retry is then due at once); ``clock`` times them.
    """

    def __init__(
        self,
        attempt: Callable[[Any], Attempt],
        *,
        concurrency: int,
        max_retries: int,
        backoff: Callable[[int, float | None], float],
        pace: Callable[[Callable[[float], Any]], None],
        settle: Settle = _unsettled,
        sleep: Callable[[float], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._attempt, self._backoff, self._pace, self._settle = attempt, backoff, pace, settle
        self._max_retries, self._sleep, self._clock = max_retries, sleep, clock
        # calls that may go now, first submitted first: (submission number, key, payload, attempts, retried, problems)
        self._ready: list[tuple[int, Hashable, Any, int, tuple[int, int], list[str]]] = []
        # calls waiting for their retry: (due time, submission number, key, payload, attempts, retried, problems)
        self._waiting: list[tuple[float, int, Hashable, Any, int, tuple[int, int], list[str]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._open = True
        self._outstanding = 0
        self._results: queue.SimpleQueue[tuple[Hashable, Any, bool]] = queue.SimpleQueue()
        self._slots = threading.Semaphore(concurrency)
        self._backlog = threading.Semaphore(concurrency)  # stored results the caller has not taken yet
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
            heapq.heappush(self._ready, (next(self._seq), key, payload, 0, (0, 0), []))
            self._cond.notify()

    def close(self) -> None:
        """No more calls will be submitted: idle workers exit once every call has ended."""
        with self._cond:
            self._open = False
            self._cond.notify_all()

    def results(self) -> Iterator[tuple[Hashable, Any]]:
        """``(key, result)`` of every call submitted so far as it ends (what ``settle`` made of its value or of why
        it failed for good), calls submitted while iterating included, until none is left; a fatal error is raised
        here. Closing this iterator early (or an error in the caller) stops the workers."""
        try:
            while True:
                with self._cond:
                    if self._outstanding == 0 and self._results.empty():
                        return
                key, item, stored = self._results.get()
                if item is _DONE:
                    continue
                if isinstance(item, BaseException):
                    raise item
                yield key, item
                # the caller has dealt with this result: a stored one makes room in the backlog, another frees the
                # slot it held
                (self._backlog if stored else self._slots).release()
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
            self._backlog.release()

    # ----------------------------------------------------------------------------------------- the workers' side
    def _next(self) -> tuple[int, Hashable, Any, int, tuple[int, int], list[str]] | None:
        """The next call to make (waiting for one to be due), or None when the workers should exit."""
        with self._cond:
            while not self._stop.is_set():
                now = self._clock()
                while self._waiting and self._waiting[0][0] <= now:
                    heapq.heappush(self._ready, heapq.heappop(self._waiting)[1:])
                if self._ready:
                    return heapq.heappop(self._ready)
                if self._waiting:
                    self._cond.wait(timeout=self._waiting[0][0] - now)
                elif not self._open:
                    return None
                else:
                    self._cond.wait()
            return None

    def _end(self, key: Hashable, outcome: Outcome) -> bool:
        """Settle an ended call and hand its result to the caller; False when settling failed (fatal)."""
        try:
            item, stored = self._settle(key, outcome)
        except Exception as exc:  # e.g. a full disk: stop the others now, the caller's thread raises it
            self._stop.set()
            self._results.put((key, exc, False))
            return False
        if stored:
            self._backlog.acquire()  # at most `concurrency` stored results wait for the caller
            self._slots.release()  # the reply is safe on disk: its slot may serve another call now
        with self._cond:  # the result and the count change together: a caller never sees one without the other
            self._results.put((key, item, stored))
            self._outstanding -= 1
            self._cond.notify_all()
        return True

    def _work(self) -> None:
        while not self._stop.is_set():
            self._slots.acquire()
            if self._stop.is_set():
                break
            job = self._next()
            if job is None:
                self._slots.release()
                break
            seq, key, payload, n, (blind, paced), problems = job
            try:
                self._pace(self._sleep or self._stop.wait)
                if self._stop.is_set():
                    break
                tried = self._attempt(payload)
            except Exception as exc:  # fatal: stop the others now, the caller's thread raises it
                self._stop.set()
                self._results.put((key, exc, False))
                break
            if tried.ok:
                if not self._end(key, Outcome(value=tried.value, attempts=n + 1, status=tried.status)):
                    break
                continue
            problems = [*problems, tried.problem]
            if not tried.retry:
                ended = Outcome(problems=problems, attempts=n + 1, status=tried.status, final=True, detail=tried.detail)
                if not self._end(key, ended):
                    break
                continue
            if retries_spent(self._max_retries, blind, paced, tried.retry_after):
                if not self._end(key, Outcome(problems=problems, attempts=n + 1, status=tried.status)):
                    break
                continue
            delay = self._backoff(blind, tried.retry_after)  # a Retry-After does not advance the exponent
            retried = (blind + 1, paced) if tried.retry_after is None else (blind, paced + 1)
            if self._sleep is not None:
                self._sleep(delay)  # a test's recorded wait: no time passes, the retry is due at once
            with self._cond:
                if self._sleep is not None:
                    heapq.heappush(self._ready, (seq, key, payload, n + 1, retried, problems))
                else:
                    heapq.heappush(self._waiting, (self._clock() + delay, seq, key, payload, n + 1, retried, problems))
                self._cond.notify()
            self._slots.release()  # waiting for its retry, the call holds no slot
        self._results.put((None, _DONE, False))
