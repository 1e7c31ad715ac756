"""``queerbench leaderboard show``: the user's runs among the papers' published models.

Rows (:class:`~queerbench.reporting.rows.ResultRow`) come from the reference rows (``leaderboard build``) and from the
run, eval and task folders given. They are split into groups of comparable rows (same task — sentences and scoring
rules —, ``k``, toxicity scorer and sentences covered: an imported subset is ranked only with runs of the very same
sentences, and never titled "all templates"); each group is a table ranked by the score of the task's first headline
group (lower is less harmful). A user's row in a group without reference rows is listed apart too, with the reason it
cannot stand among the reference rows of its task. One result given twice (a folder twice, an eval and one of its part
folders) is refused, as ``compare`` refuses it. Written: ``leaderboard.md`` (each figure at its paper's precision),
``leaderboard.csv`` (one line per row and group, with its comparison group and rank, and every column the markdown
shows, at full precision) and ``leaderboard.png``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import pandas as pd

from queerbench.base.files import atomic_path, write_text
from queerbench.reporting.rows import (
    ResultRow,
    comparable_groups,
    coverage_label,
    incomparable_reason,
    row_identity,
)
from queerbench.results.compare import refuse_repeats
from queerbench.results.folders import folder_rows
from queerbench.scoring.caveats import reference_note
from queerbench.tasks import all_tasks

__all__ = [
    "Standing",
    "check_out_folder",
    "leaderboard_figure",
    "leaderboard_frame",
    "leaderboard_markdown",
    "rank_groups",
    "scorer_note",
    "show_leaderboard",
    "standings",
]

FILES = ("leaderboard.md", "leaderboard.csv", "leaderboard.png")


def _first_group(rows: Sequence[ResultRow]) -> str | None:
    task = all_tasks().get(rows[0].task)
    if task is not None and task.declares_headline_gap:
        first: str | None = task.headline_gap[0]
    else:  # a task it does not know, or one declaring no gap: the first group of the rows' own gap
        first = next((str(r.gap["groups"]).split(" - ")[0] for r in rows if r.gap.get("groups")), None)
    if first is not None and any(r.headline(first) is not None for r in rows):
        return first
    scored = [g for r in rows for g, v in r.scores.items() if v is not None]
    return scored[0] if scored else None


def rank_groups(rows: Sequence[ResultRow]) -> list[tuple[list[ResultRow], str | None]]:
    """Comparable groups, each sorted by its ranking group's score (rows without one last), with that group."""
    out = []
    for group in comparable_groups(rows):
        by = _first_group(group)
        sign = -1.0 if group[0].higher_is_better else 1.0  # a declared metric says which way is better
        ranked = sorted(group, key=lambda r: (r.headline(by) is None, sign * (r.headline(by) or 0.0))) if by else group
        out.append((ranked, by))
    return out


def _title(row: ResultRow) -> str:
    """The heading of a comparable group: benchmark and task, k, toxicity scorer, what it covers, and its metric when
    that is not the QueerBench score (a request task's rows: no k and no toxicity scorer, only what they cover)."""
    if row.extra.get("unit"):  # a row of a request run (its record's declared metric)
        return f"{row.benchmark} `{row.task}`, {coverage_label(row, str(row.extra['unit']))}, {row.metric}"
    unit = "templates" if row.k is not None else "prompts"  # a probes task (no k) is limited in prompts
    covered = coverage_label(row, unit)
    k = f"k={row.k}" if row.k is not None else "replies"
    metric = "" if row.metric == "QueerBench score" else f", {row.metric}"
    return f"{row.benchmark} `{row.task}`, {k}, toxicity: {row.toxicity}, {covered}{metric}"


def scorer_note(rows: Sequence[ResultRow]) -> str | None:
    """What a comparable group's table says about how its published rows were made under its toxicity scorer (the
    scorer's ``reference_note`` in ``queerbench/data/scorer_caveats.json``: the stored values, a re-scoring, or
    leave-one-model-out fits); None when the group has no published row or its scorer no note."""
    if not any(r.reference for r in rows):
        return None
    return reference_note(rows[0].toxicity)


def _cell(value: Any, ci: Any = None, decimals: int = 2) -> str:
    if value is None:
        return "–"
    text = f"{float(value):.{decimals}f}"
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and None not in ci:
        text += f" [{float(ci[0]):.{decimals}f}, {float(ci[1]):.{decimals}f}]"
    return text


def _summary_decimals(row: ResultRow) -> int:
    """The precision of a row's own figures (``extra["summary"]``): its task's paper's (QueerGen: 3 decimals)."""
    task = all_tasks().get(row.task)
    return task.summary_decimals if task is not None else 2


def _apart(rows: Sequence[ResultRow], references: Sequence[ResultRow]) -> list[tuple[ResultRow, str]]:
    """The user's rows that stand among no reference row, with why (against the closest reference of its task: the
    fewest differences, then the same k — the published row a reader would look for —, then the shortest reason)."""
    ref_keys = {r.comparable_key() for r in references}
    out = []
    for row in rows:
        if row.reference or row.comparable_key() in ref_keys:
            continue
        same_task = [(incomparable_reason(row, r), r) for r in references if r.task == row.task]
        closest = min(
            ((why, r) for why, r in same_task if why),
            key=lambda pair: (pair[0].count("; "), pair[1].k != row.k, len(pair[0])),
            default=None,
        )
        reason = closest[0] if closest else None
        out.append((row, reason or f"no published model has a reference row for task {row.task}"))
    return out


@dataclass
class Standing:
    """Where one of the user's rows stands: its table (as ``leaderboard.md`` titles it), its rank among the rows of
    that table with a ranking score (``rank`` of ``of``, by ``by``) and who they are, or — ``rank`` None — why it is
    ranked beside no published model (``reason``)."""

    row: ResultRow
    table: str
    rank: int | None = None
    of: int = 0
    by: str | None = None
    among: list[ResultRow] = field(default_factory=list)
    reason: str = ""


def standings(rows: Sequence[ResultRow]) -> list[Standing]:
    """For each of the user's rows of ``rows`` (in their order), where ``leaderboard show`` ranks it among the
    published ones: the table of comparable rows it is in, its rank among those of the table with a score and which
    they are; or why it is ranked beside none (no comparable published row: another scorer, k or coverage, such as a
    ``--limit`` pass; no score of its own; no score in the published rows of its table)."""
    references = [r for r in rows if r.reference]
    apart = {id(row): why for row, why in _apart(rows, references)}
    found: dict[int, Standing] = {}
    for ranked, by in rank_groups(rows):
        scored = [r for r in ranked if by and r.headline(by) is not None]
        for row in ranked:
            if row.reference:
                continue
            standing = Standing(row=row, table=_title(row).replace("`", ""), by=by)
            if id(row) in apart:
                standing.reason = f"no comparable published row: {apart[id(row)]}"
            elif not any(r is row for r in scored):
                standing.reason = f"it has no {by or 'score'} score of its own to rank by (see its caveats)"
            elif not any(r.reference for r in scored):
                standing.reason = (
                    f"the published rows of its table have no {by} {row.metric} (their files hold other figures)"
                )
            else:
                standing.rank = next(i for i, r in enumerate(scored, start=1) if r is row)
                standing.of = len(scored)
                standing.among = [r for r in scored if r is not row]
            found[id(row)] = standing
    return [found[id(row)] for row in rows if id(row) in found]


def leaderboard_markdown(rows: Sequence[ResultRow], figure: str | None = None) -> str:
    """``leaderboard.md``: one ranked table per comparable group, then the rows listed apart with the reason."""
    references = [r for r in rows if r.reference]
    lines = [
        "# queerbench leaderboard",
        "",
        f"{len(references)} reference rows (the papers' published models, recomputed from their own files) and "
        f"{len(rows) - len(references)} of yours. Only comparable rows (same task, k, toxicity scorer and sentences "
        "covered) are ranked together; lower is less harmful. The published models' rows exist under each toxicity "
        "scorer (the values stored in their files, and each offline scorer re-scoring their own predictions), so "
        "a run under any of them is ranked among them. Gap: the first headline group's score minus the second's, "
        "with its 95% CI (bootstrap over templates) and permutation p-value.",
    ]
    if figure:
        lines += ["", f"![leaderboard]({figure})"]
    for ranked, by in rank_groups(rows):
        groups = list(dict.fromkeys(g for r in ranked for g in r.scores))
        summary = list(dict.fromkeys(c for r in ranked for c in (r.extra.get("summary") or {})))
        lines += ["", f"## {_title(ranked[0])}", ""]
        if by:
            said = f", {ranked[0].direction()}" if "higher_is_better" in ranked[0].extra else ""  # a declared metric
            lines.append(f"Ranked by the {by} score ({ranked[0].metric}{said}).")
            lines.append("")
        note = scorer_note(ranked)
        if note:
            lines += [note, ""]
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
                *[_cell((row.extra.get("summary") or {}).get(c), decimals=_summary_decimals(row)) for c in summary],
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
    lines += [
        f"- {row.model} ({row.task}{f', k={row.k}' if row.k is not None else ''}): `{row.signature}`" for row in rows
    ]
    return "\n".join(lines) + "\n"


def leaderboard_frame(rows: Sequence[ResultRow]) -> pd.DataFrame:
    """One line per row and group: its comparison group (1, 2, …), rank, what it covers, score, CI, gap with its CI
    and p-value, n, the row's own figures (QueerGen's VADER, Perspective and regard; the SCM's Competence: one column
    each, as ``leaderboard.md`` shows them), why it is listed apart, signature and source. Every number at full
    precision (the markdown rounds to each paper's precision)."""
    references = [r for r in rows if r.reference]
    apart = {id(row): why for row, why in _apart(rows, references)}
    summary_columns = list(dict.fromkeys(c for r in rows for c in (r.extra.get("summary") or {})))
    records = []
    for number, (ranked, by) in enumerate(rank_groups(rows), start=1):
        for rank, row in enumerate(ranked, start=1):
            gap = row.gap or {}
            gap_ci = gap["ci"] if isinstance(gap.get("ci"), (list, tuple)) else [None, None]
            summary = row.extra.get("summary") or {}
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
                        "sentences": row.sentences,
                        "covered": coverage_label(row, "templates" if row.k is not None else "prompts"),
                        "metric": row.metric,
                        "model": row.model,
                        "method": row.method,
                        "reference": row.reference,
                        "group": group or None,
                        "score": row.scores.get(group) if group else None,
                        "ci_low": ci[0] if isinstance(ci, (list, tuple)) else None,
                        "ci_high": ci[1] if isinstance(ci, (list, tuple)) else None,
                        "gap": gap.get("diff"),
                        "gap_ci_low": gap_ci[0],
                        "gap_ci_high": gap_ci[1],
                        "gap_p": gap.get("p_value"),
                        "n": row.n.get(group) if group else sum(row.n.values()),
                        **{column: summary.get(column) for column in summary_columns},
                        "listed_apart": apart.get(id(row)),
                        "signature": row.signature,
                        "source": row.source,
                    }
                )
    frame = pd.DataFrame(records)
    for column in ("rank", "k", "limit", "n"):  # whole numbers stay whole where some lines have none
        if column in frame:
            frame[column] = frame[column].astype("Int64")
    return frame


def _panels(rows: Sequence[ResultRow]) -> list[tuple[list[ResultRow], str]]:
    """The figure's panels: each comparable group that holds the user's rows, and — when none of those holds a
    published row — the published groups most like them (same benchmark, then same k; at most two), so the reference
    bars stay in view; without rows of the user's, the first two published groups."""
    ranked = [(g, by) for g, by in rank_groups(rows) if by and any(r.headline(by) is not None for r in g)]
    yours = [(g, by) for g, by in ranked if any(not r.reference for r in g)]
    published = [(g, by) for g, by in ranked if any(r.reference for r in g)]
    if not yours:
        return published[:2]
    if any(r.reference for g, _ in yours for r in g):
        return yours
    mine = [r for g, _ in yours for r in g]

    def likeness(panel: tuple[list[ResultRow], str]) -> tuple[bool, bool]:
        first = panel[0][0]
        return (
            all(first.benchmark != r.benchmark for r in mine),
            all(first.k != r.k for r in mine),
        )

    return yours + sorted(published, key=likeness)[:2]


def leaderboard_figure(rows: Sequence[ResultRow]) -> Any:
    """The figure of ``leaderboard.png`` (a matplotlib ``Figure``; None when no group has a ranking score): the
    user's rows among the published ones (:func:`_panels`), each model's ranking score with its CI, one panel per
    comparable group titled with its task, k, toxicity scorer and coverage; published bars light grey, the user's
    dark grey and hatched (readable in greyscale); the title names the user's models, the legend what it draws."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    panels = _panels(rows)
    if not panels:
        return None
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    height = max(3.0, 0.32 * max(len(g) for g, _ in panels) + 1.6)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(5.6 * ncols, height * nrows + 0.9), squeeze=False, layout="constrained"
    )
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax, (group, by) in zip(axes.flat, panels, strict=False):
        shown = [r for r in group if r.headline(by) is not None]
        values = [r.headline(by) or 0.0 for r in shown]
        errors = [
            [v - ci[0] if _pair(ci := r.ci.get(by)) else 0 for v, r in zip(values, shown, strict=True)],
            [ci[1] - v if _pair(ci := r.ci.get(by)) else 0 for v, r in zip(values, shown, strict=True)],
        ]
        y = list(range(len(shown)))
        bars = ax.barh(y, values, xerr=errors, capsize=2, color="0.75", edgecolor="black")
        for bar, row in zip(bars, shown, strict=True):
            if not row.reference:
                bar.set_hatch("//")
                bar.set_facecolor("0.35")
        methods = {r.method for r in shown}  # the method tells a model's rows apart when a group has several
        ax.set_yticks(
            y,
            [
                f"{r.model}{f' ({r.method})' if len(methods) > 1 else ''}{' (yours)' if not r.reference else ''}"
                for r in shown
            ],
            fontsize=7,
        )
        ax.set_ylim(max(len(shown), 3) - 0.5, -0.5)  # top to bottom; one bar is no wider than in a group of three
        metric = shown[0].metric
        direction = " (lower is less harmful)" if metric == "QueerBench score" else ""
        ax.set_xlabel(f"{metric}: {by}{direction}", fontsize=8)
        alone = "" if any(r.reference for r in shown) else "\nno published model is comparable: yours only"
        ax.set_title(_title(group[0]).replace("`", "") + alone, fontsize=8)
    drawn = [r for g, by in panels for r in g if r.headline(by) is not None]
    handles = []
    if any(r.reference for r in drawn):
        handles.append(Patch(facecolor="0.75", edgecolor="black", label="published (reference)"))
    if any(not r.reference for r in drawn):
        handles.append(Patch(facecolor="0.35", edgecolor="black", hatch="//", label="yours"))
    models = list(dict.fromkeys(r.model for r in drawn if not r.reference))
    named = f"{', '.join(models[:3])}{' …' if len(models) > 3 else ''} among the published models" if models else ""
    fig.suptitle(
        f"queerbench leaderboard{': ' + named if named else ''}\nscore with 95% CI over templates", fontsize=10
    )
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=7)
    return fig


def _figure(rows: Sequence[ResultRow], path: Path) -> bool:
    """Write :func:`leaderboard_figure` to ``path``; False when there is none."""
    fig = leaderboard_figure(rows)  # selects the Agg backend before pyplot is imported here
    if fig is None:
        return False
    import matplotlib.pyplot as plt

    from queerbench.reporting.figures import save_figure

    save_figure(fig, path)
    plt.close(fig)
    return True


def _pair(value: Any) -> TypeGuard[Sequence[float]]:
    """Whether ``value`` is a (low, high) interval with both ends."""
    return isinstance(value, (list, tuple)) and len(value) == 2 and None not in value


def check_out_folder(out: Path) -> Path:
    """``out`` if ``leaderboard show`` can write its files into it (a folder, or a path where one can be made); a
    one-line ``ValueError`` otherwise, before anything is read or written."""
    out = Path(out)
    for place in (out, *out.parents):
        if place.exists():
            if not place.is_dir():
                what = "is a file" if place == out else f"cannot be a folder: {place} is a file"
                raise ValueError(
                    f"--out {out} {what}; --out must be a folder for {', '.join(FILES)} (a new one, or an existing "
                    "folder, whose leaderboard files are replaced: there is no --overwrite flag); choose another path"
                )
            break
    return out


def _line(row: ResultRow) -> str:
    """A row as one line of a table names it: model · task · method · k."""
    return f"{row.model} · {row.task} · {row.method} · " + (
        f"k={row.k}" if row.k is not None else "items" if row.extra.get("unit") else "replies"
    )


def show_leaderboard(folders: Sequence[Path], out: Path, references: Sequence[ResultRow]) -> list[ResultRow]:
    """Write ``leaderboard.md``, ``leaderboard.csv`` and ``leaderboard.png`` into ``out`` for ``references`` plus the
    rows of ``folders``; returns every row. One result given twice is refused (as ``compare`` refuses it)."""
    out = check_out_folder(out)
    found = [(str(folder), row) for folder in folders for row in folder_rows(Path(folder))]
    refuse_repeats([row_identity(r) for _, r in found], [_line(r) for _, r in found], [f for f, _ in found])
    rows = list(references) + [row for _, row in found]
    out.mkdir(parents=True, exist_ok=True)
    figure = "leaderboard.png" if _figure(rows, out / "leaderboard.png") else None
    write_text(out / "leaderboard.md", leaderboard_markdown(rows, figure))
    with atomic_path(out / "leaderboard.csv") as tmp:
        leaderboard_frame(rows).to_csv(tmp, index=False)
    return rows
