"""A run's prediction, saved as it goes, so that an interrupted run loses at most a few seconds of work.

Whichever predictor the method registry (:mod:`queerbench.methods.registry`) gives predicts the sentences not yet saved, in
*parts* written atomically under ``OUT/.chunks`` (``chunk-<first row>-<end row>.parquet``). A part holds at most
:data:`SAVE_EVERY` sentences and is sized from the measured pace so that it takes at most half of
:data:`SAVE_SECONDS` (:class:`PartPlan`; the first part is one sentence, to measure the pace), so no more than 64
sentences or 30 seconds of predictions, whichever is less, are ever lost. The replies of an ``instructed`` run are
also kept one by one in the reply cache as they arrive.

A resume reads which rows each saved file holds from its ``id`` column (each must be a run of the run's sentences,
in order), so run folders saved in 512-sentence chunks by earlier versions resume too, and is refused when the loaded
weights are not those of the saved parts. :func:`interruption` says truthfully what an interrupted run kept.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench.base.files import atomic_path, read_json, read_parquet, write_json
from queerbench.base.progress import progress_bar
from queerbench.methods.registry import Predictor, check_same_weights, load_predictor

__all__ = [
    "FIRST_PART",
    "SAVE_EVERY",
    "SAVE_SECONDS",
    "PartPlan",
    "RunInterrupted",
    "interruption",
    "predict_chunks",
    "saved_parts",
]

SAVE_EVERY = 64
"""The most sentences a saved part holds."""
SAVE_SECONDS = 30.0
"""The most seconds of prediction a saved part holds (parts are sized for half of it: paces vary by sentence)."""
FIRST_PART = 1
"""The first part's size, before any pace is known (a slow model could otherwise spend minutes on it)."""

_FIX = "delete it and rerun the same command (only its sentences are predicted again)"


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run, with a message that says what was kept (``args[0]``)."""


@dataclass
class PartPlan:
    """How many sentences the next part holds: at most ``every``, and no more than the last part's pace predicts to
    finish within half of ``seconds``; ``first`` before any part finished."""

    every: int = SAVE_EVERY
    seconds: float = SAVE_SECONDS
    first: int = FIRST_PART
    rate: float | None = None
    """Sentences per second of the last finished part."""

    def size(self) -> int:
        """The size of the next part (at least 1)."""
        if self.rate is None:
            return max(1, min(self.first, self.every))
        return max(1, min(self.every, int(self.rate * self.seconds / 2)))

    def record(self, n: int, seconds: float) -> None:
        """A part of ``n`` sentences took ``seconds``."""
        self.rate = n / max(seconds, 1e-6)


def saved_parts(chunk_dir: Path, ids: list[str]) -> list[tuple[int, int, Path]]:
    """The saved parts in ``chunk_dir`` as ``(first row, end row, file)``, sorted; each must hold a run of ``ids`` in
    order and no two may overlap, else a ``RuntimeError`` (a folder of other sentences is never mixed in)."""
    position = {sid: i for i, sid in enumerate(ids)}
    parts = []
    for path in sorted(chunk_dir.glob("chunk-*.parquet")):
        got = read_parquet(path, columns=["id"], fix=_FIX)["id"].tolist()
        start = position.get(got[0]) if got else None
        if start is None or ids[start : start + len(got)] != got:
            raise RuntimeError(
                f"the saved chunks in {chunk_dir} do not match this run's sentences ({path.name}); "
                "delete that folder and rerun"
            )
        parts.append((start, start + len(got), path))
    parts.sort()
    for (_, end, a), (start, _, b) in itertools.pairwise(parts):
        if start < end:
            raise RuntimeError(f"{a.name} and {b.name} in {chunk_dir} overlap; delete that folder and rerun")
    return parts


def _gaps(parts: list[tuple[int, int, Path]], n: int) -> list[tuple[int, int]]:
    """The row ranges ``[start, end)`` of ``range(n)`` that no saved part covers."""
    gaps, pos = [], 0
    for start, end, _ in parts:
        if start > pos:
            gaps.append((pos, start))
        pos = max(pos, end)
    return gaps + ([(pos, n)] if pos < n else [])


def _predict_gaps(
    frame: pd.DataFrame,
    gaps: list[tuple[int, int]],
    predictor: Predictor,
    chunk_dir: Path,
    progress: Callable[[int, int], None] | None,
    calls_per_sentence: int,
    clock: Callable[[], float],
) -> int:
    """Predict the rows of ``gaps`` part by part (:class:`PartPlan`), each part written atomically; returns how many
    sentences were predicted. A part whose calls did not all get a reply is not saved, the others go on; the failures
    are then raised as one ``GenerationError`` (a rerun asks only the failed calls)."""
    from queerbench.methods.instructed.replies import GenerationError

    total = len(frame)
    done = total - sum(end - start for start, end in gaps)
    plan, predicted, failed = PartPlan(SAVE_EVERY, SAVE_SECONDS, FIRST_PART), 0, []  # read at call time
    with progress_bar(total, "predicting", "sent", disable=progress is not None, initial=done) as bar:

        def tick(n: int) -> None:  # per finished sentence (a batch's sentences finish together)
            nonlocal done
            done += n
            bar.update(n)
            if progress is not None:
                progress(min(done, total), total)

        for start, end in gaps:
            pos = start
            while pos < end:
                stop = min(end, pos + plan.size())
                part = frame.iloc[pos:stop]
                began = clock()
                try:
                    columns = predictor.predict(part["id"].tolist(), part["masked_sentence"].tolist(), tick)
                except GenerationError as exc:  # not saved: the other parts go on, a rerun asks only the failed calls
                    failed.append(exc)
                    pos = stop
                    continue
                plan.record(stop - pos, clock() - began)
                chunk = pd.DataFrame({"id": part["id"].to_numpy(), **columns})
                with atomic_path(chunk_dir / f"chunk-{pos:06d}-{stop:06d}.parquet") as tmp:
                    chunk.to_parquet(tmp, index=False)
                predicted += stop - pos
                pos = stop
    if failed:
        raise GenerationError.merge(failed, total=total * calls_per_sentence)  # of all the run's calls
    return predicted


def predict_chunks(
    frame: pd.DataFrame,
    options: Any,
    out: Path,
    progress: Callable[[int, int], None] | None,
    fingerprint: dict[str, Any] | None = None,
    log: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[pd.DataFrame, dict[str, Any], int]:
    """Predict every sentence of ``frame`` not already saved in ``OUT/.chunks``; return all predictions (in the
    frame's order), the model metadata and how many sentences this call predicted.

    The method's predictor comes from the registry (:func:`queerbench.methods.registry.load_predictor`); a resume hands it the
    metadata of the saved parts (a masked LM then loads the commit they came from) and is refused when the loaded
    weights are not theirs (:func:`queerbench.methods.registry.check_same_weights`), whatever the method. ``progress(done,
    total)`` replaces the terminal bar; ``clock`` times the parts (:class:`PartPlan`).
    """
    chunk_dir = out / ".chunks"
    chunk_dir.mkdir(exist_ok=True)
    ids = frame["id"].tolist()
    parts = saved_parts(chunk_dir, ids)
    gaps = _gaps(parts, len(frame))
    meta_path = chunk_dir / "model.json"
    stored: dict[str, Any] | None = read_json(meta_path, fix=_FIX) if meta_path.is_file() else None
    meta: dict[str, Any] = stored or {}
    predicted = 0
    if gaps:
        predictor = load_predictor(
            options, chunk_dir / "replies.sqlite", log, fingerprint=fingerprint, stored=stored if parts else None
        )
        try:
            meta = predictor.metadata()
            if stored is not None:
                check_same_weights(stored, meta, str(options.model), chunk_dir)
            write_json(meta_path, meta)
            predicted = _predict_gaps(frame, gaps, predictor, chunk_dir, progress, options.top_k, clock)
        finally:
            predictor.close()  # a reply cache (its folder is removed once the predictions are written)
        parts = saved_parts(chunk_dir, ids)
    chunks = pd.concat([read_parquet(path, fix=_FIX) for _, _, path in parts], ignore_index=True)
    if chunks["id"].tolist() != ids:
        raise RuntimeError(
            f"the saved chunks in {chunk_dir} do not match this run's sentences; delete that folder and rerun"
        )
    return chunks, meta, predicted


def interruption(out: Path, frame: pd.DataFrame, removed: bool) -> RunInterrupted:
    """What to tell the user after Ctrl-C during prediction: how many sentences (and replies) are saved and what a
    rerun does; ``removed``: nothing was saved, so the claim on the output folder was undone."""
    if removed:
        return RunInterrupted(
            f"interrupted before any prediction was saved: nothing is kept in {out}; rerun the same command to start"
        )
    chunk_dir = out / ".chunks"
    try:
        n_saved = sum(end - start for start, end, _ in saved_parts(chunk_dir, frame["id"].tolist()))
    except (RuntimeError, ValueError, OSError):
        n_saved = 0
    replies = ""
    if (chunk_dir / "replies.sqlite").is_file():
        from queerbench.models.generation import ResponseCache

        cache = ResponseCache(chunk_dir / "replies.sqlite")
        try:
            replies = f", and {cache.count()} replies in {chunk_dir / 'replies.sqlite'}"
        finally:
            cache.close()
    rest = len(frame) - n_saved
    return RunInterrupted(
        f"interrupted: the predictions of {n_saved} of {len(frame)} sentences are saved in {chunk_dir}{replies}; "
        f"rerun the same command to resume (it predicts the other {rest}"
        + (", asking only the calls whose replies are not saved)" if replies else ")")
    )
