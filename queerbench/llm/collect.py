"""Drive a runner over dataset rows × samples through the response cache: reuse, persist each reply, count errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import pandas as pd

from queerbench.llm.cache import ResponseCache, cache_key
from queerbench.llm.settings import GenerationSettings, RunAbortedError, Runner, item_seed

__all__ = ["collect", "settings_dict"]


def collect(
    runner: Runner,
    rows: pd.DataFrame,
    settings: GenerationSettings,
    cache: ResponseCache,
    *,
    max_consecutive_errors: int = 10,
    progress: Callable[[int, int], None] | None = None,
) -> pd.DataFrame:
    """Get ``settings.samples`` replies for every row, from the cache where possible, persisting each new one.

    Returns one row per (prompt, sample) with ``response``, ``status`` (``ok``/``error``), ``error``, ``cached``
    and ``meta`` (JSON). Raises :class:`RunAbortedError` after ``max_consecutive_errors`` failures in a row (an
    endpoint that is down); every reply collected before that is already in the cache, so a rerun resumes.
    """
    fp = runner.fingerprint()
    decoding = settings.decoding()
    jobs = []
    for rec in rows.to_dict("records"):
        for s in range(settings.samples):
            key = cache_key(fp, rec["prompt"], s, decoding)
            jobs.append((rec, s, key, item_seed(settings.seed, rec["id"], s)))
    results: dict[str, dict[str, Any]] = {}
    todo = []
    for job in jobs:
        hit = cache.get(job[2])
        if hit is not None:
            results[job[2]] = {
                "response": hit["text"],
                "status": "ok",
                "error": None,
                "cached": True,
                "meta": hit["meta"],
            }
        else:
            todo.append(job)
    consecutive = 0
    done = 0
    for start in range(0, len(todo), settings.batch_size * 4):  # chunks keep memory bounded; runner batches inside
        chunk = todo[start : start + settings.batch_size * 4]
        for i, reply in runner.generate([j[0]["prompt"] for j in chunk], [j[3] for j in chunk], settings):
            rec, s, key, _ = chunk[i]
            cache.put(key, rec["id"], s, reply.text, reply.error, reply.meta)
            results[key] = {
                "response": reply.text,
                "status": "error" if reply.error else "ok",
                "error": reply.error,
                "cached": False,
                "meta": reply.meta,
            }
            done += 1
            if progress:
                progress(done, len(todo))
            consecutive = consecutive + 1 if reply.error else 0
            if consecutive >= max_consecutive_errors:
                raise RunAbortedError(
                    f"{consecutive} calls in a row failed (last: {reply.error}); stopping. "
                    f"{cache.count('ok')} responses are saved in {cache.path}; fix the model/endpoint and rerun "
                    "the same command to resume."
                )
    out = []
    for rec, s, key, seed in jobs:
        r = results[key]
        out.append(
            {
                **rec,
                "sample": s,
                "seed": seed,
                "model": runner.name,
                "response": r["response"],
                "status": r["status"],
                "error": r["error"],
                "cached": r["cached"],
                "prompt_format": r["meta"].get("prompt_format", ""),
                "meta": json.dumps(r["meta"], sort_keys=True),
            }
        )
    return pd.DataFrame(out)


def settings_dict(settings: GenerationSettings) -> dict[str, Any]:
    """The settings as a plain dict (for reports)."""
    return asdict(settings)
