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
from queerbench.reporting.record import RunRecord

__all__ = ["FIGURE", "render_metrics_report", "write_metrics_report"]

FIGURE = "metrics.png"


def _fmt(value: float | None, decimals: int) -> str:
    return "n/a" if value is None else f"{value:.{decimals}f}"


def _ci(ci: list[float] | None, decimals: int) -> str:
    return "—" if not ci else f"[{ci[0]:.{decimals}f}, {ci[1]:.{decimals}f}]"


def _rows(stats: dict[str, dict[str, Any]], decimals: int, label: str) -> list[str]:
    lines = [f"| {label} | value | 95% CI | items | templates |", "|---|---|---|---|---|"]
    for name, s in stats.items():
        lines.append(
            f"| {name} | {_fmt(s['value'], decimals)} | {_ci(s['ci'], decimals)} | {s['n']} | {s['n_clusters']} |"
        )
    return lines


def _title(record: RunRecord) -> str:
    limit = record.settings.get("limit")
    scope = "all templates" if limit is None else f"first {limit} templates"
    return f"{model_label(record.model)} · {record.task} · {record.method} ({record.request_type}) · {scope}"


def render_metrics_report(record: RunRecord, figure: str | None = FIGURE) -> str:
    """The markdown report of a :class:`~queerbench.run.record.RunRecord`."""
    lines = [
        f"# {record.benchmark}: {record.task}",
        "",
        f"{_title(record)}. {record.n_items} items.",
        "",
        f"- signature: `{record.signature}`",
        f"- model fingerprint: `{record.model_fingerprint}`",
        f"- backend: `{record.backend}`",
        "",
        "Confidence intervals: 95% percentile bootstrap over templates "
        f"({record.settings.get('n_resamples')} resamples, seed {record.settings.get('seed')}); a group over fewer "
        "than 2 templates has none.",
    ]
    for metric in record.declared_metrics:
        block, d = record.results[metric["name"]], int(metric["decimals"])
        better = "higher is better" if metric["higher_is_better"] else "lower is better"
        lines += ["", f"## {metric['title']} ({better})", ""]
        overall = block["overall"]
        lines.append(
            f"Overall: **{_fmt(overall['value'], d)}** {_ci(overall['ci'], d)} over {overall['n']} items.",
        )
        lines += ["", *_rows(block["groups"], d, record.groups["column"])]
        head = block.get("headline")
        if head:
            a, b = head["groups"]
            lines += ["", f"{a} − {b}: **{_fmt(head['gap'], d)}** {_ci(head['ci'], d)} (paired by template)."]
        for column, stats in block["by"].items():
            lines += ["", f"### by {column}", "", *_rows(stats, d, column)]
    if figure:
        lines += ["", f"![{_title(record)}]({figure})"]
    return "\n".join(lines) + "\n"


def metrics_figure(record: RunRecord) -> plt.Figure:
    """One panel per declared metric: each group's value with its 95% CI, hatched per group."""
    metrics = record.declared_metrics
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.5 * len(metrics), 3.6), squeeze=False)
    order = record.groups["order"]
    for ax, metric in zip(axes[0], metrics, strict=True):
        groups = record.results[metric["name"]]["groups"]
        for i, group in enumerate(order):
            s = groups.get(group) or {"value": None, "ci": None, "n": 0}
            colour, hatch = group_style(group, i)
            value = s["value"] if s["value"] is not None else 0.0
            err = None
            if s["ci"]:
                err = [[max(value - s["ci"][0], 0.0)], [max(s["ci"][1] - value, 0.0)]]
            ax.bar(i, value, color=colour, hatch=hatch, edgecolor="black", label=f"{group} (n={s['n']})", yerr=err)
        ax.set_xticks(range(len(order)), order)
        ax.set_xlabel(record.groups["column"])
        ax.set_ylabel(metric["title"])
        ax.set_title(metric["title"])
        ax.legend(fontsize=8, loc="best")
    fig.suptitle(_title(record), fontsize=10)
    fig.tight_layout()
    return fig


def write_metrics_report(out: Path, record: RunRecord, predictions: pd.DataFrame) -> list[Path]:
    """Write ``report.md`` and ``metrics.png`` into ``out`` (atomically); returns the paths."""
    figure = save_figure(metrics_figure(record), out / FIGURE)
    report = write_text(out / "report.md", render_metrics_report(record, FIGURE))
    return [report, figure]
