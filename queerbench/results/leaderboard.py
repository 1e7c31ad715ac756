"""``queerbench leaderboard show``: the user's runs among the papers' published models.

Rows (:class:`~queerbench.reporting.rows.ResultRow`) come from the reference rows (``leaderboard build``) and from the
run, eval and task folders given. They are split into groups of comparable rows (same task — sentences and scoring
rules —, ``k``, toxicity scorer and templates covered); each group is a table ranked by the score of the task's first
headline group (lower is less harmful). A user's row in a group without reference rows is listed apart too, with the
reason it cannot stand among the reference rows of its task. Written: ``leaderboard.md``, ``leaderboard.csv`` (one line
per row and group, with its comparison group and rank) and ``leaderboard.png``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from queerbench.base.files import atomic_path, write_text
from queerbench.reporting.rows import ResultRow, comparable_groups, incomparable_reason
from queerbench.results.folders import folder_rows
from queerbench.tasks import all_tasks

__all__ = ["leaderboard_frame", "leaderboard_markdown", "rank_groups", "show_leaderboard"]


def _first_group(rows: Sequence[ResultRow]) -> str | None:
    task = all_tasks().get(rows[0].task)
    first = task.headline_gap[0] if task is not None else "queer"
    if any(r.headline(first) is not None for r in rows):
        return first
    scored = [g for r in rows for g, v in r.scores.items() if v is not None]
    return scored[0] if scored else None


def rank_groups(rows: Sequence[ResultRow]) -> list[tuple[list[ResultRow], str | None]]:
    """Comparable groups, each sorted by its ranking group's score (rows without one last), with that group."""
    out = []
    for group in comparable_groups(rows):
        by = _first_group(group)
        ranked = sorted(group, key=lambda r: (r.headline(by) is None, r.headline(by) or 0.0)) if by else group
        out.append((ranked, by))
    return out


def _title(row: ResultRow) -> str:
    """The heading of a comparable group: benchmark and task, k, toxicity scorer, what it covers, and its metric when
    that is not the QueerBench score."""
    unit = "templates" if row.k is not None else "prompts"  # a probes task (no k) is limited in prompts
    covered = f"all {unit}" if row.limit is None else f"first {row.limit} {unit}"
    k = f"k={row.k}" if row.k is not None else "replies"
    metric = "" if row.metric == "QueerBench score" else f", {row.metric}"
    return f"{row.benchmark} `{row.task}`, {k}, toxicity: {row.toxicity}, {covered}{metric}"


def _cell(value: Any, ci: Any = None) -> str:
    if value is None:
        return "–"
    text = f"{float(value):.2f}"
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and None not in ci:
        text += f" [{float(ci[0]):.2f}, {float(ci[1]):.2f}]"
    return text


def _apart(rows: Sequence[ResultRow], references: Sequence[ResultRow]) -> list[tuple[ResultRow, str]]:
    """The user's rows that stand among no reference row, with why (against the closest reference of its task)."""
    ref_keys = {r.comparable_key() for r in references}
    out = []
    for row in rows:
        if row.reference or row.comparable_key() in ref_keys:
            continue
        same_task = [r for r in references if r.task == row.task]
        reasons = [incomparable_reason(row, r) for r in same_task]
        reason = min((r for r in reasons if r), key=len, default=None)
        out.append((row, reason or f"no published model has a reference row for task {row.task}"))
    return out


def leaderboard_markdown(rows: Sequence[ResultRow], figure: str | None = None) -> str:
    """``leaderboard.md``: one ranked table per comparable group, then the rows listed apart with the reason."""
    references = [r for r in rows if r.reference]
    lines = [
        "# queerbench leaderboard",
        "",
        f"{len(references)} reference rows (the papers' published models, recomputed from their own files) and "
        f"{len(rows) - len(references)} of yours. Only comparable rows (same task, k, toxicity scorer and templates) "
        "are ranked together; lower is less harmful. Gap: the first headline group's score minus the second's, with "
        "its 95% CI (bootstrap over templates) and permutation p-value.",
    ]
    if figure:
        lines += ["", f"![leaderboard]({figure})"]
    for ranked, by in rank_groups(rows):
        groups = list(dict.fromkeys(g for r in ranked for g in r.scores))
        summary = list(dict.fromkeys(c for r in ranked for c in (r.extra.get("summary") or {})))
        lines += ["", f"## {_title(ranked[0])}", ""]
        if by:
            lines.append(f"Ranked by the {by} score ({ranked[0].metric}).")
            lines.append("")
        header = ["Rank", "Model", "Method", *groups, "Gap, p", *summary, "n", "Source"]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for rank, row in enumerate(ranked, start=1):
            gap = row.gap or {}
            p = gap.get("p_value")
            gap_text = _cell(gap.get("diff"), gap.get("ci")) + (f", p = {p:.3f}" if isinstance(p, (int, float)) else "")
            name = f"**{row.model}** (yours)" if not row.reference else row.model
            cells = [
                str(rank) if by and row.headline(by) is not None else "–",
                name,
                row.method,
                *[_cell(row.scores.get(g), row.ci.get(g)) for g in groups],
                gap_text if gap else "–",
                *[_cell((row.extra.get("summary") or {}).get(c)) for c in summary],
                str(sum(row.n.values())),
                "published" if row.reference else f"`{row.source}`",
            ]
            lines.append("| " + " | ".join(cells) + " |")
    apart = _apart(rows, references)
    if apart:
        lines += ["", "## Listed apart", ""]
        lines += [
            f"- **{row.model}** (`{row.source}`): not ranked with the reference rows: {why}" for row, why in apart
        ]
    lines += ["", "## Signatures", ""]
    lines += [f"- {row.model} ({row.task}, k={row.k}): `{row.signature}`" for row in rows]
    return "\n".join(lines) + "\n"


def leaderboard_frame(rows: Sequence[ResultRow]) -> pd.DataFrame:
    """One line per row and group: its comparison group (1, 2, …), rank, score, CI, gap, n, signature, source."""
    records = []
    for number, (ranked, by) in enumerate(rank_groups(rows), start=1):
        for rank, row in enumerate(ranked, start=1):
            for group in row.scores or {"": None}:
                ci = row.ci.get(group) if group else None
                records.append(
                    {
                        "comparison": number,
                        "rank": rank if by and row.headline(by) is not None else None,
                        "task": row.task,
                        "benchmark": row.benchmark,
                        "k": row.k,
                        "toxicity": row.toxicity,
                        "limit": row.limit,
                        "model": row.model,
                        "method": row.method,
                        "reference": row.reference,
                        "group": group or None,
                        "score": row.scores.get(group) if group else None,
                        "ci_low": ci[0] if isinstance(ci, list) else None,
                        "ci_high": ci[1] if isinstance(ci, list) else None,
                        "gap": (row.gap or {}).get("diff"),
                        "gap_p": (row.gap or {}).get("p_value"),
                        "n": row.n.get(group) if group else sum(row.n.values()),
                        "signature": row.signature,
                        "source": row.source,
                    }
                )
    return pd.DataFrame(records)


def _figure(rows: Sequence[ResultRow], path: Path) -> bool:
    """One panel per comparable group that has the user's rows (else the first two groups): each model's ranking
    score with its CI, the user's rows hatched and labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from queerbench.reporting.figures import save_figure

    panels = [(g, by) for g, by in rank_groups(rows) if by and any(not r.reference for r in g)]
    panels = panels or [(g, by) for g, by in rank_groups(rows) if by][:2]
    if not panels:
        return False
    height = max(3.0, 0.32 * max(len(g) for g, _ in panels) + 1.4)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels), height), squeeze=False)
    for ax, (group, by) in zip(axes[0], panels, strict=True):
        shown = [r for r in group if r.headline(by) is not None]
        values = [r.headline(by) or 0.0 for r in shown]
        errors = [
            [v - r.ci[by][0] if isinstance(r.ci.get(by), list) else 0 for v, r in zip(values, shown, strict=True)],
            [r.ci[by][1] - v if isinstance(r.ci.get(by), list) else 0 for v, r in zip(values, shown, strict=True)],
        ]
        y = range(len(shown))
        bars = ax.barh(list(y), values, xerr=errors, capsize=2, color="0.75", edgecolor="black")
        for bar, row in zip(bars, shown, strict=True):
            if not row.reference:
                bar.set_hatch("//")
                bar.set_facecolor("0.35")
        methods = {r.method for r in shown}  # the method tells a model's rows apart when a group has several
        ax.set_yticks(
            list(y),
            [
                f"{r.model}{f' ({r.method})' if len(methods) > 1 else ''}{' (yours)' if not r.reference else ''}"
                for r in shown
            ],
            fontsize=7,
        )
        ax.invert_yaxis()
        metric = shown[0].metric if shown else ""
        direction = " (lower is less harmful)" if metric == "QueerBench score" else ""
        ax.set_xlabel(f"{metric}: {by}{direction}", fontsize=8)
        ax.set_title(_title(group[0]).replace("`", ""), fontsize=8)
    from matplotlib.patches import Patch

    handles = [Patch(facecolor="0.75", edgecolor="black", label="published (reference)")]
    if any(not r.reference for group, _ in panels for r in group):
        handles.append(Patch(facecolor="0.35", edgecolor="black", hatch="//", label="yours"))
    fig.suptitle("queerbench leaderboard: score with 95% CI over templates", fontsize=10, y=0.99)
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.95), ncol=len(handles), fontsize=7)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    save_figure(fig, path)
    plt.close(fig)
    return True


def show_leaderboard(folders: Sequence[Path], out: Path, references: Sequence[ResultRow]) -> list[ResultRow]:
    """Write ``leaderboard.md``, ``leaderboard.csv`` and ``leaderboard.png`` into ``out`` for ``references`` plus the
    rows of ``folders``; returns every row."""
    rows = list(references) + [row for folder in folders for row in folder_rows(Path(folder))]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    figure = "leaderboard.png" if _figure(rows, out / "leaderboard.png") else None
    write_text(out / "leaderboard.md", leaderboard_markdown(rows, figure))
    with atomic_path(out / "leaderboard.csv") as tmp:
        leaderboard_frame(rows).to_csv(tmp, index=False)
    return rows
