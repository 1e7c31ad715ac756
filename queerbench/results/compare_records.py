"""``queerbench compare`` of runs that write a result record (request and probes runs): their declared metrics side by
side, from the records.

One table per declared metric (rows = runs, columns = the task's groups, each cell the value with its 95% CI and n),
one heatmap of the first metric, and the differences that make runs not comparable (task, templates covered, method,
request type) as warnings, read from the records. Runs of one task share its metrics; runs of tasks with other
metrics are refused in one line. Nothing here knows a task, method, group or metric by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from queerbench.base.files import atomic_path, write_text
from queerbench.base.signature import parse_signature
from queerbench.reporting.figures import heatmap_figure, model_label
from queerbench.reporting.record import RunRecord, metric_direction
from queerbench.reporting.tables import NO_DATA, markdown_table
from queerbench.results.compare import refuse_repeats
from queerbench.scoring.metric_results import GroupStat

__all__ = ["compare_records", "record_labels", "record_warnings"]


def record_labels(records: Sequence[RunRecord]) -> list[str]:
    """``<model> · <task> · <method>`` per run, plus ``limit<N>`` for a ``--limit`` run; runs that would share a
    label (one model run with other settings) also name the signature fields in which they differ."""
    labels = []
    for r in records:
        limit = r.settings.get("limit")
        labels.append(
            f"{model_label(r.model)} · {r.task} · {r.method}" + (f" · limit{limit}" if limit is not None else "")
        )
    fields = [parse_signature(r.signature) for r in records]
    shared = {label: [j for j, other in enumerate(labels) if other == label] for label in labels}
    out = []
    for i, label in enumerate(labels):
        same = shared[label]
        differ = sorted({k for j in same for k in fields[j] if len({fields[m].get(k) for m in same}) > 1})
        out.append(label + "".join(f" · {k}:{fields[i].get(k)}" for k in differ if k != "qb"))
    return out


def record_warnings(records: Sequence[RunRecord]) -> list[str]:
    """What makes the runs' numbers not comparable, in words (none when they are)."""
    warnings = []
    for what, values in (
        ("tasks", {r.task for r in records}),
        ("templates covered (--limit)", {r.settings.get("limit") for r in records}),
        ("request types", {r.request_type for r in records}),
    ):
        if len(values) > 1:
            shown = ", ".join(sorted("all" if v is None else str(v) for v in values))
            warnings.append(f"the runs differ in {what} ({shown}): their numbers measure different things")
    return warnings


def _cell(stat: GroupStat, decimals: int) -> str:
    if not stat.n:
        return NO_DATA
    value = "n/a" if stat.value is None else f"{stat.value:.{decimals}f}"
    ci = f" [{stat.ci[0]:.{decimals}f}, {stat.ci[1]:.{decimals}f}]" if stat.ci else ""
    return f"{value}{ci} (n={stat.n})"


def compare_records(records: Sequence[RunRecord], folders: Sequence[str], out: Path) -> Path:
    """Write ``compare.md``, ``compare.csv`` (every metric's value per run and group) and ``compare_heatmap.png``
    into ``out``; returns the markdown's path. The same run given twice is refused, as ``compare`` refuses it."""
    labels = record_labels(records)
    refuse_repeats([r.signature for r in records], labels, folders)  # the same run (signature) given twice
    empty = sorted({r.task for r in records if not r.declared_metrics})
    if empty:
        raise ValueError(f"task {', '.join(empty)} declares no metrics, so its runs have nothing to compare")
    metrics = {tuple(m.name for m in r.declared_metrics) for r in records}
    if len(metrics) > 1:
        raise ValueError(
            "these runs declare different metrics (" + "; ".join(", ".join(m) for m in sorted(metrics)) + "); "
            "compare runs of one task"
        )
    first = records[0]
    order = list(dict.fromkeys(g for r in records for g in r.groups.order))
    out.mkdir(parents=True, exist_ok=True)
    warnings = record_warnings(records)
    lines = [f"# {first.benchmark} comparison", ""]
    lines += [f"> **Warning:** {w}" for w in warnings]
    interval, unit = first.groups.interval, first.groups.unit
    counted = "items" if unit == "templates" else unit  # a bootstrap over templates counts items; else its unit
    lines += [f"> Each cell: the metric's value, its 95% {interval} CI over {unit} and n ({counted}).", ""]
    values: dict[str, pd.DataFrame] = {}
    for metric in first.declared_metrics:
        name, d = metric.name, metric.decimals
        blocks = [r.results[name] for r in records]
        values[name] = pd.DataFrame(
            [[b.group(c).value for c in order] for b in blocks], index=labels, columns=order
        ).astype(float)
        shown = pd.DataFrame([[_cell(b.group(c), d) for c in order] for b in blocks], index=labels, columns=order)
        shown.index.name = "run"
        better = metric_direction(metric.higher_is_better)
        lines += [f"## {metric.title} ({better})", "", markdown_table(shown), ""]
    head = first.declared_metrics[0]
    counts = pd.DataFrame(
        [[r.results[head.name].group(c).n for c in order] for r in records],
        index=labels,
        columns=order,
    )
    heatmap_figure(
        values[head.name],
        out / "compare_heatmap.png",
        f"{head.title} per run and {first.groups.column} ({first.benchmark})",
        subtitle="rows: model · task · method" + (" (not all comparable: see compare.md)" if warnings else ""),
        value_label=f"{head.title} ({metric_direction(head.higher_is_better)})",
        counts=counts,
    )
    table = pd.concat(values, axis=1)
    with atomic_path(out / "compare.csv") as tmp:
        table.to_csv(tmp)
    lines += ["![heatmap](compare_heatmap.png)", ""]
    return write_text(out / "compare.md", "\n".join(lines))
