"""Result rows read back from output folders: a run (``scores.json``), an eval (``results.json``), or a folder a
task's own pipeline wrote (the task reads it: :meth:`queerbench.tasks.Task.folder_rows`).

Anything else is one line naming what a result folder holds, so ``leaderboard show`` and ``view`` never guess.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from queerbench.base.files import read_json_object
from queerbench.reporting.rows import ResultRow, toxicity_label
from queerbench.results.compare import check_scores_document
from queerbench.tasks import all_tasks

__all__ = ["RESULTS_FILE", "folder_kind", "folder_rows", "run_row"]

RESULTS_FILE = "results.json"
"""An eval folder's rows (``queerbench eval``)."""
_RERUN = "rerun the command that wrote that folder"


def run_row(folder: Path, scores: dict[str, Any] | None = None) -> ResultRow:
    """The row of a ``queerbench run`` folder (its ``scores.json``, or ``scores`` when given)."""
    folder = Path(folder)
    path = folder / "scores.json"
    scores = check_scores_document(scores if scores is not None else read_json_object(path, fix=_RERUN), path)
    task = all_tasks().get(str(scores.get("config")))
    first, second = task.headline_gap if task is not None else ("queer", "non-queer")
    run = scores.get("run") or {}
    ci = scores.get("ci") or {}
    gap = (scores.get("comparisons") or {}).get(f"{first} - {second}") or {}
    overall = (scores.get("generation") or {}).get("overall") or {}
    return ResultRow(
        task=str(scores.get("config")),
        benchmark=task.benchmark if task is not None else str(scores.get("config")),
        model=str(run.get("model")),
        method=str(run.get("method") or "mlm"),
        k=scores.get("k"),
        toxicity=toxicity_label(scores.get("scorers")),
        scores=dict(scores["queerbench"]),
        ci={g: (ci.get(g) or {}).get("queerbench") for g in scores["queerbench"]},
        n={g: int(v) for g, v in scores["n"].items()},
        gap={"groups": f"{first} - {second}", **gap} if gap else {},
        parse_rate=overall.get("parse_rate"),
        refusal_rate=overall.get("refusal_rate"),
        limit=run.get("limit"),
        extra={part: scores.get(part) for part in ("afinn", "hurtlex", "toxicity") if part in scores},
        signature=str(scores.get("signature") or run.get("signature") or ""),
        source=str(folder),
        caveats=[] if scores.get("scored", True) else ["no sentence got a word to score"],
    )


def folder_kind(folder: Path) -> str:
    """``eval``, ``run``, or the name of the task whose own pipeline wrote ``folder``; else a one-line error."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder; give a run or eval folder")
    if (folder / RESULTS_FILE).is_file():
        return "eval"
    if (folder / "scores.json").is_file():
        return "run"
    for task in all_tasks().values():
        if task.folder_rows(folder):
            return task.name
    raise ValueError(
        f"{folder} is not a result folder: it holds no scores.json (a `queerbench run` folder), no {RESULTS_FILE} "
        "(a `queerbench eval` folder) and no task's own results (e.g. a `queerbench scm run` folder); point at "
        "such a folder (an interrupted run has none yet: rerun it to finish)"
    )


def folder_rows(folder: Path) -> list[ResultRow]:
    """Every result row of ``folder`` (see the module doc)."""
    folder = Path(folder)
    kind = folder_kind(folder)
    if kind == "eval":
        document = read_json_object(folder / RESULTS_FILE, fix="rerun `queerbench eval` with the same --out")
        rows = document.get("rows")
        if not isinstance(rows, list):
            raise ValueError(f"{folder / RESULTS_FILE} lacks 'rows'; rerun `queerbench eval` with the same --out")
        return [ResultRow.from_dict(r, f"{folder / RESULTS_FILE} row {i}") for i, r in enumerate(rows)]
    if kind == "run":
        return [run_row(folder)]
    return all_tasks()[kind].folder_rows(folder)
