"""Ask a runner ``generate`` requests through the reply cache: reuse, persist each reply, count errors.

A :class:`~queerbench.models.requests.Generate` request for a task's item (its ``item`` and ``sample`` set) is kept
in the cache under the runner's fingerprint, its prompt, its sample index and its decoding (:func:`request_key`):
:func:`ask_requests` asks a list of them, :class:`StreamCollector` one at a time through an endpoint's slots, and
:func:`collect` / :func:`collect_groups` ask rows × samples of prompts as such requests."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from queerbench.base.progress import progress_bar
from queerbench.models.generation.cache import ResponseCache, cache_key
from queerbench.models.generation.settings import GenerationSettings, RunAbortedError, Runner
from queerbench.models.requests import Generate

__all__ = [
    "ErrorStreak",
    "StreamCollector",
    "ask_requests",
    "collect",
    "collect_groups",
    "request_key",
    "row_requests",
    "settings_dict",
]


@dataclass
class ErrorStreak:
    """Failed calls in a row, carried across the :func:`collect` calls of one run (a run asks in small parts, and a
    dead server must stop it after ``max_consecutive_errors`` failures, not fail each part on its own)."""

    n: int = 0


def collect(
    runner: Runner,
    rows: pd.DataFrame,
    settings: GenerationSettings,
    cache: ResponseCache,
    *,
    max_consecutive_errors: int = 10,
    progress: Callable[[int, int], None] | None = None,
    desc: str = "replies",
    show_progress: bool = True,
    streak: ErrorStreak | None = None,
) -> pd.DataFrame:
    """Get ``settings.samples`` replies for every row, from the cache where possible, persisting each new one.

    ``rows`` needs an ``id`` and a ``prompt`` column (other columns are passed through). The cache key is the
    runner's fingerprint, the prompt text, the sample index and ``settings.decoding()``; each (prompt, sample) is
    asked once even if several rows share it. All missing calls go to the runner at once (an endpoint streams them
    through its slots, a local model batches them) and every reply is committed to the cache the moment it arrives.

    Returns one row per (row, sample), **in the rows' order whatever order replies arrived in**, with
    ``sample``, ``seed``, ``model``, ``response``, ``status`` (``ok``/``error``), ``error``, ``cached``,
    ``prompt_format``, ``finish_reason``, ``truncated`` (stopped at ``max_new_tokens``) and ``meta`` (JSON).
    Failed calls are never cached (a rerun retries them). A call that failed (after the runner's retries) is an
    ``error`` row and the other calls go on (:mod:`queerbench.models.generation.failures` reports them); only
    ``max_consecutive_errors`` failures in a row (a dead server, or settings it rejects for every prompt; counted in
    ``streak`` across calls when given) raise :class:`RunAbortedError`; a runner's fatal error (e.g.
    :class:`~queerbench.models.generation.settings.EndpointError`) propagates at once. Either way every reply that arrived is
    already stored, so rerunning resumes.

    Unless ``show_progress`` is False, a bar (:func:`queerbench.base.progress.progress_bar`, labelled ``desc``) counts
    the calls to make, advancing as each reply arrives (a runner that yields a batch at once advances it by the
    batch's rows), with replies/s and an ETA measured from the replies so far; ``progress(done, total)`` is
    called at the same moments.
    """
    (frame,) = collect_groups(
        runner,
        [(rows, settings)],
        cache,
        max_consecutive_errors=max_consecutive_errors,
        progress=progress,
        desc=desc,
        show_progress=show_progress,
        streak=streak,
    )
    return frame


def collect_groups(
    runner: Runner,
    groups: Sequence[tuple[pd.DataFrame, GenerationSettings]],
    cache: ResponseCache,
    *,
    max_consecutive_errors: int = 10,
    progress: Callable[[int, int], None] | None = None,
    desc: str = "replies",
    show_progress: bool = True,
    streak: ErrorStreak | None = None,
) -> list[pd.DataFrame]:
    """:func:`collect` for several groups of rows, each with its own settings (a survey's and a story's decoding),
    asked together: an endpoint streams every missing call of every group through one set of slots, so the last
    stragglers of one group never hold up the next (a local model asks group by group). One frame per group, each
    in its rows' order; one progress bar and one error streak for all."""
    asked = [(row_requests(rows, settings), settings.batch_size) for rows, settings in groups]
    answered = _answer(
        runner,
        asked,
        cache,
        max_consecutive_errors=max_consecutive_errors,
        progress=progress,
        desc=desc,
        show_progress=show_progress,
        streak=streak,
    )
    frames = []
    for (rows, settings), results in zip(groups, answered, strict=True):
        calls = [(rec, s) for rec in rows.to_dict("records") for s in range(settings.samples)]
        frames.append(
            pd.DataFrame(
                [
                    _row(runner, result, rec, s, request.call_seed)
                    for (rec, s), request, result in zip(calls, row_requests(rows, settings), results, strict=True)
                ]
            )
        )
    return frames


def request_key(fingerprint: dict[str, Any], request: Generate) -> str:
    """The reply cache's key of ``request`` on the model of ``fingerprint``: :func:`cache_key` of its prompt, its
    sample index and its decoding (the run's seed included)."""
    return cache_key(fingerprint, request.prompt, request.sample, request.decoding())


def row_requests(rows: pd.DataFrame, settings: GenerationSettings) -> list[Generate]:
    """``settings.samples`` requests per row of ``rows`` (an ``id`` and a ``prompt`` column), row by row, each for
    the row's id as its item, with ``settings``' decoding and seed."""
    return [
        Generate(
            str(rec["prompt"]),
            settings.max_new_tokens,
            settings.temperature,
            settings.top_p,
            settings.seed,
            item=str(rec["id"]),
            sample=s,
        )
        for rec in rows.to_dict("records")
        for s in range(settings.samples)
    ]


def ask_requests(
    runner: Runner,
    requests: Sequence[Generate],
    cache: ResponseCache,
    *,
    batch_size: int = 8,
    max_consecutive_errors: int = 10,
    progress: Callable[[int, int], None] | None = None,
    desc: str = "replies",
    show_progress: bool = True,
    streak: ErrorStreak | None = None,
) -> list[dict[str, Any]]:
    """The reply to each of ``requests``, in order, from the cache where it has it (:func:`request_key`), else from
    ``runner``, each reply committed to the cache the moment it arrives (a request asked twice is asked once).

    Requests with one decoding are asked together (a local model ``batch_size`` prompts a batch; an endpoint
    streams requests of several decodings through one set of slots). Each result has ``response`` (None for a
    failed call), ``error``, ``cached`` and ``meta``. A failed call is never cached and the other calls go on; only
    ``max_consecutive_errors`` failures in a row (counted in ``streak`` across calls when given) raise
    :class:`RunAbortedError`, with every reply that arrived already stored. ``progress``, ``desc`` and
    ``show_progress``: as :func:`collect`'s."""
    (results,) = _answer(
        runner,
        [(requests, batch_size)],
        cache,
        max_consecutive_errors=max_consecutive_errors,
        progress=progress,
        desc=desc,
        show_progress=show_progress,
        streak=streak,
    )
    return results


def _answer(
    runner: Runner,
    groups: Sequence[tuple[Sequence[Generate], int]],
    cache: ResponseCache,
    *,
    max_consecutive_errors: int,
    progress: Callable[[int, int], None] | None,
    desc: str,
    show_progress: bool,
    streak: ErrorStreak | None,
) -> list[list[dict[str, Any]]]:
    """The results of groups of requests (each with its batch size), one list per group in its requests' order.
    The calls to make are asked per group and decoding (:func:`_ask`), in the order first seen; the seed splits them
    only for an item's requests (whose seed is the run's), as :func:`~queerbench.models.backends.generate.generate_with`
    batches bare requests of one decoding whatever their own seeds."""
    fp = runner.fingerprint()
    results: dict[str, dict[str, Any]] = {}
    units: dict[tuple[Any, ...], int] = {}
    unit_settings: list[GenerationSettings] = []
    pending: list[tuple[str, Generate, int]] = []  # (key, request, unit)
    queued: set[str] = set()
    keyed = []
    for g, (requests, batch_size) in enumerate(groups):
        keys = [request_key(fp, r) for r in requests]
        keyed.append(keys)
        for key, request in zip(keys, requests, strict=True):
            if key in results or key in queued:
                continue
            hit = cache.get(key)
            if hit is not None:
                results[key] = {"response": hit["text"], "error": None, "cached": True, "meta": hit["meta"]}
                continue
            # asked together: a group's requests of one decoding; an item's request's seed is the run's (a re-ask
            # runs under a seed of its own), a bare request's seed its own call's, which does not split a batch
            seed = request.seed if request.item is not None else None
            unit = (g, request.max_new_tokens, request.temperature, request.top_p, seed)
            if unit not in units:
                units[unit] = len(unit_settings)
                unit_settings.append(
                    GenerationSettings(
                        temperature=request.temperature,
                        top_p=request.top_p,
                        max_new_tokens=request.max_new_tokens,
                        seed=request.seed,
                        samples=1,
                        batch_size=batch_size,
                    )
                )
            queued.add(key)
            pending.append((key, request, units[unit]))
    streak = streak if streak is not None else ErrorStreak()
    n_cached = len(results)
    label = f"{desc} ({n_cached} cached)" if n_cached else desc
    stored: set[int] = set()  # replies an endpoint's worker already put in the cache

    def keep(i: int, reply: Any) -> bool:
        key, request, _ = pending[i]
        if cache.keep(key, request.item or "", request.sample, reply.text, reply.meta):
            stored.add(i)
            return True
        return False

    replies = _ask(runner, pending, unit_settings, keep)
    with contextlib.ExitStack() as stack:
        bar = stack.enter_context(progress_bar(len(pending), label, "reply", disable=not show_progress or not pending))
        stack.callback(getattr(replies, "close", lambda: None))  # on an abort a generator runner stops at once
        for done, (i, reply) in enumerate(replies, start=1):
            key, request, _ = pending[i]
            if reply.error is None and reply.text is not None:
                if i not in stored:
                    cache.put(key, request.item or "", request.sample, reply.text, reply.meta)
                results[key] = {"response": reply.text, "error": None, "cached": False, "meta": reply.meta}
                streak.n = 0
            else:
                results[key] = {
                    "response": None,
                    "error": reply.error or "no reply",
                    "cached": False,
                    "meta": reply.meta,
                }
                streak.n += 1
            bar.update(1)
            if progress:
                progress(done, len(pending))
            if streak.n >= max_consecutive_errors:
                raise _aborted(streak.n, results[key]["error"], cache)
    return [[results[key] for key in keys] for keys in keyed]


def _aborted(n: int, last: Any, cache: ResponseCache) -> RunAbortedError:
    """The one line for ``n`` failed calls in a row (``last``: the last one's error): what the cache kept, and what a
    rerun does."""
    stored = cache.count()
    kept = (
        f"{stored} replies are saved in {cache.path}; fix the model/endpoint and rerun the same command to resume."
        if stored
        else "no reply was saved; fix the model/endpoint and rerun the same command."
    )
    return RunAbortedError(f"{n} calls in a row failed (last: {last}); stopping. {kept}")


def _ask(
    runner: Runner,
    pending: list[tuple[str, Generate, int]],
    settings: list[GenerationSettings],
    keep: Callable[[int, Any], bool],
) -> Iterator[tuple[int, Any]]:
    """``(index in pending, reply)`` as replies arrive: for several units (a group's requests of one decoding), one
    stream through an endpoint's slots (a runner with ``open_stream`` that sends one prompt per request), whose
    workers store each reply with ``keep``; else the runner's ``generate``, unit by unit (one unit: exactly
    :func:`collect`'s calls; a runner that packs several prompts into a request batches them there)."""
    if not pending:
        return
    if len(settings) > 1 and hasattr(runner, "open_stream") and not getattr(runner, "packs_prompts", False):
        stream = runner.open_stream(keep)
        try:
            for i, (_, request, unit) in enumerate(pending):
                stream.submit(i, request.prompt, request.call_seed, settings[unit])
            stream.close()
            yield from stream.replies()
        finally:
            stream.stop()
        return
    for unit, unit_settings in enumerate(settings):
        where = [i for i, job in enumerate(pending) if job[2] == unit]
        if where:
            got = runner.generate(
                [pending[i][1].prompt for i in where], [pending[i][1].call_seed for i in where], unit_settings
            )
            for j, reply in got:
                yield where[j], reply


def _row(runner: Runner, result: dict[str, Any], rec: dict[Any, Any], sample: int, seed: int) -> dict[Any, Any]:
    """One output row of :func:`collect`."""
    meta = result["meta"]
    return {
        **rec,
        "sample": sample,
        "seed": seed,
        "model": runner.name,
        "response": result["response"],
        "status": "error" if result["error"] else "ok",
        "error": result["error"],
        "cached": result["cached"],
        "prompt_format": meta.get("prompt_format", ""),
        "finish_reason": meta.get("finish_reason"),
        "truncated": meta.get("finish_reason") == "length",
        "meta": json.dumps(meta, sort_keys=True),
    }


def settings_dict(settings: GenerationSettings) -> dict[str, Any]:
    """The settings as a plain dict (for reports)."""
    return asdict(settings)


class StreamCollector:
    """Calls streamed through an endpoint's slots, each asked once through the reply cache (:func:`ask_requests`'
    rules for calls that arrive one at a time): :meth:`ask` a ``generate`` request at any time, :meth:`results` hands out
    each answer as it arrives, under the tag it was asked with.

    A call already in the cache is answered at once and makes no request; a call already in flight (two rows with
    one prompt) is asked once and answers both. Each reply is committed to the cache the moment it arrives; a failed
    call is never cached. ``max_consecutive_errors`` failures in a row (counted in ``streak`` across a run) raise
    :class:`RunAbortedError`; every reply that arrived is already stored.
    """

    def __init__(
        self,
        runner: Any,
        cache: ResponseCache,
        *,
        streak: ErrorStreak | None = None,
        max_consecutive_errors: int = 10,
    ) -> None:
        self.runner, self.cache = runner, cache
        self.streak = streak if streak is not None else ErrorStreak()
        self.max_consecutive_errors = max_consecutive_errors
        self._fp = runner.fingerprint()
        self._stream = runner.open_stream(self._keep)
        self._ready: list[tuple[Any, dict[str, Any]]] = []
        self._waiting: dict[str, list[tuple[Any, str, int]]] = {}
        self._first: dict[str, tuple[str, int]] = {}  # a call in flight: the (row id, sample) its reply is stored under
        self._stored: set[str] = set()  # replies the stream's workers put in the cache
        self.asked = 0

    def _keep(self, key: str, reply: Any) -> bool:
        """In the worker that received it: store a reply the moment it arrives."""
        row_id, sample = self._first[key]
        if self.cache.keep(key, row_id, sample, reply.text, reply.meta):
            self._stored.add(key)
            return True
        return False

    def ask(self, tag: Any, request: Generate) -> None:
        """Ask ``request`` (its result comes out under ``tag``: :meth:`results`)."""
        key = request_key(self._fp, request)
        row_id, sample = request.item or "", request.sample
        self.asked += 1
        hit = self.cache.get(key)
        if hit is not None:
            self._ready.append((tag, {"response": hit["text"], "error": None, "cached": True, "meta": hit["meta"]}))
            return
        if key in self._waiting:
            self._waiting[key].append((tag, row_id, sample))
            return
        self._waiting[key] = [(tag, row_id, sample)]
        self._first[key] = (row_id, sample)
        settings = GenerationSettings(
            temperature=request.temperature,
            top_p=request.top_p,
            max_new_tokens=request.max_new_tokens,
            seed=request.seed,
            samples=1,
            batch_size=1,  # one prompt per request through the slots
        )
        self._stream.submit(key, request.prompt, request.call_seed, settings)

    def results(self) -> Iterator[tuple[Any, dict[str, Any]]]:
        """``(tag, result)`` of every call asked so far (calls asked while iterating included) as it is answered:
        ``response``, ``error``, ``cached``, ``meta``."""
        while True:
            while self._ready:
                yield self._ready.pop(0)
            if not self._waiting:
                return
            for key, reply in self._stream.replies():
                del self._first[key]
                stored = key in self._stored
                self._stored.discard(key)
                for tag, row_id, sample in self._waiting.pop(key):
                    if reply.error is None and reply.text is not None:
                        if not stored:
                            self.cache.put(key, row_id, sample, reply.text, reply.meta)
                            stored = True
                        result = {"response": reply.text, "error": None, "cached": False, "meta": reply.meta}
                        self.streak.n = 0
                    else:
                        result = {
                            "response": None,
                            "error": reply.error or "no reply",
                            "cached": False,
                            "meta": reply.meta,
                        }
                        self.streak.n += 1
                    self._ready.append((tag, result))
                    if self.streak.n >= self.max_consecutive_errors:
                        raise _aborted(self.streak.n, result["error"], self.cache)
                while self._ready:
                    yield self._ready.pop(0)

    def close(self) -> None:
        """Stop the stream's workers."""
        self._stream.stop()
