"""The retry policy the project's HTTP clients share (OpenAI-compatible endpoints, the Perspective client).

It is the one serving clients use (the OpenAI and Anthropic Python SDKs do the same):

- a ``Retry-After`` the server sends (delta-seconds or an HTTP date; ``retry-after-ms`` in milliseconds, when sent,
  wins) **sets** the delay, capped at the client's maximum: ``Retry-After: 0`` means retry at once, with no
  exponential floor, so a server that rate-limits each request once costs one round trip, not a second;
- without one, exponential backoff ``base · 2^attempt`` capped at the maximum, shortened by a random 0–25 %
  (jitter), so that clients which failed together do not all retry at the same instant.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable, Mapping

__all__ = ["JITTER", "retry_after_from_headers", "retry_after_seconds", "retry_delay"]

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
) -> float:
    """Seconds to wait before retry ``attempt + 1`` (``attempt`` counts from 0), see the module doc.

    ``retry_after`` (seconds, from :func:`retry_after_from_headers`) is used as it is, within ``cap``; ``None``
    gives ``min(base · 2^attempt, cap) · (1 − JITTER · rand())`` with ``rand()`` in [0, 1).
    """
    if retry_after is not None:
        return min(max(0.0, retry_after), cap)
    return min(base * 2.0 ** min(attempt, 64), cap) * (1 - JITTER * rand())
