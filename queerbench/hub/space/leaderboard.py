"""The Space's Leaderboard tab: the papers' published models and every result pushed to the results dataset.

Rows come from the results dataset (:func:`pushed_rows`) and the reference rows (built here by ``leaderboard build``,
else bundled with the package), so the tab shows the reference rows even when the dataset cannot be reached. Rows are
shown one comparison at a time (same task, ``k``, toxicity scorer and templates:
:func:`queerbench.results.leaderboard.rank_groups`), ranked, sortable, filtered by task and ``k``; scores and gaps are
rounded for display and shown with their 95% CIs.

The results dataset is written by anyone who pushes, so nothing in it may stop the tab: a file whose name is not a
plain ``results/…/results.json`` path (``results/../x/results.json``), a file that cannot be read or holds no
``rows`` list, and a row that is no valid result row (:func:`queerbench.reporting.rows.row_problem`) are each skipped,
counted in the tab's note and logged; the other rows still show.
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from queerbench.base import env
from queerbench.reporting.rows import ResultRow, coverage_label
from queerbench.results.leaderboard import rank_groups

__all__ = [
    "PulledRows",
    "build_leaderboard_tab",
    "leaderboard_rows",
    "leaderboard_table",
    "pushed_rows",
    "scorer_notes",
]

log = logging.getLogger("queerbench.space")
_ANY = "(any)"
EMPTY_COLUMNS = ("rank", "model", "method", "score", "score CI", "gap", "gap CI", "gap p", "n", "source")
"""The headers of a table with no rows (no comparison matches the filters)."""


@dataclass
class PulledRows:
    """What the results dataset gave: its valid rows, and what was skipped (a reason each, for the log)."""

    rows: list[ResultRow] = field(default_factory=list)
    skipped_rows: list[str] = field(default_factory=list)
    skipped_files: list[str] = field(default_factory=list)

    def note(self) -> str:
        """What was skipped, in words (empty when nothing was)."""
        parts = []
        if self.skipped_rows:
            parts.append(f"{len(self.skipped_rows)} malformed row{'s' if len(self.skipped_rows) != 1 else ''}")
        if self.skipped_files:
            n = len(self.skipped_files)
            parts.append(f"{n} unreadable or unsafely named file{'s' if n != 1 else ''}")
        return f" Skipped {' and '.join(parts)} of the results dataset (the Space's log names each)." if parts else ""


def _safe_results_name(name: str) -> bool:
    """Whether ``name`` is a plain ``results/<…>/results.json`` path of the dataset (no ``..``, ``.``, empty or
    backslash segment), so that it can be read into a local folder without leaving it."""
    parts = name.split("/")
    return (
        len(parts) >= 3
        and parts[0] == "results"
        and parts[-1] == "results.json"
        and all(p not in ("", ".", "..") and "\\" not in p and not p.startswith("~") for p in parts)
    )


def _document_rows(document: Any, where: str, pulled: PulledRows) -> None:
    """Add the valid rows of one ``results.json`` document to ``pulled``; count what is not."""
    rows = document.get("rows") if isinstance(document, dict) else None
    if not isinstance(rows, list):
        pulled.skipped_files.append(f"{where}: no 'rows' list")
        return
    for i, data in enumerate(rows):
        try:
            pulled.rows.append(ResultRow.from_dict(data, f"{where} row {i}"))
        except (TypeError, ValueError) as exc:
            pulled.skipped_rows.append(str(exc))


def pushed_rows(repo_id: str, *, endpoint: str | None = None) -> PulledRows:
    """Every valid row pushed to the results dataset ``repo_id`` (none when it does not exist), skipping and
    counting what cannot be read (see the module doc). Raises only when the dataset's file list cannot be had (the
    Hub unreachable)."""
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import RepositoryNotFoundError

    endpoint = endpoint or env.hf_endpoint()
    token = env.hf_token() or None
    api = HfApi(endpoint=endpoint, token=token)
    try:
        names = api.list_repo_files(repo_id, repo_type="dataset")
    except RepositoryNotFoundError:
        return PulledRows()
    pulled = PulledRows()
    candidates = sorted(n for n in names if n.startswith("results/") and n.endswith("/results.json"))
    with tempfile.TemporaryDirectory(prefix="queerbench-results-") as local:  # small files: always the latest
        for name in candidates:
            where = f"{repo_id}/{name}"
            if not _safe_results_name(name):
                pulled.skipped_files.append(f"{where}: not a plain results/…/results.json path")
                continue
            try:
                path = hf_hub_download(
                    repo_id, name, repo_type="dataset", endpoint=endpoint, token=token, local_dir=local
                )
                document = json.loads(Path(path).read_text(encoding="utf-8"))
            except Exception as exc:  # one file of anyone's push must not hide the others: skipped and counted
                pulled.skipped_files.append(f"{where}: {type(exc).__name__}: {exc}")
                continue
            _document_rows(document, where, pulled)
    for reason in [*pulled.skipped_files, *pulled.skipped_rows]:
        log.warning("results dataset: skipped %s", reason)
    return pulled


def leaderboard_rows(repo_id: str | None = None) -> tuple[list[ResultRow], str]:
    """The reference rows and the pushed ones, and a note on where they came from (and what was skipped)."""
    from queerbench.hub.results import results_repo_id
    from queerbench.results.reference import reference_rows_for_show

    references, _ = reference_rows_for_show()
    repo_id = repo_id or results_repo_id()
    try:
        pulled = pushed_rows(repo_id)
        pushed = pulled.rows
        note = f"{len(references)} reference rows and {len(pushed)} pushed to {repo_id}.{pulled.note()}"
    except Exception as exc:  # the Hub unreachable: the bundled reference rows still show
        log.warning("results dataset %s not read: %s", repo_id, exc)
        pushed, note = [], f"{len(references)} reference rows; the results dataset {repo_id} could not be reached."
    return [*references, *[r for r in pushed if not r.reference]], note


def _title(row: ResultRow) -> str:
    covered = coverage_label(row)
    return f"{row.benchmark} {row.task} · k={row.k} · toxicity {row.toxicity} · {covered}"


def _number(value: Any, digits: int) -> float | None:
    """``value`` rounded for display (None for a missing or non-finite value)."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return None if not math.isfinite(float(value)) else round(float(value), digits)


def _interval(ci: Any) -> str:
    """A 95% CI as ``[low, high]`` at two decimals ("" when there is none)."""
    if not isinstance(ci, (list, tuple)) or len(ci) != 2 or any(_number(x, 2) is None for x in ci):
        return ""
    return f"[{float(ci[0]):.2f}, {float(ci[1]):.2f}]"


def leaderboard_table(rows: list[ResultRow], task: str = _ANY, k: str = _ANY) -> dict[str, pd.DataFrame]:
    """Per comparison (its title): the ranked table, for the comparisons of ``task`` and ``k``. Scores and gaps are
    rounded to two decimals with their 95% CI beside them, p-values and the task's own figures to three."""
    out = {}
    for ranked, by in rank_groups(rows):
        head = ranked[0]
        if task not in (_ANY, head.task) or k not in (_ANY, str(head.k)):
            continue
        groups = list(dict.fromkeys(g for r in ranked for g in r.scores))
        records = []
        for rank, row in enumerate(ranked, start=1):
            gap = row.gap or {}
            record: dict[str, Any] = {
                "rank": rank if by and row.headline(by) is not None else None,
                "model": row.model,
                "method": row.method,
            }
            for g in groups:
                record[g] = _number(row.headline(g), 2)
                record[f"{g} CI"] = _interval((row.ci or {}).get(g))
            record["gap"] = _number(gap.get("diff"), 2)
            record["gap CI"] = _interval(gap.get("ci"))
            record["gap p"] = _number(gap.get("p_value"), 3)
            summary = row.extra["summary"] if isinstance(row.extra.get("summary"), dict) else {}
            record.update({c: _number(v, 3) if _number(v, 3) is not None else v for c, v in summary.items()})
            record["n"] = sum(row.n.values())
            record["source"] = "published" if row.reference else "pushed"
            records.append(record)
        out[_title(head)] = pd.DataFrame(records)
    return out


def scorer_notes(rows: list[ResultRow]) -> str:
    """One sentence per toxicity scorer the published rows come under, saying how they were made (the scorer's
    ``reference_note`` in ``queerbench/data/scorer_caveats.json``: the stored values, a re-scoring of the models' own
    predictions, leave-one-model-out fits); empty when none has a note."""
    from queerbench.results.leaderboard import scorer_note

    scorers = dict.fromkeys(r.toxicity for r in rows if r.reference)
    notes = [scorer_note([r for r in rows if r.reference and r.toxicity == name]) for name in scorers]
    return " ".join(n for n in notes if n)


def _empty() -> pd.DataFrame:
    """A table with no rows but its headers (Gradio shows placeholder headers 1 2 3 for a frame without columns)."""
    return pd.DataFrame(columns=list(EMPTY_COLUMNS))


def _types(frame: pd.DataFrame) -> list[Literal["number", "str"]]:
    """Gradio's column types: numbers shown as numbers (sortable), the rest as text."""
    return ["number" if pd.api.types.is_numeric_dtype(frame[c]) else "str" for c in frame.columns]


def build_leaderboard_tab(repo_id: str | None = None) -> None:
    """The tab's widgets (inside a ``gr.Tab``)."""
    import gradio as gr

    rows, note = leaderboard_rows(repo_id)
    tasks = [_ANY, *sorted({r.task for r in rows})]
    ks = [_ANY, *sorted({str(r.k) for r in rows})]
    tables = leaderboard_table(rows)
    titles = list(tables)
    gr.Markdown(
        "The papers' published models (recomputed from their own files, with 95% CIs over templates and the "
        "permutation test of the queer − non-queer gap) and the results pushed with `queerbench results push`. Only "
        f"comparable rows are ranked together (the same toxicity scorer among them); lower is less harmful. "
        f"{scorer_notes(rows)} {note}",
        elem_id="leaderboard-note",
    )
    with gr.Row():
        task = gr.Dropdown(tasks, value=_ANY, label="Task", elem_id="leaderboard-task")
        k = gr.Dropdown(ks, value=_ANY, label="k", elem_id="leaderboard-k")
        comparison = gr.Dropdown(titles, value=titles[0] if titles else None, label="Comparison")
    first = tables[titles[0]] if titles else _empty()
    table = gr.Dataframe(first, interactive=False, wrap=True, elem_id="leaderboard-table", datatype=_types(first))

    def shown(frame: pd.DataFrame | None) -> Any:
        frame = frame if frame is not None else _empty()
        return gr.Dataframe(value=frame, datatype=_types(frame))

    def narrow(task_value: str, k_value: str) -> tuple[Any, Any]:
        found = leaderboard_table(rows, task_value, k_value)
        first = next(iter(found), None)
        return gr.update(choices=list(found), value=first), shown(found.get(first) if first else None)

    def pick(task_value: str, k_value: str, title: str) -> Any:
        return shown(leaderboard_table(rows, task_value, k_value).get(title))

    task.change(narrow, [task, k], [comparison, table], api_visibility="private")
    k.change(narrow, [task, k], [comparison, table], api_visibility="private")
    comparison.change(pick, [task, k, comparison], [table], api_visibility="private")
