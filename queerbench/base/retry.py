"""The retry policy of every remote call (:class:`queerbench.base.http.HttpClient` applies it), and the rate limit.

The retry policy is the one serving clients use (the OpenAI and Anthropic Python SDKs do the same):

- a ``Retry-After`` the server sends (delta-seconds or an HTTP date; ``retry-after-ms`` in milliseconds, when sent,
  wins) **sets** the delay, capped at the client's maximum for it: ``Retry-After: 0`` means retry at once, with no
  exponential floor, so a server that rate-limits each request once costs one round trip, not a second;
- without one, exponential backoff ``base · 2^k`` capped at the maximum, shortened by a random 0–25 %
  (jitter), so that clients which failed together do not all retry at the same instant; ``k`` counts the call's
  earlier retries that came without a ``Retry-After`` (a server's pacing does not lengthen later waits).

What is worth retrying is a fact about each API, declared by its caller (:class:`RetryRules`).
"""

from __future__ import annotations

import email.utils
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "JITTER",
    "RateLimiter",
    "RetryRules",
    "retries_spent",
    "retry_after_from_headers",
    "retry_after_seconds",
    "retry_delay",
]

JITTER = 0.25
"""The largest share by which a backoff without ``Retry-After`` is shortened at random."""


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds: delta-seconds or an HTTP date (relative to wall-clock ``now``, default the current
    time); ``None`` when absent or unreadable, never negative."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def retry_after_from_headers(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """The server's wait hint in seconds from a response's headers: ``retry-after-ms`` (milliseconds, as OpenAI's
    API sends it) when readable, else ``Retry-After``; ``None`` when the server sent neither."""
    millis = headers.get("retry-after-ms") or headers.get("Retry-After-Ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    return retry_after_seconds(headers.get("Retry-After") or headers.get("retry-after"), now)


def retry_delay(
    attempt: int,
    retry_after: float | None,
    *,
    base: float,
    cap: float,
    rand: Callable[[], float] = random.random,
    retry_after_cap: float | None = None,
) -> float:
    """Seconds to wait before retry ``attempt + 1`` (``attempt`` counts from 0), see the module doc.

    ``retry_after`` (seconds, from :func:`retry_after_from_headers`) is used as it is, within ``retry_after_cap``
    (default ``cap``: a server that asks for a longer wait than the backoff's cap is still obeyed when this is
    larger); ``None`` gives ``min(base · 2^attempt, cap) · (1 − JITTER · rand())`` with ``rand()`` in [0, 1).
    """
    if retry_after is not None:
        return min(max(0.0, retry_after), cap if retry_after_cap is None else retry_after_cap)
    return min(base * 2.0 ** min(attempt, 64), cap) * (1 - JITTER * rand())


def retries_spent(max_retries: int, blind: int, paced: int, retry_after: float | None) -> bool:
    """Whether a call that just failed may not be retried again: ``max_retries`` retries of each kind — after
    failures without a ``Retry-After`` (``blind``) and after a server's ``Retry-After`` (``paced``: the server
    scheduling the request, not a sign that it fails) — are the most a call gets."""
    return (blind if retry_after is None else paced) >= max_retries


class RateLimiter:
    """At most one request start per ``interval`` seconds across all threads (``interval`` 0: no limit)."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval, self._clock = interval, clock
        self._next: float | None = None
        self._lock = threading.Lock()

    def wait(self, sleep: Callable[[float], Any]) -> None:
        """Sleep (with ``sleep``) until this request may start."""
        if self.interval <= 0:
            return
        with self._lock:
            now = self._clock()
            slot = now if self._next is None else max(now, self._next)
            self._next = slot + self.interval
        if slot > now:
            sleep(slot - now)


NEVER_TRANSIENT = frozenset({501, 505})
"""5xx statuses that say the server cannot do what was asked at all (Not Implemented, HTTP Version Not Supported):
asking again gets the same answer, so ``any_5xx`` leaves them out."""


@dataclass(frozen=True)
class RetryRules:
    """Which failures of an API are worth another attempt: the transient HTTP statuses (``any_5xx``: every 5xx too,
    except :data:`NEVER_TRANSIENT`) and whether a refused connection is (``False``: :class:`Unreachable` at once)."""

    statuses: frozenset[int] = frozenset({408, 409, 429})
    any_5xx: bool = True
    retry_refused: bool = False

    def transient(self, status: int) -> bool:
        """Whether an answer with this HTTP status is worth another attempt."""
        return status in self.statuses or (self.any_5xx and 500 <= status < 600 and status not in NEVER_TRANSIENT)
