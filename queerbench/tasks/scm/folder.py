"""What an ``scm run --out`` folder may hold: an empty folder, or the SCM run of the same model (a rerun, which
resumes from its reply cache). Anything else is refused in one line before anything is written: a folder of other
files (a ``queerbench run``'s), a file merely named ``scm.json`` or ``cache.sqlite`` that is not an SCM run's, or the
run of another model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from queerbench.base.lock import LOCK_FILES
from queerbench.base.redact import redact_url

__all__ = ["SCM_RUN_FILES", "check_scm_folder"]

SCM_RUN_FILES = frozenset({"cache.sqlite", "scm.json"})
"""A folder holds an SCM run when it has one of these (the reply cache is written first)."""


def check_scm_folder(out: Path, model: str | None = None) -> None:
    """Refuse, in one line and before anything is written, an ``--out`` that is a file, holds files of something
    other than an SCM run (a ``queerbench run`` folder, say: its report would be overwritten), or holds the finished
    SCM run of a model other than ``model`` (None: not checked yet). An empty folder or this model's run (a rerun,
    which resumes from the cache) is fine."""
    if not out.exists():
        return
    if not out.is_dir():
        raise FileExistsError(f"--out {out} is a file; give a folder")
    names = {p.name for p in out.iterdir()} - LOCK_FILES
    if not names:
        return
    if not names & SCM_RUN_FILES:
        raise FileExistsError(
            f"--out {out} is not empty and holds no SCM run (it has {', '.join(sorted(names)[:3])}"
            f"{' …' if len(names) > 3 else ''}); choose another --out"
        )
    stored = _stored_scm_run(out)
    run = stored.get("run") if stored is not None else None
    other = run.get("model") if isinstance(run, dict) else None
    if model is not None and other is not None and other != model:
        raise FileExistsError(
            f"--out {out} holds the SCM run of {redact_url(str(other))}, not {model}; choose another --out (or "
            "delete that folder)"
        )


_SQLITE_HEADER = b"SQLite format 3\x00"


def _stored_scm_run(out: Path) -> dict[str, Any] | None:
    """The ``scm.json`` of the SCM run in ``out`` (None when there is none yet: a run that has only its reply cache).

    A folder is reused only when what it holds is really an SCM run: ``scm.json`` a JSON object with an SCM
    signature (``task:scm|…``) and a ``run`` record naming the model, ``cache.sqlite`` an SQLite file. Any other file
    of those names (a project's own ``scm.json``, a note) is refused in one line before anything is written, so
    it and the ``report.md`` beside it are never overwritten."""
    refuse = f"--out {out} holds a {{name}} that is not an SCM run's ({{why}}); choose another --out"
    cache = out / "cache.sqlite"
    if cache.exists():
        try:
            with cache.open("rb") as fh:
                header = fh.read(len(_SQLITE_HEADER))
        except OSError as exc:
            raise FileExistsError(refuse.format(name="cache.sqlite", why=exc.strerror or type(exc).__name__)) from None
        if header != _SQLITE_HEADER:
            raise FileExistsError(refuse.format(name="cache.sqlite", why="not an SQLite reply cache"))
    path = out / "scm.json"
    if not path.exists():
        return None
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise FileExistsError(refuse.format(name="scm.json", why=f"not JSON: {type(exc).__name__}")) from None
    signature = stored.get("signature") if isinstance(stored, dict) else None
    run = stored.get("run") if isinstance(stored, dict) else None
    if not (isinstance(signature, str) and signature.startswith("task:scm|")):
        raise FileExistsError(refuse.format(name="scm.json", why="no SCM signature"))
    if not isinstance(run, dict) or not isinstance(run.get("model"), str):
        raise FileExistsError(refuse.format(name="scm.json", why="no run record naming its model"))
    return stored
