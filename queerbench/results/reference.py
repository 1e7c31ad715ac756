"""The papers' published models as reference rows (``queerbench leaderboard build``).

Every task that has published files (:meth:`queerbench.tasks.Task.reference_sources`) gives one or more rows per
file (:meth:`~queerbench.tasks.Task.reference_rows`): with the toxicity values stored in the file (``perspective``),
and once more for each offline scorer — the ones listed in ``queerbench/data/scorer_caveats.json``
(``reference_scorers``, :func:`queerbench.scoring.caveats.reference_scorers`) and any the command adds — which scores
the file's own texts by the task's protocol, as ``queerbench score FILE --toxicity SCORER`` does, told which model it
scores (``held_out_model``: a scorer fitted on the published files scores each model with a fit that never saw its
outputs). No scorer is named here: a scorer joins by being listed. The jobs (file × scorer) are independent, so they
are computed in worker processes, one per CPU core. The rows are saved as one JSON document (``reference_rows.json``: the rows, the number
of resamples, the seed, the version that built them), by default in the queerbench cache, where ``leaderboard show``,
``eval`` and the Space read them. The published files themselves stay where :func:`queerbench.base.sources.fetch` keeps
them; only the computed rows are written.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
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
    "reference_scorer_names",
]

REFERENCE_FILE = "reference_rows.json"


def default_reference_path() -> Path:
    """Where ``leaderboard build`` writes the reference rows by default (the queerbench cache)."""
    return env.cache_dir() / REFERENCE_FILE


STORED = "perspective"
"""The rows of the toxicity values stored in the published files (the papers scored with the Perspective API)."""


def _rows_of(job: tuple[str, str, int, int, str | None]) -> list[dict[str, Any]]:
    task, source, n_resamples, seed, scorer = job
    rows = get_task(task).reference_rows(source, n_resamples=n_resamples, seed=seed, scorer=scorer)
    return [r.to_dict() for r in rows]


def _share_cores(threads: int) -> None:
    """A worker's initializer: its torch computes on ``threads`` threads, so that the workers together use each core
    once (with every worker on every core, the scorers' many small steps wait on each other, and the classifiers
    run several times slower)."""
    try:
        import torch
    except ImportError:  # nothing to share
        return
    torch.set_num_threads(threads)


def reference_scorer_names(extra: Sequence[str] = (), *, stored_only: bool = False) -> list[str]:
    """The offline scorers whose reference rows ``leaderboard build`` computes: those listed in the data
    (:func:`~queerbench.scoring.caveats.reference_scorers`) and ``extra`` (``--toxicity``), each once, checked by
    name (a one-line error for an unknown one, for ``perspective``: its rows are the stored values, and for
    ``precomputed``/``none``); only ``extra`` when ``stored_only``."""
    from queerbench.scoring.aggregate import check_toxicity_scorer
    from queerbench.scoring.caveats import reference_scorers

    names: list[str] = []
    for name in [*([] if stored_only else reference_scorers()), *extra]:
        name = f"hf:{name[3:].strip()}" if name.startswith("hf:") else name.strip()
        if name in (STORED, "precomputed", "none"):
            raise ValueError(
                f"--toxicity {name}: the published models' {STORED} rows come from the values stored in their files "
                "and are always built; name an offline scorer (embedded, hf:<model id or path>, …)"
            )
        if name == "hf:":
            raise ValueError("--toxicity hf: needs a model id or path, e.g. hf:unitary/unbiased-toxic-roberta")
        check_toxicity_scorer(name)
        if name not in names:
            names.append(name)
    return names


def build_reference_rows(
    out: Path | None = None,
    *,
    n_resamples: int = 1000,
    seed: int = 0,
    workers: int | None = None,
    scorers: Sequence[str] | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Compute every task's reference rows and write them to ``out`` (default :func:`default_reference_path`);
    returns the document. ``scorers``: the offline scorers re-scoring every published file besides its stored values
    (default: :func:`reference_scorer_names`, the data's list; ``()``: the stored values only). ``workers``:
    processes (default: the CPU cores; 1 computes in this process)."""
    if n_resamples < 0:
        raise ValueError(f"--resamples must be >= 0, got {n_resamples}")
    if out is not None and Path(out).is_dir():  # a folder: the file goes in it (found now, not after the build)
        out = Path(out) / "reference_rows.json"
    from queerbench.scoring.toxicity import unavailable_reason

    names = reference_scorer_names() if scorers is None else reference_scorer_names(scorers, stored_only=True)
    for name in list(names):  # a listed scorer this install lacks is skipped and said; a named one (--toxicity) fails
        reason = unavailable_reason(name)
        if reason and scorers is None:
            log(f"skipping the {name} rows: {reason}")
            names.remove(name)
        elif reason:
            raise ValueError(reason)
    sources = [(t.name, s) for t in all_tasks().values() for s in t.reference_sources()]
    if not sources:
        raise ValueError("no task has published files to build reference rows from")
    jobs = [(task, source, n_resamples, seed, scorer) for scorer in [None, *names] for task, source in sources]
    workers = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    started = time.perf_counter()
    log(
        f"building the reference rows of {len(sources)} published files ({', '.join([STORED, *names])}) on "
        f"{workers} process(es) …"
    )

    def done(i: int, job: tuple[str, str, int, int, str | None]) -> None:
        if job[4] is not None:  # a re-scoring takes a while the first time: say which are done
            log(f"  {i}/{len(jobs)} {job[1]} ({job[4]}) {time.perf_counter() - started:.0f} s")

    if workers == 1:
        parts = []
        for i, job in enumerate(jobs, start=1):
            parts.append(_rows_of(job))
            done(i, job)
    else:
        threads = max(1, (os.cpu_count() or 1) // workers)
        with ProcessPoolExecutor(max_workers=workers, initializer=_share_cores, initargs=(threads,)) as pool:
            parts = []
            for i, (job, part) in enumerate(zip(jobs, pool.map(_rows_of, jobs), strict=True), start=1):
                parts.append(part)
                done(i, job)
    rows = [row for part in parts for row in part]
    document = {
        "schema_version": SCHEMA_VERSION,
        "queerbench_version": __version__,
        "n_resamples": n_resamples,
        "seed": seed,
        "scorers": [STORED, *names],
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
        return _with_missing_scorers(load_reference_rows(path), path)
    if default_reference_path().is_file():
        return _with_missing_scorers(load_reference_rows(default_reference_path()), default_reference_path())
    bundled = bundled_reference_path()
    return load_reference_rows(bundled), (
        f"using the reference rows bundled with queerbench {__version__}; `queerbench leaderboard build` recomputes "
        "them from the papers' published files"
    )


def _with_missing_scorers(rows: list[ResultRow], path: Path) -> tuple[list[ResultRow], str | None]:
    """``rows`` and, when they lack the rows of a scorer the data lists (a build of an earlier version, or
    ``--stored-only``), a note naming it and how to build them; a run under it is then listed apart."""
    from queerbench.scoring.caveats import reference_scorers

    present = {r.toxicity for r in rows}
    missing = [s for s in reference_scorers() if s not in present]
    if not missing:
        return rows, None
    return rows, (
        f"the reference rows at {path} have none under {', '.join(missing)}; `queerbench leaderboard build` "
        "computes them"
    )
