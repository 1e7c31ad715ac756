"""The steps every result run takes in its output folder, whatever its task's shape.

A fill-in-the-blank run (:mod:`queerbench.run.pipeline`) and a request run (:mod:`queerbench.run.requests`) differ
in what they ask the model and how they score it; how they hold their folder and keep what was predicted is one
code path, here:

- :func:`held_folder`: the folder is checked writable and held by one writer (a second run on it stops in one line);
- :func:`predictions_in`: a finished run's ``predictions.parquet`` is reused with no inference; else the run's
  ``predict`` step fills its parts (saved as it goes under ``OUT/.chunks``, so a rerun resumes), and the predictions
  and the model's metadata are written atomically and the parts dropped. A start stopped before anything was saved
  leaves no folder behind; Ctrl-C and a failed write (a full disk, a folder turned read-only) are one line that says
  what was kept and what a rerun does.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench.base.files import atomic_path, read_json_object, read_parquet, write_json
from queerbench.base.lock import folder_lock
from queerbench.run.folder import check_writable, unclaim_out_dir
from queerbench.run.parts import RunInterrupted

__all__ = ["MODEL_FILE", "PREDICTIONS_FILE", "Predictions", "held_folder", "predictions_in"]

PREDICTIONS_FILE = "predictions.parquet"
"""A finished run's predictions, one row per item: what a rerun reuses instead of asking the model again."""
MODEL_FILE = "model.json"
"""The metadata of the model that made a finished run's predictions."""


@contextmanager
def held_folder(out: Path, chosen: bool) -> Iterator[bool]:
    """Hold ``out`` for one run: refused in one line when it cannot be written (``chosen``: the user named it), then
    locked for this process (one writer per folder). Yields whether the run will be the one to create it, so that a
    start that saved nothing can remove it again."""
    check_writable(out, chosen)
    created = not out.exists()
    with folder_lock(out):
        yield created


@dataclass(frozen=True)
class Predictions:
    """A run's predictions, made now or reused, and what made them."""

    frame: pd.DataFrame
    """One row per item, in the run's order (``predictions.parquet``)."""
    meta: dict[str, Any]
    """The model's metadata (``model.json``)."""
    reused: bool
    """No item was predicted by this call (a finished run reused, or every part already saved)."""
    n_predicted: int
    """How many items this call predicted."""
    seconds: float
    """How long reading or predicting them took."""


def predictions_in(
    out: Path,
    *,
    created: bool,
    predict: Callable[[], tuple[pd.DataFrame, dict[str, Any], int]],
    assemble: Callable[[pd.DataFrame, dict[str, Any]], tuple[pd.DataFrame, dict[str, Any]]],
    noun: str,
    kept: Callable[[], str],
    check: Callable[[pd.DataFrame, Path, str], None] | None = None,
    log: Callable[[str], None] = print,
) -> Predictions:
    """The predictions of the run held in ``out`` (see the module doc).

    ``predict()`` predicts what its saved parts lack and returns every saved row, the model's metadata and how many
    items it predicted; ``assemble(rows, meta)`` turns them into the rows and metadata written. ``noun``: what one
    saved unit is called (``prediction``, ``item``); ``kept()``: what a stopped run kept and what a rerun does (one
    clause, read after the stop). ``check(frame, path, fix)``: refuses a reused ``predictions.parquet`` that is not
    a run's (a hand-edited file) in one line. ``created``: the run made ``out`` (:func:`held_folder`)."""
    pred_path = out / PREDICTIONS_FILE
    t0 = time.perf_counter()
    if pred_path.is_file():
        fix = "delete it and rerun the same command (it predicts again)"
        frame = read_parquet(pred_path, fix=fix)
        if check is not None:
            check(frame, pred_path, fix)
        model_json = out / MODEL_FILE
        meta = read_json_object(model_json, fix="delete it and rerun the same command") if model_json.is_file() else {}
        log(f"reusing the finished predictions in {pred_path} (no inference); scoring again")
        return Predictions(frame, meta, reused=True, n_predicted=0, seconds=time.perf_counter() - t0)
    try:
        rows, meta, n_predicted = predict()
    except BaseException as exc:
        removed = unclaim_out_dir(out, created)  # a start that saved nothing leaves no folder behind
        if isinstance(exc, KeyboardInterrupt):
            raise _interrupted(out, noun, kept, removed) from None
        if isinstance(exc, OSError):  # a full disk, a folder turned read-only: what failed and what was kept
            raise _write_failed(exc, out, kept, removed) from None
        raise
    frame, meta = assemble(rows, meta)
    with atomic_path(pred_path) as tmp:
        frame.to_parquet(tmp, index=False)
    write_json(out / MODEL_FILE, meta)
    shutil.rmtree(out / ".chunks", ignore_errors=True)
    return Predictions(frame, meta, reused=n_predicted == 0, n_predicted=n_predicted, seconds=time.perf_counter() - t0)


def _interrupted(out: Path, noun: str, kept: Callable[[], str], removed: bool) -> RunInterrupted:
    """What to tell the user after Ctrl-C: what was kept and what a rerun does; ``removed``: nothing was saved, so
    the claim on the output folder was undone."""
    if removed:
        return RunInterrupted(
            f"interrupted before any {noun} was saved: nothing is kept in {out}; rerun the same command to start"
        )
    return RunInterrupted(f"interrupted: {kept()}")


def _write_failed(exc: OSError, out: Path, kept: Callable[[], str], removed: bool) -> ValueError:
    """One line for a write that failed while predicting: the file and why, what was kept, and what to do."""
    from queerbench.base.arguments import os_error_message

    what = os_error_message(exc).split("; ", 1)[0]
    if removed:
        return ValueError(
            f"{what}; nothing was saved yet ({out} is removed): free some space or fix the folder, then "
            "rerun the same command to start"
        )
    return ValueError(f"{what}; {kept()}; free some space or fix the folder first")
