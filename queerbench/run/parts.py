"""A run's prediction, saved as it goes, so that an interrupted run loses at most a few seconds of work.

Whichever predictor the method registry (:mod:`queerbench.methods.registry`) gives predicts the sentences not yet
saved, handing out rows as they are done (its ``stream``): a model that predicts a batch at a time in parts of at
most :data:`SAVE_EVERY` sentences sized from the measured pace to take at most half of :data:`SAVE_SECONDS`
(:class:`PartPlan`; the first part is one sentence, to measure the pace), each saved as it ends; an endpoint streams
every prompt of the run through its slots and its rows, in the order they complete, are saved at least every
:data:`SAVE_EVERY` sentences or half of :data:`SAVE_SECONDS`. Either way no more than 64 sentences or 30 seconds of
predictions are ever lost, and what was done is saved before an error or Ctrl-C ends the run. Files are written
atomically under ``OUT/.chunks`` as ``chunk-<first row>-<end row>.parquet`` (the rows it holds lie between them);
the replies of a generative run are also kept one by one in the reply cache as they arrive.

A resume reads which rows each saved file holds from its ``id`` column (any order; no row in two files), so run
folders of earlier versions resume too, checks that every file has the columns of the others, and is refused when
the loaded weights are not those of the saved parts. The rows of ``predictions.parquet`` are in the task's order,
whatever order they were saved in. :func:`kept` says truthfully what a stopped run kept (the runner's messages,
:mod:`queerbench.run.runner`, read it).

The request runner (:mod:`queerbench.run.requests`) saves and reads its items' parts with the same
:class:`PartSaver` and :func:`read_parts`: the same file names, atomic writes, overlap and column checks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench.base.files import atomic_path, read_json_object, read_parquet, write_json
from queerbench.base.progress import progress_bar
from queerbench.methods.base import GenerationError, Rows
from queerbench.methods.registry import Predictor, check_same_weights, load_predictor

__all__ = [
    "FIRST_PART",
    "SAVE_EVERY",
    "SAVE_SECONDS",
    "PartPlan",
    "PartSaver",
    "RunInterrupted",
    "kept",
    "predict_chunks",
    "read_parts",
    "saved_parts",
]

SAVE_EVERY = 64
"""The most sentences a saved part holds."""
SAVE_SECONDS = 30.0
"""The most seconds of prediction a saved part holds (parts are sized for half of it: paces vary by sentence)."""
FIRST_PART = 1
"""The first part's size, before any pace is known (a slow model could otherwise spend minutes on it)."""


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
    clock: Callable[[], float] = time.monotonic

    def now(self) -> float:
        """The time parts are measured in."""
        return self.clock()

    def size(self) -> int:
        """The size of the next part (at least 1)."""
        if self.rate is None:
            return max(1, min(self.first, self.every))
        return max(1, min(self.every, int(self.rate * self.seconds / 2)))

    def record(self, n: int, seconds: float) -> None:
        """A part of ``n`` sentences took ``seconds``."""
        self.rate = n / max(seconds, 1e-6)


def saved_parts(
    chunk_dir: Path,
    ids: list[str],
    sentences: list[str] | None = None,
    *,
    noun: str = "sentences",
    in_order: bool = True,
) -> list[tuple[list[int], Path]]:
    """The saved parts in ``chunk_dir`` as ``(the rows they hold, file)``; else a one-line ``ValueError`` (a folder
    of other items is never mixed in). A part of this version holds its rows in any order with each row's
    sentence, which must be the run's sentence of that id (``sentences``, in the order of ``ids``); a part without
    them (of an earlier version, or of a run whose items have no sentence) holds ids of the run: a run of ``ids`` in
    order where ``in_order`` (a fill-in-the-blank run's earlier parts), else any of them. No row may be in two
    files. ``noun``: what the items are called in the messages."""
    import pyarrow.parquet as pq

    position = {sid: i for i, sid in enumerate(ids)}
    owner: dict[int, Path] = {}
    parts = []
    for path in sorted(chunk_dir.glob("chunk-*.parquet")):
        try:
            signed = "sentence" in pq.read_schema(path).names
        except (OSError, ValueError):
            signed = False  # unreadable: read_parquet below names the file and the fix
        got = read_parquet(path, columns=["id", "sentence"] if signed else ["id"], fix=_fix(noun))
        rows = [position.get(sid) for sid in got["id"]]
        if signed and sentences is not None:
            ok = all(r is not None and sentences[r] == s for r, s in zip(rows, got["sentence"], strict=True))
        elif in_order:
            ok = bool(rows) and rows[0] is not None and ids[rows[0] : rows[0] + len(rows)] == got["id"].tolist()
        else:
            ok = bool(rows) and all(r is not None for r in rows)
        if not rows or not ok:
            raise ValueError(
                f"the saved chunks in {chunk_dir} do not match this run's {noun} ({path.name}); "
                "delete that folder and rerun"
            )
        held = [r for r in rows if r is not None]  # all of them: `ok` means every id is one of the run's
        for r in held:
            if r in owner:
                raise ValueError(
                    f"{owner[r].name} and {path.name} in {chunk_dir} overlap; delete that folder and rerun"
                )
            owner[r] = path
        parts.append((held, path))
    return parts


def _fix(noun: str) -> str:
    """What to do with a damaged part (only its items are done again)."""
    return f"delete it and rerun the same command (only its {noun} are predicted again)"


def _todo(parts: list[tuple[list[int], Path]], n: int) -> list[int]:
    """The rows of ``range(n)`` that no saved part holds, in order."""
    done = {r for rows, _ in parts for r in rows}
    return [r for r in range(n) if r not in done]


def _check_columns(
    parts: list[tuple[list[int], Path]],
    chunk_dir: Path,
    *,
    noun: str = "sentences",
    required: tuple[str, ...] = ("id", "tokens"),
    sentence_kept: bool = True,
) -> None:
    """Every saved part has the columns of the others and the ``required`` ones (a fill-in-the-blank run's
    ``tokens``), else a one-line ``ValueError`` naming the file: a part that lost a column would leave holes in
    ``predictions.parquet``. ``sentence_kept``: the parts keep each row's sentence to check it (a part of an earlier
    version may lack it), not a prediction column."""
    import pyarrow.parquet as pq

    kept = {"sentence"} if sentence_kept else set()
    columns = {path: set(pq.read_schema(path).names) - kept for _, path in parts}
    every = set().union(*columns.values()) if columns else set()
    for path, have in columns.items():
        missing = sorted((every | set(required)) - have)
        if missing:
            raise ValueError(
                f"{path} lacks the column(s) {', '.join(missing)} that the run's other saved parts have; {_fix(noun)}"
            )


def read_parts(
    chunk_dir: Path,
    ids: list[str],
    sentences: list[str] | None = None,
    *,
    noun: str = "sentences",
    in_order: bool = True,
    required: tuple[str, ...] = ("id", "tokens"),
) -> pd.DataFrame:
    """Every row the saved parts in ``chunk_dir`` hold (checked: :func:`saved_parts`, :func:`_check_columns`), in
    the order of ``ids``, without the sentence kept to check them where the run has ``sentences`` (empty, with an
    ``id`` column, when none)."""
    parts = saved_parts(chunk_dir, ids, sentences, noun=noun, in_order=in_order)
    _check_columns(parts, chunk_dir, noun=noun, required=required, sentence_kept=sentences is not None)
    if not parts:
        return pd.DataFrame({"id": pd.Series([], dtype=object)})
    chunks = pd.concat([read_parquet(path, fix=_fix(noun)) for _, path in parts], ignore_index=True)
    if sentences is not None:  # the sentence kept to check each row (a run without them keeps none)
        chunks = chunks.drop(columns=["sentence"], errors="ignore")
    order = {sid: i for i, sid in enumerate(ids)}
    return chunks.sort_values("id", key=lambda c: c.map(order), kind="stable").reset_index(drop=True)


class PartSaver:
    """Saves handed-out rows under ``chunk_dir`` as parts: at each checkpoint, or when ``every`` rows or half of
    ``seconds`` have gathered since the last save; each part is written atomically as
    ``chunk-<first row>-<end row>.parquet`` (its rows lie between them, and no other part starts at its first),
    with each row's sentence where the run has them (``sentences``, checked by a resume)."""

    def __init__(
        self,
        ids: list[str],
        chunk_dir: Path,
        clock: Callable[[], float] = time.monotonic,
        *,
        sentences: list[str] | None = None,
        every: int = SAVE_EVERY,
        seconds: float = SAVE_SECONDS,
    ) -> None:
        self.position = {sid: i for i, sid in enumerate(ids)}
        self.sentences = sentences
        self.chunk_dir, self.clock = chunk_dir, clock
        self.every, self.seconds = every, seconds
        self.rows: list[Rows] = []
        self.saved = 0
        self.last = clock()

    def add(self, rows: Rows) -> None:
        """Gather ``rows``; save them with those gathered before when a part is due."""
        self.rows.append(rows)
        gathered = sum(len(r.ids) for r in self.rows)
        if rows.checkpoint or gathered >= self.every or self.clock() - self.last >= self.seconds / 2:
            self.save()

    def save(self) -> None:
        """Write what has gathered as one part (atomically)."""
        if not self.rows:
            return
        ids = [sid for r in self.rows for sid in r.ids]
        names = dict.fromkeys(c for r in self.rows for c in r.columns)  # rows that lack a column hold None there
        columns = {c: [v for r in self.rows for v in r.columns.get(c, [None] * len(r.ids))] for c in names}
        where = [self.position[sid] for sid in ids]
        kept = {"sentence": [self.sentences[i] for i in where]} if self.sentences is not None else {}
        chunk = pd.DataFrame({"id": ids, **kept, **columns})
        with atomic_path(self.chunk_dir / f"chunk-{min(where):06d}-{max(where) + 1:06d}.parquet") as tmp:
            chunk.to_parquet(tmp, index=False)
        self.saved += len(ids)
        self.rows, self.last = [], self.clock()


def _predict_todo(
    frame: pd.DataFrame,
    todo: list[int],
    predictor: Predictor,
    chunk_dir: Path,
    progress: Callable[[int, int], None] | None,
    calls_per_sentence: int,
    clock: Callable[[], float],
) -> int:
    """Predict the rows ``todo`` of ``frame`` through the predictor's stream, saving rows as they come (see the
    module doc); returns how many sentences were predicted. What was handed out is saved before any error ends the
    run; calls that got no reply are raised as one ``GenerationError`` out of all the run's calls (a rerun asks only
    those)."""
    total = len(frame)
    done = total - len(todo)
    part = frame.iloc[todo]
    saver = PartSaver(frame["id"].tolist(), chunk_dir, clock, sentences=frame["masked_sentence"].tolist())
    plan = PartPlan(SAVE_EVERY, SAVE_SECONDS, FIRST_PART, clock=clock)  # read at call time
    with progress_bar(total, "predicting", "sent", disable=progress is not None, initial=done) as bar:

        def tick(n: int) -> None:  # per finished sentence (a batch's sentences finish together)
            nonlocal done
            done += n
            bar.update(n)
            if progress is not None:
                progress(min(done, total), total)

        try:
            for rows in predictor.stream(part["id"].tolist(), part["masked_sentence"].tolist(), tick, plan):
                saver.add(rows)
        except GenerationError as exc:
            saver.save()
            raise GenerationError(exc.failures, total * calls_per_sentence) from None  # of all the run's calls
        finally:
            saver.save()  # what was handed out before an error or Ctrl-C is kept
    return saver.saved


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
    ids, sentences = frame["id"].tolist(), frame["masked_sentence"].tolist()
    parts = saved_parts(chunk_dir, ids, sentences)
    _check_columns(parts, chunk_dir)
    todo = _todo(parts, len(frame))
    meta_path = chunk_dir / "model.json"
    stored: dict[str, Any] | None = read_json_object(meta_path, fix=_fix("sentences")) if meta_path.is_file() else None
    meta: dict[str, Any] = stored or {}
    predicted = 0
    if todo:
        cache = Path(options.reply_cache) if getattr(options, "reply_cache", None) else chunk_dir / "replies.sqlite"
        predictor = load_predictor(options, cache, log, fingerprint=fingerprint, stored=stored if parts else None)
        try:
            meta = predictor.metadata()
            if stored is not None:
                check_same_weights(stored, meta, str(options.model), chunk_dir)
            write_json(meta_path, meta)
            calls = options.method_impl.calls_per_sentence(options)
            predicted = _predict_todo(frame, todo, predictor, chunk_dir, progress, calls, clock)
        finally:
            predictor.close()  # a reply cache (its folder is removed once the predictions are written)
    chunks = read_parts(chunk_dir, ids, sentences)
    if chunks["id"].tolist() != ids:
        raise ValueError(
            f"the saved chunks in {chunk_dir} do not match this run's sentences; delete that folder and rerun"
        )
    return chunks, meta, predicted


def kept(out: Path, frame: pd.DataFrame) -> str:
    """What a stopped run kept, and what rerunning it does (one clause for the user)."""
    chunk_dir = out / ".chunks"
    n_saved: int | None
    try:
        n_saved = sum(
            len(rows) for rows, _ in saved_parts(chunk_dir, frame["id"].tolist(), frame["masked_sentence"].tolist())
        )
    except (RuntimeError, ValueError, OSError):
        n_saved = None  # a damaged or unreadable part: the rerun names it
    replies = ""
    if (chunk_dir / "replies.sqlite").is_file():
        from queerbench.models.generation import ResponseCache

        cache = ResponseCache(chunk_dir / "replies.sqlite")
        try:
            replies = f", and {cache.count()} replies in {chunk_dir / 'replies.sqlite'}"
        finally:
            cache.close()
    asking = ", asking only the calls whose replies are not saved)" if replies else ")"
    if n_saved is None:
        return (
            f"the predictions saved in {chunk_dir}{replies} are kept (they could not be counted); rerun the same "
            f"command to resume (it predicts the rest{asking}"
        )
    return (
        f"the predictions of {n_saved} of {len(frame)} sentences are saved in {chunk_dir}{replies}; "
        f"rerun the same command to resume (it predicts the other {len(frame) - n_saved}{asking}"
    )
