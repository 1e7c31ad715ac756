"""A fill-in-the-blank run's result record: the blocks its scoring rules computed, read through its declared metrics.

A ``blanks`` task declares its metrics as blocks of its scores (the QueerBench score and its A, H and P
components: :data:`~queerbench.scoring.aggregate.SCORE_BLOCKS`); this module turns a finished run's scores into
the typed record a request run writes (:class:`~queerbench.reporting.record.RunRecord`, ``kind`` ``blanks``): per
declared metric its per-group value, CI, count and template count, and the task's headline gap on the block whose
gaps were tested. The blocks readers have always read stay beside it in ``scores.json`` (the record's ``extra``),
so the numbers are the same numbers, once.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pandas as pd

from queerbench.base.redact import redact_url
from queerbench.reporting.record import RECORD_KINDS, RunRecord
from queerbench.reporting.rows import toxicity_label
from queerbench.run.options import RunOptions
from queerbench.scoring.aggregate import GAP_BLOCK
from queerbench.scoring.metric_results import GroupStat, Headline, MetricResult, ResultGroups
from queerbench.tasks import Task

__all__ = ["blanks_record"]

BLANKS = RECORD_KINDS[1]


def _templates(predictions: pd.DataFrame) -> dict[str, int]:
    """How many templates each group's sentences come from (the CIs' resampling units)."""
    if "template_id" not in predictions or "group" not in predictions:
        return {}
    return {str(g): int(n) for g, n in predictions.groupby("group")["template_id"].nunique().items()}


def _results(task: Task, document: dict[str, Any], predictions: pd.DataFrame) -> dict[str, MetricResult]:
    """Per declared metric: its block's value per group with CI, n and template count, and the headline gap."""
    ci, n, templates = document.get("ci") or {}, document.get("n") or {}, _templates(predictions)
    pair = task.headline_gap if task.declares_headline_gap else None
    tested = (document.get("comparisons") or {}).get(" - ".join(pair)) if pair else None
    results: dict[str, MetricResult] = {}
    for metric in task.spec.metrics:
        groups = {
            g: GroupStat(
                value=value,
                ci=(ci.get(g) or {}).get(metric.column),
                n=int(n.get(g, 0)),
                n_clusters=templates.get(g, 0),
            )
            for g, value in (document.get(metric.column) or {}).items()
        }
        headline = None
        if pair and tested and metric.column == GAP_BLOCK:
            headline = Headline(
                groups=list(pair), gap=tested["diff"], ci=tested.get("ci"), p_value=tested.get("p_value")
            )
        results[metric.name] = MetricResult(overall=None, groups=groups, by={}, headline=headline)
    return results


def blanks_record(
    task: Task,
    options: RunOptions,
    document: dict[str, Any],
    predictions: pd.DataFrame,
    meta: dict[str, Any],
    fingerprint: dict[str, Any] | None,
    *,
    reused: bool,
    timings: dict[str, float],
) -> RunRecord:
    """The record of a blanks run of ``task`` with ``options``, whose ``scores.json`` blocks are ``document``: provenance, the declared metrics' per-group results, and the
    document itself as the record's ``extra`` (written beside the record's fields)."""
    settings = {
        k: redact_url(v) if k == "endpoint" and v else v
        for k, v in options.record().items()
        if k not in ("toxicity_kwargs", "model", "method", "config")
    }
    settings["k"] = document.get("k", options.top_k)
    settings["toxicity_label"] = toxicity_label(document.get("scorers"))
    overall = (document.get("generation") or {}).get("overall") or {}
    parse_rate = overall.get("parse_rate")
    return RunRecord(
        task=task.name,
        benchmark=task.benchmark,
        method=str(options.method),
        request_type=task.request_type(str(options.method)),
        model=str(options.model),
        model_fingerprint=dict(fingerprint or meta.get("fingerprint") or {}),
        signature=str(document.get("signature") or ""),
        settings=settings,
        declared_metrics=list(task.spec.metrics),
        groups=ResultGroups(
            column="group",
            order=list(document.get("n") or {}),
            cluster="template_id",
            headline=list(task.headline_gap) if task.declares_headline_gap else None,
        ),
        results=_results(task, document, predictions),
        n_items=len(predictions),
        backend={k: meta.get(k) for k in ("device", "dtype") if meta.get(k) is not None},
        timings_s=dict(timings),
        reused_predictions=reused,
        parse_rate=None if parse_rate is None else float(parse_rate),
        finished=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        kind=BLANKS,
        extra=document,
    )
