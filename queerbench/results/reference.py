"""The papers' published models as reference rows (``queerbench leaderboard build``).

Every task that has published files (:meth:`queerbench.tasks.Task.reference_sources`) gives one or more rows per
file (:meth:`~queerbench.tasks.Task.reference_rows`); the files are independent, so they are computed in worker
processes, one per CPU core. The rows are saved as one JSON document (``reference_rows.json``: the rows, the number
of resamples, the seed, the version that built them), by default in the queerbench cache, where ``leaderboard show``,
``eval`` and the Space read them. The published files themselves stay where :func:`queerbench.base.sources.fetch` keeps
them; only the computed rows are written.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from queerbench import __version__
from queerbench.base import env
from queerbench.base.files import read_json, write_json
from queerbench.reporting.rows import SCHEMA_VERSION, ResultRow
from queerbench.tasks import all_tasks, get_task

__all__ = [
    "BUNDLED",
    "REFERENCE_FILE",
    "build_reference_rows",
    "bundled_reference_path",
    "default_reference_path",
    "load_reference_rows",
    "reference_rows_for_show",
]

REFERENCE_FILE = "reference_rows.json"


def default_reference_path() -> Path:
    """Where ``leaderboard build`` writes the reference rows by default (the queerbench cache)."""
    return env.cache_dir() / REFERENCE_FILE


def _rows_of(job: tuple[str, str, int, int]) -> list[dict[str, Any]]:
    task, source, n_resamples, seed = job
    return [r.to_dict() for r in get_task(task).reference_rows(source, n_resamples=n_resamples, seed=seed)]


def build_reference_rows(
    out: Path | None = None,
    *,
    n_resamples: int = 1000,
    seed: int = 0,
    workers: int | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Compute every task's reference rows and write them to ``out`` (default :func:`default_reference_path`);
    returns the document. ``workers``: processes (default: the CPU cores; 1 computes in this process)."""
    if n_resamples < 0:
        raise ValueError(f"--resamples must be >= 0, got {n_resamples}")
    jobs = [(t.name, s, n_resamples, seed) for t in all_tasks().values() for s in t.reference_sources()]
    if not jobs:
        raise ValueError("no task has published files to build reference rows from")
    workers = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    started = time.perf_counter()
    log(f"building {len(jobs)} reference rows' files on {workers} process(es) …")
    if workers == 1:
        parts = [_rows_of(job) for job in jobs]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            parts = list(pool.map(_rows_of, jobs))
    rows = [row for part in parts for row in part]
    document = {
        "schema_version": SCHEMA_VERSION,
        "queerbench_version": __version__,
        "n_resamples": n_resamples,
        "seed": seed,
        "rows": rows,
    }
    path = out or default_reference_path()
    write_json(path, document)
    log(f"wrote {len(rows)} reference rows to {path} ({time.perf_counter() - started:.1f} s)")
    return document


def load_reference_rows(path: Path | None = None) -> list[ResultRow]:
    """The reference rows saved by :func:`build_reference_rows`; a one-line error saying how to build them when
    there are none."""
    path = path or default_reference_path()
    if not path.is_file():
        raise FileNotFoundError(
            f"no reference rows at {path}; build them first with `queerbench leaderboard build` (under a minute)"
        )
    fix = "rebuild them with `queerbench leaderboard build`"
    document = read_json(path, fix=fix)
    if not isinstance(document, dict) or not isinstance(document.get("rows"), list):
        raise ValueError(f"{path} holds no reference rows (a JSON object with 'rows'); {fix}")
    return [ResultRow.from_dict(r, f"{path} row {i}") for i, r in enumerate(document["rows"])]


BUNDLED = "reference_rows.json"
"""The reference rows shipped in the package (``queerbench/data``): what the Space and ``leaderboard show`` use when
no ``leaderboard build`` was run here (the published files cannot be fetched offline)."""


def bundled_reference_path() -> Path:
    """The reference rows bundled with this version of queerbench."""
    from importlib import resources

    return Path(str(resources.files("queerbench.data").joinpath(BUNDLED)))


def reference_rows_for_show(path: Path | None = None) -> tuple[list[ResultRow], str | None]:
    """The reference rows ``leaderboard show`` places runs among, and a note saying which: ``path`` when given; else
    the ones ``leaderboard build`` wrote; else the bundled copy."""
    if path is not None:
        return load_reference_rows(path), None
    if default_reference_path().is_file():
        return load_reference_rows(default_reference_path()), None
    bundled = bundled_reference_path()
    return load_reference_rows(bundled), (
        f"using the reference rows bundled with queerbench {__version__}; `queerbench leaderboard build` recomputes "
        "them from the papers' published files"
    )
