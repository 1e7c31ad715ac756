"""What a ``probes`` run's ``--out`` folder may hold, and claiming it for a run, by the rules every run's folder
follows (:mod:`queerbench.run.folder`): an empty folder, or the run of the same task and model (a rerun, which
resumes from its reply cache). Anything else is refused in one line before anything is written: a folder of other
files (a ``queerbench run``'s), a file merely named like the task's record or reply cache that is not its run's, the
run of another model, or a resume against a local model folder whose files changed since the run started.

A run claims its folder with ``run.json`` (:data:`~queerbench.run.folder.KEY_FILE`: the task, the model and its
fingerprint), as every run does; a folder written before probes runs had one (its record or its reply cache, no
``run.json``) is still recognised, and claimed on its next run. The task's own file names are its ``outputs``
(:class:`~queerbench.tasks.probes.ProbeFiles`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from queerbench.base.files import write_json
from queerbench.base.lock import LOCK_FILES
from queerbench.base.redact import redact_url
from queerbench.run.folder import KEY_FILE, check_same_model, check_writable
from queerbench.tasks import Task
from queerbench.tasks.probes import ProbeFiles

__all__ = ["check_probe_folder", "claim_probe_folder", "probe_files", "probe_key", "unclaim_probe_folder"]


def probe_files(task: Task) -> ProbeFiles:
    """The run files ``task`` declares (a one-line ``ValueError`` for a task that is not a ``probes`` task)."""
    if task.spec.outputs is None:
        raise ValueError(f"task {task.name} is run by `queerbench run --config {task.name}`")
    return task.spec.outputs


def probe_key(task: Task, model: str) -> dict[str, str]:
    """What must match for a folder's replies and record to be this run's: the task and the model (as its runner
    names it: a local model's id or path, an endpoint's URL and served name). A plan's other settings need not: the
    reply cache keys each reply by its prompt and decoding, so a rerun with other settings asks only what is new."""
    return {"config": task.name, "model": model}


def check_probe_folder(task: Task, out: Path, model: str | None = None) -> dict[str, Any] | None:
    """Refuse, in one line and before anything is written, an ``--out`` that is a file, holds files of something
    other than a run of ``task`` (a ``queerbench run`` folder, say: its report would be overwritten), or holds the
    run of a model other than ``model`` (None: not checked yet). An empty folder or this model's run (a rerun, which
    resumes from the cache) is fine. A place that cannot be written (a file, below a file, a read-only folder) is
    refused by the rule every run's folder follows (:func:`queerbench.run.folder.check_writable`).

    Returns what the folder says of its run: its ``run.json``, or for a folder written before probes runs had one,
    the model and fingerprint its record names (None: a new folder, or a run with only its reply cache)."""
    check_writable(out, chosen=True)
    if not out.exists():
        return None
    names = {p.name for p in out.iterdir()} - LOCK_FILES
    if not names:
        return None
    files = probe_files(task)
    claimed = _claim_of(task, out) if KEY_FILE in names else None
    if claimed is None and (KEY_FILE in names or not names & {files.cache, files.record}):  # another's folder
        raise FileExistsError(
            f"--out {out} is not empty and holds no {task.benchmark} run (it has {', '.join(sorted(names)[:3])}"
            f"{' …' if len(names) > 3 else ''}); choose another --out"
        )
    stored = _stored_run(task, files, out)
    run = stored.get("run") if stored is not None else None
    if claimed is None and isinstance(run, dict):  # a folder of an earlier version: its record says whose it is
        fp = run.get("fingerprint")
        weights = fp.get("weights") if isinstance(fp, dict) and isinstance(fp.get("weights"), dict) else fp
        claimed = {**probe_key(task, str(run.get("model"))), "model_fingerprint": weights}
    if claimed is not None and not isinstance(claimed.get("model_fingerprint"), dict):
        claimed = {**claimed, "model_fingerprint": None}  # none recorded (or not one): nothing to compare
    other = claimed.get("model") if claimed is not None else None
    if model is not None and other is not None and other != model:
        raise FileExistsError(
            f"--out {out} holds the {task.benchmark} run of {redact_url(str(other))}, not {model}; choose another "
            "--out (or delete that folder)"
        )
    return claimed


def claim_probe_folder(
    task: Task, out: Path, model: str, fingerprint: dict[str, Any], endpoint: str | None = None
) -> bool:
    """Check ``out`` for a run of ``task`` on ``model`` (:func:`check_probe_folder`), refuse to resume it with a
    local model folder whose files changed since it started (:func:`~queerbench.run.folder.check_same_model`: its
    record would describe weights its replies did not come from), and claim it: ``run.json`` with the run's key,
    the endpoint (without credentials) and the model's fingerprint, written when the folder has none. True when this
    call wrote it (:func:`unclaim_probe_folder` undoes that after a start that saved nothing)."""
    stored = check_probe_folder(task, out, model)
    check_same_model(out, model, stored, fingerprint)
    if (out / KEY_FILE).is_file():
        return False
    out.mkdir(parents=True, exist_ok=True)
    endpoint_shown = redact_url(endpoint) if endpoint else None
    write_json(out / KEY_FILE, {**probe_key(task, model), "endpoint": endpoint_shown, "model_fingerprint": fingerprint})
    return True


def unclaim_probe_folder(task: Task, out: Path, claimed: bool, saved: bool) -> bool:
    """Undo a claim (:func:`claim_probe_folder` returned True) after a start that saved no reply (``saved`` False:
    no new reply in the reply cache it asked through, its own or one shared by an eval's parts) in a folder that holds
    nothing else of the run (no record, no reply in the folder's own cache, which is removed when empty); True when
    it was undone and the folder keeps nothing. A run that keeps replies keeps its ``run.json``, so its rerun is
    recognised."""
    files = probe_files(task)
    own = out / files.cache
    if not claimed or saved or (out / files.record).exists() or _replies_in(own):
        return False
    own.unlink(missing_ok=True)  # the empty cache this run opened (a shared one is not the folder's)
    (out / KEY_FILE).unlink(missing_ok=True)
    return True


def _replies_in(path: Path) -> bool:
    """Whether the reply cache at ``path`` holds a reply (an unreadable one is kept: it is not ours to delete)."""
    if not path.is_file():
        return False
    from queerbench.models.generation import ResponseCache

    try:
        with ResponseCache(path) as cache:
            return cache.count() > 0
    except Exception:  # whatever it holds is left alone
        return True


def _claim_of(task: Task, out: Path) -> dict[str, Any] | None:
    """``out``'s ``run.json`` when it claims the folder for a run of ``task`` (a JSON object naming the task and a
    model); None for any other ``run.json`` (a ``queerbench run``'s, a project's own file)."""
    try:
        stored = json.loads((out / KEY_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(stored, dict) or stored.get("config") != task.name or not isinstance(stored.get("model"), str):
        return None
    return stored


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
