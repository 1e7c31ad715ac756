"""What HTTP clients of the project share: reading a ``Retry-After`` header (the Perspective client, endpoints)."""

from __future__ import annotations

import email.utils
import time

__all__ = ["retry_after_seconds"]


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
