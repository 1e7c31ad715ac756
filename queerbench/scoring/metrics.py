"""Per-group statistics of a task's declared metrics, computed once for every task that declares them.

A ``requests`` task (:mod:`queerbench.tasks.spec`) declares its metrics (each a per-item numeric column, e.g. 0/1
``correct``) and its groups (an item column, their order, the column whose values are the clusters a confidence
interval resamples — templates — and further columns to break each metric down by). For every metric, every group
and every breakdown value this module gives the mean over items, a 95% percentile bootstrap interval over clusters
(templates resampled with replacement, items kept with their template, as for the QueerBench score), and the counts
of items and clusters. The task's headline comparison (two groups) gets the difference of their means with a
bootstrap interval paired by template: both groups of one replicate use the same resampled templates; over fewer than
:data:`~queerbench.scoring.uncertainty.MIN_PAIRED_TEMPLATES` templates holding both groups it has no interval, as a
fill-in-the-blank task's gap. Its p-value is the same sign-flip test over templates (:func:`sign_flip_p`), so the
interval and the test ask one question.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from queerbench.scoring.uncertainty import MIN_PAIRED_TEMPLATES, percentile_ci, sign_flip_share, swap_patterns

__all__ = ["GroupStat", "group_metrics", "sign_flip_p"]

MIN_CLUSTERS_FOR_CI = 2
"""Fewer clusters than this give no interval (one template resampled is always itself)."""


@dataclass(frozen=True)
class GroupStat:
    """One metric over one group's items: mean, 95% bootstrap CI over clusters (None when it cannot be had), the
    number of items and of clusters (templates) they come from."""

    value: float | None
    ci: list[float] | None
    n: int
    n_clusters: int


def _replicates(values: np.ndarray, mask: np.ndarray, cl: np.ndarray, weights: np.ndarray, t: int) -> np.ndarray:
    """The bootstrap replicates of the mean of ``values[mask]``, one per row of cluster resample ``weights``."""
    counts = np.bincount(cl[mask], minlength=t).astype(float)
    sums = np.bincount(cl[mask], weights=values[mask], minlength=t)
    with np.errstate(invalid="ignore", divide="ignore"):  # a replicate without the group: NaN, dropped
        return (weights @ sums) / (weights @ counts)


def _stat(values: np.ndarray, mask: np.ndarray, cl: np.ndarray, weights: np.ndarray, t: int) -> GroupStat:
    n = int(mask.sum())
    n_clusters = int(np.unique(cl[mask]).size)
    if n == 0:
        return GroupStat(value=None, ci=None, n=0, n_clusters=0)
    ci = percentile_ci(_replicates(values, mask, cl, weights, t)) if n_clusters >= MIN_CLUSTERS_FOR_CI else None
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
    """Two-sided sign-flip p-value of the gap mean(a) − mean(b) over templates, the test a fill-in-the-blank task's
    gap gets (:func:`queerbench.scoring.uncertainty.permutation_p`): each group's mean is the sum of its templates'
    shares (the group's values summed there, over the group's size); under the null hypothesis a template's two
    shares are exchangeable, so each template holding both groups swaps them with probability 1/2. Every swap
    pattern is enumerated when there are at most ``n_permutations`` (exact), else that many are drawn and p is
    (as extreme + 1) / (draws + 1). ``None`` when no template holds both groups."""
    shares = []
    for g in pair:
        mask = labels == g
        counts = np.bincount(cl[mask], minlength=t)
        shares.append((counts, np.bincount(cl[mask], weights=values[mask], minlength=t) / max(int(mask.sum()), 1)))
    both = np.flatnonzero((shares[0][0] > 0) & (shares[1][0] > 0))
    if len(both) == 0 or n_permutations < 1:
        return None
    swap, draws = swap_patterns(both, t, n_permutations, rng)
    sa, sb = shares[0][1], shares[1][1]
    diffs = (1.0 - swap) @ sa + swap @ sb - ((1.0 - swap) @ sb + swap @ sa)
    return sign_flip_share(diffs, float(sa.sum() - sb.sum()), draws)


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
) -> dict[str, Any]:
    """The statistics of each ``(name, column)`` in ``metrics`` over ``frame``'s items.

    Returns ``{name: {"groups": {group: GroupStat-as-dict}, "by": {column: {value: ...}}, "overall": ...,
    "headline": {"groups": [a, b], "gap": a − b, "ci": [lo, hi] | None, "p_value": p | None} | None}}``; groups in ``order`` (a group
    without items has ``value`` None), breakdown values in order of first appearance. One set of cluster resamples
    (``n_resamples``, ``seed``) serves every metric and group, so intervals of one run are paired."""
    _, cl = np.unique(frame[cluster_column].to_numpy(), return_inverse=True)
    t = int(cl.max()) + 1 if len(cl) else 0
    rng = np.random.default_rng(seed)
    perm_rng = np.random.default_rng([seed, 1])  # the test's own draws: the CIs do not move with --permutations
    weights = rng.multinomial(t, np.full(t, 1.0 / t), size=n_resamples).astype(float) if t else np.zeros((0, 0))
    labels = frame[group_column].astype(str).to_numpy()
    everything = np.ones(len(frame), dtype=bool)
    out: dict[str, Any] = {}
    for name, column in metrics:
        values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
        if np.isnan(values).any():
            raise ValueError(f"metric {name!r}: column {column!r} holds values that are not numbers")
        block: dict[str, Any] = {
            "overall": asdict(_stat(values, everything, cl, weights, t)),
            "groups": {g: asdict(_stat(values, labels == g, cl, weights, t)) for g in order},
            "by": {
                by: {
                    str(v): asdict(_stat(values, frame[by].astype(str).to_numpy() == str(v), cl, weights, t))
                    for v in dict.fromkeys(frame[by].astype(str))
                }
                for by in breakdowns
            },
            "headline": None,
        }
        if headline is not None:
            a, b = headline
            ga, gb = block["groups"].get(a), block["groups"].get(b)
            if ga and gb and ga["value"] is not None and gb["value"] is not None:
                diff = _replicates(values, labels == a, cl, weights, t) - _replicates(
                    values, labels == b, cl, weights, t
                )
                paired = np.intersect1d(np.unique(cl[labels == a]), np.unique(cl[labels == b])).size
                enough = paired >= MIN_PAIRED_TEMPLATES  # as a blanks task's gap: fewer paired templates, no CI
                block["headline"] = {
                    "groups": [a, b],
                    "gap": ga["value"] - gb["value"],
                    "ci": percentile_ci(diff) if enough else None,
                    "p_value": sign_flip_p(values, labels, cl, t, (a, b), n_permutations, perm_rng),
                }
        out[name] = block
    return out
