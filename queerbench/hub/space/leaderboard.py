"""The Space's Leaderboard tab: the papers' published models and every result pushed to the results dataset.

Rows come from the results dataset (:func:`queerbench.hub.results.pulled_rows`) and the reference rows (built here by
``leaderboard build``, else bundled with the package), so the tab shows the reference rows even when the dataset
cannot be reached. Rows are shown one comparison at a time (same task, ``k``, toxicity scorer and templates:
:func:`queerbench.results.leaderboard.rank_groups`), ranked, sortable, filtered by task and ``k``.
"""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd

from queerbench.reporting.rows import ResultRow
from queerbench.results.leaderboard import rank_groups

__all__ = ["build_leaderboard_tab", "leaderboard_rows", "leaderboard_table"]

log = logging.getLogger("queerbench.space")
_ANY = "(any)"


def leaderboard_rows(repo_id: str | None = None) -> tuple[list[ResultRow], str]:
    """The reference rows and the pushed ones, and a note on where they came from."""
    from queerbench.hub.results import pulled_rows, results_repo_id
    from queerbench.results.reference import reference_rows_for_show

    references, _ = reference_rows_for_show()
    repo_id = repo_id or results_repo_id()
    try:
        pushed = pulled_rows(repo_id)
        note = f"{len(references)} reference rows and {len(pushed)} pushed to {repo_id}."
    except Exception as exc:  # the Hub unreachable: the bundled reference rows still show
        log.warning("results dataset %s not read: %s", repo_id, exc)
        pushed, note = [], f"{len(references)} reference rows; the results dataset {repo_id} could not be reached."
    return [*references, *[r for r in pushed if not r.reference]], note


def _title(row: ResultRow) -> str:
    covered = "all templates" if row.limit is None else f"first {row.limit} templates"
    return f"{row.benchmark} {row.task} · k={row.k} · toxicity {row.toxicity} · {covered}"


def leaderboard_table(rows: list[ResultRow], task: str = _ANY, k: str = _ANY) -> dict[str, pd.DataFrame]:
    """Per comparison (its title): the ranked table, for the comparisons of ``task`` and ``k``."""
    out = {}
    for ranked, by in rank_groups(rows):
        head = ranked[0]
        if task not in (_ANY, head.task) or k not in (_ANY, str(head.k)):
            continue
        groups = list(dict.fromkeys(g for r in ranked for g in r.scores))
        records = []
        for rank, row in enumerate(ranked, start=1):
            gap = row.gap or {}
            records.append(
                {
                    "rank": rank if by and row.headline(by) is not None else None,
                    "model": row.model,
                    "method": row.method,
                    **{g: None if row.headline(g) is None else round(row.headline(g), 2) for g in groups},
                    "gap": None if gap.get("diff") is None else round(float(gap["diff"]), 2),
                    "gap p": gap.get("p_value"),
                    **{c: v for c, v in (row.extra.get("summary") or {}).items()},
                    "n": sum(row.n.values()),
                    "source": "published" if row.reference else "pushed",
                }
            )
        out[_title(head)] = pd.DataFrame(records)
    return out


def _types(frame: pd.DataFrame) -> list[str]:
    """Gradio's column types: numbers shown as numbers (sortable, not rounded), the rest as text."""
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
        f"comparable rows are ranked together; lower is less harmful. {note}"
    )
    with gr.Row():
        task = gr.Dropdown(tasks, value=_ANY, label="Task", elem_id="leaderboard-task")
        k = gr.Dropdown(ks, value=_ANY, label="k", elem_id="leaderboard-k")
        comparison = gr.Dropdown(titles, value=titles[0] if titles else None, label="Comparison")
    first = tables[titles[0]] if titles else pd.DataFrame()
    table = gr.Dataframe(first, interactive=False, wrap=True, elem_id="leaderboard-table", datatype=_types(first))

    def narrow(task_value: str, k_value: str) -> tuple[Any, Any]:
        found = leaderboard_table(rows, task_value, k_value)
        first = next(iter(found), None)
        return gr.update(choices=list(found), value=first), found.get(first, pd.DataFrame())

    def pick(task_value: str, k_value: str, title: str) -> pd.DataFrame:
        return leaderboard_table(rows, task_value, k_value).get(title, pd.DataFrame())

    task.change(narrow, [task, k], [comparison, table], api_visibility="private")
    k.change(narrow, [task, k], [comparison, table], api_visibility="private")
    comparison.change(pick, [task, k, comparison], [table], api_visibility="private")
