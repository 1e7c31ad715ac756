"""Result rows read back from output folders: a run (``scores.json``), an eval (``results.json``), or a folder a
``probes`` task's run wrote (the task reads it: :meth:`queerbench.tasks.Task.folder_rows`).

Anything else is one line naming what a result folder holds, so ``leaderboard show`` and ``view`` never guess.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from queerbench.base.files import read_json, read_json_object
from queerbench.methods.registry import recorded_method
from queerbench.reporting.record import is_probes_record, is_record, read_record, record_rows
from queerbench.reporting.rows import ResultRow, row_problem, toxicity_label
from queerbench.results.compare import check_scores_document
from queerbench.scoring.aggregate import GAP_BLOCK, SCORE_BLOCKS
from queerbench.scoring.toxicity_base import KEY as TOXICITY
from queerbench.tasks import Task, all_tasks

__all__ = ["RESULTS_FILE", "folder_kind", "folder_rows", "run_row"]

RESULTS_FILE = "results.json"
"""An eval folder's rows (``queerbench eval``)."""
_RERUN = "rerun the command that wrote that folder"
_RESCORE = "delete it and rerun `queerbench run` for that folder (it re-scores the predictions)"
_REEVAL = "rerun `queerbench eval` with the same --out (it writes results.json again from its parts)"


def _block(document: dict[str, Any], name: str, path: Path, fix: str) -> dict[str, Any]:
    """``document[name]`` when it is an object (absent or null: empty); a one-line ``ValueError`` naming the file."""
    value = document.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{path}: {name!r} must be an object, got {type(value).__name__}; {fix}")
    return value


def _declared_metrics(scores: dict[str, Any], task: Task | None) -> list[dict[str, Any]]:
    """The metrics a blanks run's row reports, the first its row's value and the others its components: those its
    record declares (a run written with the record), else its task's declaration, else (a task this version does not
    know, in a folder written before the record) the blocks every blanks run holds, untitled."""
    declared = scores.get("declared_metrics")
    if isinstance(declared, list) and declared and all(isinstance(m, dict) and "column" in m for m in declared):
        return declared
    if task is not None and task.spec.metrics:
        return [{"column": m.column, "title": m.title} for m in task.spec.metrics]
    return [{"column": block} for block in SCORE_BLOCKS]


def run_row(folder: Path, scores: dict[str, Any] | None = None) -> ResultRow:
    """The row of a ``queerbench run`` folder (its ``scores.json``, or ``scores`` when given): its first declared
    metric per group (the QueerBench score) with CIs and the headline gap, the other declared metrics as its
    components. Every field is checked (:func:`~queerbench.reporting.rows.row_problem`), so a malformed
    ``scores.json`` (``k: [5]``, a score ``"abc"``) is one line naming the file."""
    folder = Path(folder)
    path = folder / "scores.json"
    scores = check_scores_document(scores if scores is not None else read_json_object(path, fix=_RERUN), path)
    task = all_tasks().get(str(scores.get("config")))
    first, *components = _declared_metrics(scores, task)
    column = str(first["column"])
    values = _block(scores, column, path, _RESCORE)
    run = _block(scores, "run", path, _RESCORE)
    ci = _block(scores, "ci", path, _RESCORE)
    comparisons = _block(scores, "comparisons", path, _RESCORE) if column == GAP_BLOCK else {}
    # the task's declared headline gap; a task it does not know (or one declaring none): the run's first gap
    headline = " - ".join(task.headline_gap) if task is not None and task.declares_headline_gap else None
    headline = headline or next(iter(comparisons), None)
    gap = _block(comparisons, headline, path, _RESCORE) if headline is not None else {}
    overall = _block(_block(scores, "generation", path, _RESCORE), "overall", path, _RESCORE)
    group_ci = {g: ci.get(g) for g in values}
    bad = next((g for g, v in group_ci.items() if v is not None and not isinstance(v, dict)), None)
    if bad is not None:
        raise ValueError(f"{path}: ci[{bad!r}] must be an object of per-score CIs, got {group_ci[bad]!r}; {_RESCORE}")
    subset = run.get("sentences") or None
    extra: dict[str, Any] = {str(m["column"]): scores[str(m["column"])] for m in components if m["column"] in scores}
    if subset and run.get("coverage"):
        extra["coverage"] = run.get("coverage")
    data = {
        "task": str(scores.get("config")),
        "benchmark": task.benchmark if task is not None else str(scores.get("config")),
        "model": str(run.get("model")),
        "method": str(recorded_method(run.get("method"))),
        "k": scores.get("k"),
        TOXICITY: toxicity_label(scores.get("scorers")),
        "scores": dict(values),
        "ci": {g: (c or {}).get(column) for g, c in group_ci.items()},
        "n": dict(scores["n"]),
        "gap": {"groups": headline, **gap} if gap else {},
        "parse_rate": overall.get("parse_rate"),
        "refusal_rate": overall.get("refusal_rate"),
        "limit": run.get("limit"),
        "sentences": subset,
        "extra": extra,
        "signature": str(scores.get("signature") or run.get("signature") or ""),
        "source": str(folder),
        "caveats": [] if scores.get("scored", True) else ["no sentence got a word to score"],
        **({"metric": str(first["title"])} if first.get("title") else {}),
    }
    row = ResultRow.from_dict(data, str(path), fix=_RESCORE)
    row.n = {g: int(v) for g, v in row.n.items()}
    return row


def _is_results_file(document: Any) -> bool:
    """Whether ``document`` is a ``queerbench eval`` ``results.json`` (an object with a list of ``rows``)."""
    return isinstance(document, dict) and isinstance(document.get("rows"), list)


def _not_ours(path: Path) -> ValueError:
    return ValueError(
        f"{path} is not a queerbench results file (a `queerbench eval` folder's {RESULTS_FILE} is a JSON object with "
        "a list of 'rows'; another tool wrote this one): point at a run, eval or scm run folder"
    )


def folder_kind(folder: Path) -> str:
    """``eval``, ``run``, or the name of the ``probes`` task whose run wrote ``folder``; else a one-line error. A
    ``results.json`` another tool wrote beside a run's ``scores.json`` does not hide the run."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder; give a run or eval folder")
    results, scores = folder / RESULTS_FILE, folder / "scores.json"
    if results.is_file() and (not scores.is_file() or _is_results_file(read_json(results, fix=_REEVAL))):
        return "eval"
    record = read_json(scores, fix=_RERUN) if scores.is_file() else None
    if record is not None and not is_probes_record(record):
        return "run"
    for task in all_tasks().values():  # a probes run's folder: its task reads it
        if _task_rows(task, folder):
            return task.name
    if record is not None:
        name = str(record.get("task"))
        raise ValueError(
            f"{folder} holds the result record of a {name} run, but no installed task reads its folder (the task "
            f"{name} is not installed, or the run's own results are gone: rerun `queerbench {name} run` with the same "
            "--out, which reuses its cached replies)"
        )
    raise ValueError(
        f"{folder} is not a result folder: it holds no scores.json (a `queerbench run` folder), no {RESULTS_FILE} "
        "(a `queerbench eval` folder) and no task's own results (e.g. a `queerbench scm run` folder); point at "
        "such a folder (an interrupted run has none yet: rerun it to finish)"
    )


def _task_rows(task: Task, folder: Path) -> list[ResultRow]:
    """The rows a task reads from its own folder, each checked (:func:`~queerbench.reporting.rows.row_problem`): a
    malformed record is one line naming the folder, whatever the task's reader tripped on."""
    fix = "rerun the command that wrote it with the same --out"
    try:
        rows = task.folder_rows(folder)
    except (TypeError, AttributeError, KeyError, IndexError) as exc:
        raise ValueError(
            f"{folder}: its {task.name} results are malformed ({type(exc).__name__}: {exc}); {fix}"
        ) from None
    for i, row in enumerate(rows):
        problem = row_problem(row.to_dict()) if isinstance(row, ResultRow) else "not a result row"
        if problem:
            raise ValueError(f"{folder} ({task.name} row {i}): {problem}; {fix}")
    return rows


def folder_rows(folder: Path) -> list[ResultRow]:
    """Every result row of ``folder`` (see the module doc), each checked field by field."""
    folder = Path(folder)
    kind = folder_kind(folder)
    if kind == "eval":
        path = folder / RESULTS_FILE
        document = read_json(path, fix=_REEVAL)
        if not _is_results_file(document):
            raise _not_ours(path)
        return [ResultRow.from_dict(r, f"{path} row {i}", fix=_REEVAL) for i, r in enumerate(document["rows"])]
    if kind == "run":
        document = read_json(folder / "scores.json", fix="rerun the command that wrote it with the same --out")
        if is_record(document):  # a run on the request runner: its typed record
            return record_rows(read_record(folder / "scores.json"), source=str(folder))
        return [run_row(folder)]
    return _task_rows(all_tasks()[kind], folder)
