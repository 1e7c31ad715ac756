"""The written form of a signature, in the manner of sacrebleu's: ``name:value`` fields joined by ``|``.

What goes into a signature is the run's business (:mod:`queerbench.run.signature` for the fill-in-the-blank tasks, the
SCM probes' pipeline for theirs); how it is written and read back is one rule, here: values are written as they are,
``none`` for a missing one, with ``|`` and ``%`` escaped so that any model name or URL survives the round trip.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["SEPARATOR", "described", "format_signature", "parse_signature", "short_hash", "show"]

SEPARATOR = "|"


def show(value: Any) -> str:
    """A value as a signature writes it (``none`` for None; ``|`` and ``%`` escaped)."""
    text = "none" if value is None else str(value)
    return text.replace("%", "%25").replace(SEPARATOR, "%7C")


def short_hash(digest: Any, n: int = 12) -> str | None:
    """The first ``n`` characters of a hash (None when there is none)."""
    return str(digest)[:n] if digest else None


def format_signature(fields: Iterable[tuple[str, Any]]) -> str:
    """``name:value|name:value…`` of ordered ``(name, value)`` pairs."""
    return SEPARATOR.join(f"{name}:{show(value)}" for name, value in fields)


def parse_signature(text: str) -> dict[str, str]:
    """A signature string back into its ``{name: value}`` fields."""
    out = {}
    for part in str(text).split(SEPARATOR):
        name, _, value = part.partition(":")
        out[name] = value.replace("%7C", SEPARATOR).replace("%25", "%")
    return out


def described(name: str, description: Any) -> str:
    """``name@<12 hex digits>``: ``name`` with the sha256 of its JSON ``description`` (what made it: a scorer's
    weights, its fit), so that a signature changes when what stands behind the name does."""
    import hashlib
    import json

    text = json.dumps(description, sort_keys=True, default=str)
    return f"{name}@{hashlib.sha256(text.encode('utf-8')).hexdigest()[:12]}"
