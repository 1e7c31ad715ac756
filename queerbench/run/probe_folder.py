"""What a ``probes`` run's ``--out`` folder may hold: an empty folder, or the run of the same task and model (a rerun,
which resumes from its reply cache). Anything else is refused in one line before anything is written: a folder of
other files (a ``queerbench run``'s), a file merely named like the task's record or reply cache that is not its run's,
or the run of another model. The file names are the task's (its ``outputs``: :class:`~queerbench.tasks.probes.ProbeFiles`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from queerbench.base.lock import LOCK_FILES
from queerbench.base.redact import redact_url
from queerbench.run.folder import check_writable
from queerbench.tasks import Task
from queerbench.tasks.probes import ProbeFiles

__all__ = ["check_probe_folder", "probe_files"]


def probe_files(task: Task) -> ProbeFiles:
    """The run files ``task`` declares (a one-line ``ValueError`` for a task that is not a ``probes`` task)."""
    if task.spec.outputs is None:
        raise ValueError(f"task {task.name} is run by `queerbench run --config {task.name}`")
    return task.spec.outputs


def check_probe_folder(task: Task, out: Path, model: str | None = None) -> None:
    """Refuse, in one line and before anything is written, an ``--out`` that is a file, holds files of something
    other than a run of ``task`` (a ``queerbench run`` folder, say: its report would be overwritten), or holds the
    finished run of a model other than ``model`` (None: not checked yet). An empty folder or this model's run (a
    rerun, which resumes from the cache) is fine. A place that cannot be written (a file, below a file, a read-only
    folder) is refused by the rule every run's folder follows (:func:`queerbench.run.folder.check_writable`)."""
    check_writable(out, chosen=True)
    if not out.exists():
        return
    names = {p.name for p in out.iterdir()} - LOCK_FILES
    if not names:
        return
    files = probe_files(task)
    if not names & {files.cache, files.record}:
        raise FileExistsError(
            f"--out {out} is not empty and holds no {task.benchmark} run (it has {', '.join(sorted(names)[:3])}"
            f"{' …' if len(names) > 3 else ''}); choose another --out"
        )
    stored = _stored_run(task, files, out)
    run = stored.get("run") if stored is not None else None
    other = run.get("model") if isinstance(run, dict) else None
    if model is not None and other is not None and other != model:
        raise FileExistsError(
            f"--out {out} holds the {task.benchmark} run of {redact_url(str(other))}, not {model}; choose another "
            "--out (or delete that folder)"
        )


_SQLITE_HEADER = b"SQLite format 3\x00"


def _stored_run(task: Task, files: ProbeFiles, out: Path) -> dict[str, Any] | None:
    """The record of the run of ``task`` in ``out`` (None when there is none yet: a run that has only its reply
    cache).

    A folder is reused only when what it holds is really such a run: the record a JSON object with the task's
    signature (``task:<name>|…``) and a ``run`` block naming the model, the cache an SQLite file. Any other file of
    those names (a project's own JSON, a note) is refused in one line before anything is written, so it and the
    report beside it are never overwritten."""
    refuse = f"--out {out} holds a {{name}} that is not an {task.benchmark} run's ({{why}}); choose another --out"
    cache = out / files.cache
    if cache.exists():
        try:
            with cache.open("rb") as fh:
                header = fh.read(len(_SQLITE_HEADER))
        except OSError as exc:
            raise FileExistsError(refuse.format(name=files.cache, why=exc.strerror or type(exc).__name__)) from None
        if header != _SQLITE_HEADER:
            raise FileExistsError(refuse.format(name=files.cache, why="not an SQLite reply cache"))
    path = out / files.record
    if not path.exists():
        return None
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise FileExistsError(refuse.format(name=files.record, why=f"not JSON: {type(exc).__name__}")) from None
    signature = stored.get("signature") if isinstance(stored, dict) else None
    run = stored.get("run") if isinstance(stored, dict) else None
    if not (isinstance(signature, str) and signature.startswith(f"task:{task.name}|")):
        raise FileExistsError(refuse.format(name=files.record, why=f"no {task.benchmark} signature"))
    if not isinstance(run, dict) or not isinstance(run.get("model"), str):
        raise FileExistsError(refuse.format(name=files.record, why="no run record naming its model"))
    return stored
