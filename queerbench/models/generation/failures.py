"""Prompts that got no reply after their retries: which, how many and why, reported together once a run has asked
every other prompt.

A prompt that fails (the endpoint gave up after its retries, or rejected that one prompt) does not stop the others:
:func:`~queerbench.models.generation.collect.collect` returns it as an ``error`` row and never caches it, so the run goes on, the
caller reports the failures with :func:`describe_failures`, and a rerun of the same command asks only the failed
prompts (every reply that arrived is a cache hit).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

__all__ = ["FailedPrompt", "describe_failures", "failed_prompts", "short_reason"]

SHOWN = 10
"""How many failed prompts :func:`describe_failures` lists one by one (the rest are counted)."""


@dataclass(frozen=True)
class FailedPrompt:
    """One (prompt, sample) that got no reply: its row id, sample index and the runner's error."""

    id: str
    sample: int
    error: str


def failed_prompts(frame: pd.DataFrame) -> list[FailedPrompt]:
    """The ``error`` rows of a :func:`~queerbench.models.generation.collect.collect` result, in the rows' order."""
    if frame.empty or "status" not in frame:
        return []
    bad = frame[frame["status"] != "ok"]
    return [
        FailedPrompt(str(rec["id"]), int(rec["sample"]), str(rec["error"] or "no reply"))
        for rec in bad.to_dict("records")
    ]


_HTTP = re.compile(r"^HTTP \d{3}")


def short_reason(error: str) -> str:
    """The cause of a failure in a few words: the last attempt's problem of a "gave up after N attempts: …" error,
    the status of an ``HTTP 400: <server text>`` rejection, else the error's first 60 characters."""
    if error.startswith("gave up after") and ": " in error:
        error = error.split(": ", 1)[1].split("; ")[-1]
    match = _HTTP.match(error)
    return match.group(0) if match else error[:60]


def describe_failures(failures: Sequence[FailedPrompt], total: int, *, what: str = "prompt") -> str:
    """A short report: how many of ``total`` calls failed and why (counted by cause), then the first
    :data:`SHOWN` failures one per line, and how to get the rest (rerun: only these are asked again)."""
    causes = Counter(short_reason(f.error) for f in failures)
    why = ", ".join(f"{cause} ×{n}" for cause, n in causes.most_common())
    n = len(failures)
    lines = [
        f"{n} of {total} calls got no reply after their retries ({why}); every other reply is saved: rerun the "
        f"same command to ask only these {n}"
    ]
    lines += [f"  {what} {f.id}, sample {f.sample}: {f.error[:200]}" for f in failures[:SHOWN]]
    if n > SHOWN:
        lines.append(f"  … and {n - SHOWN} more")
    return "\n".join(lines)
