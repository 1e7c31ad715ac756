"""The report and figure of a run on the request runner, driven by the task's declared metrics alone.

``report.md`` states what produced the result (the record's signature, model fingerprint, backend), then per
declared metric a table of its groups (value, 95% CI over templates, items, templates), the headline comparison when
the task names one, and a table per breakdown column. ``metrics.png`` draws each metric per group with its CI,
titled with the model, task and method; groups differ by hatch as well as colour (readable in grayscale). Nothing
here knows a task, a method, a group or a metric by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from queerbench.base.files import write_text
from queerbench.reporting.figures import group_style, model_label, save_figure
from queerbench.reporting.record import RunRecord, metric_direction
from queerbench.scoring.metric_results import GroupStat

__all__ = ["FIGURE", "fmt_ci", "fmt_value", "metric_table", "render_metrics_report", "write_metrics_report"]

FIGURE = "metrics.png"


def fmt_value(value: float | None, decimals: int, missing: str = "n/a") -> str:
    """A declared metric's value at its decimals (``missing`` when there is none)."""
    return missing if value is None else f"{value:.{decimals}f}"


def fmt_ci(ci: list[float] | None, decimals: int, missing: str = "—") -> str:
    """A 95% CI as ``[lo, hi]`` at the metric's decimals (``missing`` when there is none)."""
    return missing if not ci else f"[{ci[0]:.{decimals}f}, {ci[1]:.{decimals}f}]"


def _rows(stats: dict[str, GroupStat], decimals: int, label: str) -> list[str]:
    lines = [f"| {label} | value | 95% CI | items | templates |", "|---|---|---|---|---|"]
    for name, s in stats.items():
        lines.append(f"| {name} | {fmt_value(s.value, decimals)} | {fmt_ci(s.ci, decimals)} | {s.n} | {s.n_clusters} |")
    return lines


def metric_table(record: RunRecord) -> pd.DataFrame:
    """One row per group of the record (in its declared order), the group column named as the task names it: its
    items (``n``) and templates, then one column per declared metric (headed by its title), its value with the 95% CI
    at the metric's decimals (the value alone without a CI), ``no data`` for a group without items (what the Space's score table shows)."""
    column, metrics = record.groups.column, record.declared_metrics
    rows = []
    for group in record.groups.order:
        first = record.results[metrics[0].name].group(group)
        row: dict[str, Any] = {column: group, "n": first.n, "templates": first.n_clusters}
        for metric in metrics:
            s, d = record.results[metric.name].group(group), metric.decimals
            text = fmt_value(s.value, d, missing="no data")
            row[metric.title] = f"{text} {fmt_ci(s.ci, d)}" if s.value is not None and s.ci else text
        rows.append(row)
    return pd.DataFrame(rows, columns=[column, "n", "templates", *(m.title for m in metrics)])


def _title(record: RunRecord) -> str:
    limit = record.settings.get("limit")
    scope = "all templates" if limit is None else f"first {limit} template{'s' if limit != 1 else ''}"
    asked = " + ".join(record.request_types)
    return f"{model_label(record.model)} · {record.task} · {record.method} ({asked}) · {scope}"


def render_metrics_report(record: RunRecord, figure: str | None = FIGURE) -> str:
    """The markdown report of a :class:`~queerbench.reporting.record.RunRecord`."""
    lines = [
        f"# {record.benchmark}: {record.task}",
        "",
        f"{_title(record)}. {record.n_items} items.",
        "",
        f"- signature: `{record.signature}`",
        f"- model fingerprint: `{record.model_fingerprint}`",
        f"- backend: `{record.backend}`",
        *([f"- replies read as an answer: {100 * record.parse_rate:.1f}%"] if record.parse_rate is not None else []),
        "",
        "Confidence intervals: 95% percentile bootstrap over templates "
        f"({record.settings.get('n_resamples')} resamples, seed {record.settings.get('seed')}); a group over fewer "
        "than 2 templates has none.",
    ]
    for metric in record.declared_metrics:
        block, d = record.results[metric.name], metric.decimals
        better = metric_direction(metric.higher_is_better)
        lines += ["", f"## {metric.title} ({better})"]
        overall = block.overall
        if overall is not None:  # a fill-in-the-blank run's scores are per group only
            shown = f"{fmt_value(overall.value, d)}** {fmt_ci(overall.ci, d)}"
            lines += ["", f"Overall: **{shown} over {overall.n} items."]
        lines += ["", *_rows(block.groups, d, record.groups.column)]
        head = block.headline
        if head:
            a, b = head.groups
            pv = head.p_value
            test = f", p = {pv:.3f} (sign-flip test over templates)" if pv is not None else ""
            lines += [
                "",
                f"{a} − {b}: **{fmt_value(head.gap, d)}** {fmt_ci(head.ci, d)} (paired by template){test}.",
            ]
        for column, stats in block.by.items():
            lines += ["", f"### by {column}", "", *_rows(stats, d, column)]
    if figure:
        lines += ["", f"![{_title(record)}]({figure})"]
    return "\n".join(lines) + "\n"


def _panel(ax: plt.Axes, stats: dict[str, GroupStat], labels: list[str], xlabel: str, ylabel: str) -> None:
    """One bar per label with its 95% CI, each hatched and coloured apart (readable in grayscale)."""
    for i, label in enumerate(labels):
        s = stats.get(label) or GroupStat(value=None, ci=None, n=0, n_clusters=0)
        colour, hatch = group_style(label, i)
        value = s.value if s.value is not None else 0.0
        err = None
        if s.ci:
            err = [[max(value - s.ci[0], 0.0)], [max(s.ci[1] - value, 0.0)]]
        bars = ax.bar(
            i, value, color=colour, hatch=hatch, edgecolor="black", label=f"{label} (n={s.n})", yerr=err, capsize=3
        )
        shown = "no data" if s.value is None else f"{value:.2f}"  # a zero is a bar of no height: say its value
        ax.bar_label(bars, labels=[shown], fontsize=7, padding=2)
    ax.set_xticks(range(len(labels)), labels, rotation=45 if len(labels) > 4 else 0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def metrics_figure(record: RunRecord) -> plt.Figure:
    """Per declared metric, one row of panels: the groups (with a legend), then one panel per breakdown column (e.g.
    the declared pronoun set), each bar with its 95% CI over templates."""
    metrics = record.declared_metrics
    breakdowns = record.groups.breakdowns
    widths = [1.0] + [1.6] * len(breakdowns)
    fig, axes = plt.subplots(
        len(metrics),
        1 + len(breakdowns),
        figsize=(4.2 + 6.0 * len(breakdowns), 3.8 * len(metrics)),
        squeeze=False,
        gridspec_kw={"width_ratios": widths},
    )
    order = record.groups.order
    for row, metric in zip(axes, metrics, strict=True):
        block = record.results[metric.name]
        _panel(row[0], block.groups, order, record.groups.column, metric.title)
        row[0].set_title(f"{metric.title} per {record.groups.column}")
        row[0].legend(fontsize=7, loc="best")
        for ax, column in zip(row[1:], breakdowns, strict=True):
            stats = block.by.get(column, {})
            _panel(ax, stats, list(stats), column, metric.title)
            ax.set_title(f"{metric.title} per {column}")
    fig.suptitle(_title(record), fontsize=10)
    fig.tight_layout()
    return fig


def write_metrics_report(out: Path, record: RunRecord, predictions: pd.DataFrame) -> list[Path]:
    """Write ``report.md`` and ``metrics.png`` into ``out`` (atomically); returns the paths."""
    figure = save_figure(metrics_figure(record), out / FIGURE)
    report = write_text(out / "report.md", render_metrics_report(record, FIGURE))
    return [report, figure]
