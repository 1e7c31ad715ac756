"""A run's output folder: what it holds, claiming it for a run, and undoing a claim that predicted nothing.

A folder is ``new`` (absent or empty), a ``restart`` (its ``run.json`` has this run's key but nothing was
predicted), a ``resume`` (saved chunks or replies) or ``finished`` (``predictions.parquet``); one that holds another
run (another key, compared by what its settings mean: :mod:`queerbench.run.signature`), foreign files, or cannot be
written is refused in one line before anything is written. A resume
against a local model folder whose files changed is refused too (:func:`check_same_model`), so that no output mixes
two models.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from queerbench.base.files import write_json
from queerbench.base.lock import LOCK_FILES
from queerbench.models.fingerprint import fingerprints_differ
from queerbench.run.signature import Signature

__all__ = [
    "KEY_FILE",
    "blanks_meaning",
    "check_same_model",
    "check_writable",
    "claim_out_dir",
    "inspect_out_dir",
    "literal_meaning",
    "unclaim_out_dir",
]

KEY_FILE = "run.json"


def _unwritable(out: Path, reason: str, chosen: bool) -> ValueError:
    where = "--out" if chosen else f"the default output folder (relative to the current directory {Path.cwd()})"
    fix = "choose an --out in a folder you can write to" if chosen else "pass --out DIR in a folder you can write to"
    return ValueError(f"cannot write the output folder {out} ({where}): {reason}; {fix}")


def check_writable(out: Path, chosen: bool) -> None:
    """Refuse an ``out`` that is, or lies below, a file, or whose nearest existing folder is not writable."""
    probe = out
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        what = "is a file" if probe == out else f"lies below {probe}, which is a file"
        raise _unwritable(out, f"it {what}, not a folder", chosen)
    if not os.access(probe, os.W_OK | os.X_OK):
        raise _unwritable(out, f"{probe} is not writable (permission denied)", chosen)
    try:  # permission bits do not tell everything (immutable folders, read-only mounts, root): try for real
        os.rmdir(tempfile.mkdtemp(dir=probe, prefix=".queerbench-write-test-"))
    except OSError as exc:
        raise _unwritable(out, f"{probe} is not writable ({exc.strerror or type(exc).__name__})", chosen) from None


def blanks_meaning(key: dict[str, Any], n_templates: int | None) -> dict[str, Any]:
    """A fill-in-the-blank run's key by what its settings mean (defaults written out, a ``--limit`` covering every
    template as none), so that keys of earlier versions (with ``mode``, without defaults) compare equal to today's
    for the same run."""
    return Signature.from_key(key, n_templates=n_templates).key()


def literal_meaning(key: dict[str, Any], n_templates: int | None) -> dict[str, Any]:
    """A key as written (a request run's: every field it holds is compared as it is)."""
    return key


def inspect_out_dir(
    out: Path,
    key: dict[str, Any],
    *,
    chosen: bool = True,
    n_templates: int | None = None,
    meaning: Callable[[dict[str, Any], int | None], dict[str, Any]] = blanks_meaning,
) -> tuple[str, dict[str, Any] | None]:
    """What ``out`` holds, without writing anything: ``("new" | "restart" | "resume" | "finished", run.json)``.

    ``restart``: an earlier attempt with this key predicted nothing. Refuses (``FileExistsError``/``ValueError``,
    one line) a folder that holds another run or foreign files, a file, and a place that cannot be written.
    ``n_templates``: the task's number of templates (a ``--limit`` at or above it is no limit). ``meaning``: how a
    key is read before two are compared (:func:`blanks_meaning` for a fill-in-the-blank run, :func:`literal_meaning`
    for a request run, whose stored key may hold more fields than it compares).
    """
    check_writable(out, chosen)
    key_path = out / KEY_FILE
    if key_path.is_file():
        try:
            stored = json.loads(key_path.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(
                f"{key_path} is unreadable ({exc}); delete the folder {out} or choose another --out"
            ) from exc
        if not isinstance(stored, dict):
            raise ValueError(
                f"{key_path} holds no run record (a JSON object); delete the folder {out} or choose another --out"
            )
        was, now = meaning(stored, n_templates), meaning(key, n_templates)
        diff = {k: (was.get(k), v) for k, v in now.items() if was.get(k) != v}
        if "config" in diff:  # another task's run: its other fields say nothing more
            diff = {"config": diff["config"]}
        if diff:
            raise FileExistsError(
                f"output folder {out} holds another run ({', '.join(f'{k}: {a!r} there, {b!r} now' for k, (a, b) in diff.items())}); "
                "choose another --out (or delete that folder)"
            )
        if (out / "predictions.parquet").is_file():
            return "finished", stored
        if any((out / ".chunks").glob("chunk-*.parquet")) or (out / ".chunks" / "replies.sqlite").is_file():
            return "resume", stored  # replies of an instructed run are kept as they arrive
        return "restart", stored
    if out.exists() and any(p.name not in LOCK_FILES for p in out.iterdir()):  # the run's own lock aside
        raise FileExistsError(f"output folder {out} is not empty and holds no queerbench run; choose another --out")
    return "new", None


def check_same_model(out: Path, model: str, stored: dict[str, Any] | None, fingerprint: dict[str, Any]) -> None:
    """Refuse to resume (or re-score) a run whose local model folder changed since it started."""
    changed = fingerprints_differ((stored or {}).get("model_fingerprint"), fingerprint)
    if changed:
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        raise ValueError(
            f"the files of model folder {model} changed since the run in {out} started ({shown}); resuming "
            f"would mix two models' outputs: delete {out} to start over with the new files, or choose another --out"
        )


def claim_out_dir(out: Path, record: dict[str, Any], state: str, *, chosen: bool = True) -> bool:
    """Create ``out`` and write ``run.json`` (new run, or a restart of one that predicted nothing); True when this
    call created the folder. A write that fails (read-only or immutable folder, full disk) is one line."""
    created = not out.exists()
    try:
        if state == "restart":
            shutil.rmtree(out / ".chunks", ignore_errors=True)
        if state in ("new", "restart"):
            out.mkdir(parents=True, exist_ok=True)
            write_json(out / KEY_FILE, record)
    except OSError as exc:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise _unwritable(out, exc.strerror or type(exc).__name__, chosen) from exc
    return created


def _stored_replies(path: Path) -> int:
    """How many replies a generative run's cache holds (0 when it does not exist): only those are worth keeping."""
    if not path.is_file():
        return 0
    from queerbench.models.generation import ResponseCache

    cache = ResponseCache(path)
    try:
        return cache.count()
    finally:
        cache.close()


def unclaim_out_dir(out: Path, created: bool) -> bool:
    """Undo :func:`claim_out_dir` after a start that saved nothing (nothing half-made is left behind); True when it
    was undone, False when predictions, saved parts or replies are kept."""
    chunks = out / ".chunks"
    if (
        (out / "predictions.parquet").exists()
        or any(chunks.glob("chunk-*.parquet"))
        or _stored_replies(chunks / "replies.sqlite") > 0
    ):
        return False
    if created:
        shutil.rmtree(out, ignore_errors=True)
    else:
        shutil.rmtree(out / ".chunks", ignore_errors=True)
        (out / KEY_FILE).unlink(missing_ok=True)
    return True
