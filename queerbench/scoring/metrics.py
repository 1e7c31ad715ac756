"""Per-group statistics of a task's declared metrics, computed once for every task that declares them.

A ``requests`` task (:mod:`queerbench.tasks.spec`) declares its metrics (each a per-item numeric column, e.g. 0/1
``correct``) and its groups (an item column, their order, the column whose values are the clusters a confidence
interval resamples — templates — and further columns to break each metric down by). For every metric, every group
and every breakdown value this module gives the mean over items, a 95% percentile bootstrap interval over clusters
(templates resampled with replacement, items kept with their template), and the counts of items and clusters. The
resamples and the test are the shared engine's (:mod:`queerbench.scoring.resampling`), the one the QueerBench score's
intervals come from, with the mean as the statistic. The task's headline comparison (two groups) gets the
difference of their means with a bootstrap interval paired by template: both groups of one replicate use the same
resampled templates; over fewer than :data:`~queerbench.scoring.resampling.MIN_PAIRED_TEMPLATES` templates holding
both groups it has no interval, as a fill-in-the-blank task's gap. Its p-value is the same sign-flip test over
templates (:func:`sign_flip_p`), so the interval and the test ask one question.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
import pandas as pd

from queerbench.scoring.metric_results import GroupStat, Headline, MetricResult
from queerbench.scoring.resampling import (
    MIN_PAIRED_TEMPLATES,
    Units,
    group_replicates,
    mean_statistic,
    percentile_ci,
    resample_weights,
    unit_sums,
)
from queerbench.scoring.resampling import sign_flip_p as _sign_flip_p

__all__ = ["group_metrics", "sign_flip_p"]

MIN_CLUSTERS_FOR_CI = 2
"""Fewer clusters than this give no interval (one template resampled is always itself)."""
VALUE = "value"
"""The per-item column a metric's values are held under, for the engine's :func:`mean_statistic`."""
_MEAN = mean_statistic(VALUE)


def _replicates(values: np.ndarray, mask: np.ndarray, units: Units, weights: np.ndarray) -> np.ndarray:
    """The bootstrap replicates of the mean of ``values[mask]``, one per row of cluster resample ``weights``."""
    return cast(np.ndarray, group_replicates(weights, units, mask, {VALUE: values}, _MEAN)["mean"])


def _stat(values: np.ndarray, mask: np.ndarray, units: Units, weights: np.ndarray) -> GroupStat:
    n = int(mask.sum())
    n_clusters = int(np.unique(units.index[mask]).size)
    if n == 0:
        return GroupStat(value=None, ci=None, n=0, n_clusters=0)
    ci = percentile_ci(_replicates(values, mask, units, weights)) if n_clusters >= MIN_CLUSTERS_FOR_CI else None
    return GroupStat(value=float(values[mask].mean()), ci=ci, n=n, n_clusters=n_clusters)


def sign_flip_p(
    values: np.ndarray,
    labels: np.ndarray,
    cl: np.ndarray,
    t: int,
    pair: tuple[str, str],
    n_permutations: int,
    rng: np.random.Generator,
) -> float | None:
    """Two-sided sign-flip p-value of the gap mean(a) − mean(b) over templates (``cl``: each item's template index,
    0 … ``t`` − 1), the engine's test (:func:`queerbench.scoring.resampling.sign_flip_p`) of the mean, which a
    fill-in-the-blank task's gap gets too: each group's mean is the sum of its templates' shares (the group's values
    summed there, over the group's size); under the null hypothesis a template's two shares are exchangeable, so each
    template holding both groups swaps them with probability 1/2. Every swap pattern is enumerated when there are at
    most ``n_permutations`` (exact), else that many are drawn and p is (as extreme + 1) / (draws + 1). ``None`` when
    no template holds both groups."""
    units = Units(index=np.asarray(cl), t=t)
    columns = {VALUE: values}
    observed = 0.0
    for sign, g in ((1.0, pair[0]), (-1.0, pair[1])):
        mask = labels == g
        observed += sign * float((unit_sums(mask, units, columns)[1][VALUE] / max(int(mask.sum()), 1)).sum())
    return _sign_flip_p(labels, units, columns, _MEAN, "mean", pair, n_permutations, rng, observed)


def group_metrics(
    frame: pd.DataFrame,
    *,
    metrics: Sequence[tuple[str, str]],
    group_column: str,
    order: Sequence[str],
    cluster_column: str,
    breakdowns: Sequence[str] = (),
    headline: tuple[str, str] | None = None,
    n_resamples: int = 1000,
    n_permutations: int = 1000,
    seed: int = 0,
) -> dict[str, MetricResult]:
    """The statistics of each ``(name, column)`` in ``metrics`` over ``frame``'s items, by name.

    Each :class:`MetricResult` holds every item's, each group's in ``order`` (a group without items has ``value``
    None) and each breakdown value's (in order of first appearance) statistics, and the ``headline`` pair's gap.
    One set of cluster resamples (``n_resamples``, ``seed``) serves every metric and group, so intervals of one run
    are paired."""
    units = Units.of(frame[cluster_column].to_numpy())
    rng = np.random.default_rng(seed)
    perm_rng = np.random.default_rng([seed, 1])  # the test's own draws: the CIs do not move with --permutations
    weights = resample_weights(units.t, n_resamples, rng)
    labels = frame[group_column].astype(str).to_numpy()
    everything = np.ones(len(frame), dtype=bool)
    out: dict[str, MetricResult] = {}
    for name, column in metrics:
        values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
        if np.isnan(values).any():
            raise ValueError(f"metric {name!r}: column {column!r} holds values that are not numbers")
        groups = {g: _stat(values, labels == g, units, weights) for g in order}
        by = {
            by: {
                str(v): _stat(values, frame[by].astype(str).to_numpy() == str(v), units, weights)
                for v in dict.fromkeys(frame[by].astype(str))
            }
            for by in breakdowns
        }
        head = None
        if headline is not None:
            a, b = headline
            ga, gb = groups.get(a), groups.get(b)
            if ga is not None and gb is not None and ga.value is not None and gb.value is not None:
                diff = _replicates(values, labels == a, units, weights) - _replicates(
                    values, labels == b, units, weights
                )
                paired = np.intersect1d(np.unique(units.index[labels == a]), np.unique(units.index[labels == b])).size
                enough = paired >= MIN_PAIRED_TEMPLATES  # as a blanks task's gap: fewer paired templates, no CI
                head = Headline(
                    groups=[a, b],
                    gap=ga.value - gb.value,
                    ci=percentile_ci(diff) if enough else None,
                    p_value=sign_flip_p(values, labels, units.index, units.t, (a, b), n_permutations, perm_rng),
                )
        out[name] = MetricResult(overall=_stat(values, everything, units, weights), groups=groups, by=by, headline=head)
    return out
