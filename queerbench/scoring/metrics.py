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
from dataclasses import asdict, dataclass, field, fields
from typing import Any, cast

import numpy as np
import pandas as pd

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

__all__ = [
    "NO_GROUPS",
    "NO_ITEMS",
    "GroupStat",
    "Headline",
    "MetricResult",
    "MetricSpec",
    "ResultGroups",
    "group_metrics",
    "sign_flip_p",
]

MIN_CLUSTERS_FOR_CI = 2
"""Fewer clusters than this give no interval (one template resampled is always itself)."""
VALUE = "value"
"""The per-item column a metric's values are held under, for the engine's :func:`mean_statistic`."""
_MEAN = mean_statistic(VALUE)


@dataclass(frozen=True)
class MetricSpec:
    """One metric a task declares: for a ``requests`` task the per-item column it averages (``column``, numeric,
    e.g. 0/1 ``correct``), for a ``blanks`` task the per-group block of scores its scoring rules compute; its display
    ``title``, whether higher is better, and how many decimals reports print. The result record keeps each
    declaration beside the metric's results (:class:`MetricResult`)."""

    name: str
    column: str
    title: str
    higher_is_better: bool | None = True
    """Which way is better (a harm score: lower); None for a ``probes`` task's measurement that has no better
    direction (the SCM probes' Warmth and Competence ratings)."""
    decimals: int = 3

    @classmethod
    def from_json(cls, data: Any, where: str) -> MetricSpec:
        """A declaration as a result record stores it (a one-line ``ValueError`` for another shape)."""
        known = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or not {"name", "column", "title"} <= set(data) or set(data) - known:
            raise ValueError(f"{where}: a declared metric of another shape ({data!r}); {_REWRITE}")
        return cls(**data)


_REWRITE = "rerun the same command to rewrite it"


@dataclass(frozen=True)
class GroupStat:
    """One metric over one group's items: mean, 95% bootstrap CI over clusters (None when it cannot be had), the
    number of items and of clusters (templates) they come from."""

    value: float | None
    ci: list[float] | None
    n: int
    n_clusters: int

    @classmethod
    def from_json(cls, data: Any, where: str) -> GroupStat:
        """A group's statistics as a result record stores them (a one-line ``ValueError`` for another shape)."""
        if not isinstance(data, dict) or set(data) != {f.name for f in fields(cls)}:
            raise ValueError(f"{where}: group statistics of another shape ({data!r}); {_REWRITE}")
        return cls(**data)


@dataclass(frozen=True)
class Headline:
    """A task's headline comparison of one metric: the difference of two groups' means, its 95% interval paired by
    template (None over too few templates holding both) and the sign-flip test's p-value (None: not testable)."""

    groups: list[str]
    """The two groups, the gap read as the first minus the second."""
    gap: float
    ci: list[float] | None
    p_value: float | None

    @classmethod
    def from_json(cls, data: Any, where: str) -> Headline | None:
        """A headline as a result record stores it (None: the metric has none)."""
        if data is None:
            return None
        if (
            not isinstance(data, dict)
            or not {"groups", "gap"} <= set(data)
            or set(data) - {f.name for f in fields(cls)}
        ):
            raise ValueError(f"{where}: a headline comparison of another shape ({data!r}); {_REWRITE}")
        return cls(groups=list(data["groups"]), gap=data["gap"], ci=data.get("ci"), p_value=data.get("p_value"))


@dataclass(frozen=True)
class MetricResult:
    """One declared metric's results in a run: over every item (None where a run gives no overall value: a
    fill-in-the-blank run's scores are per group), per group in the task's order, per value of each breakdown
    column, and the task's headline comparison. A metric read from something other than the run's items says what
    (``read_from``, e.g. a local model's option log-probabilities) and by which requests (``request_type``)."""

    overall: GroupStat | None
    groups: dict[str, GroupStat]
    by: dict[str, dict[str, GroupStat]] = field(default_factory=dict)
    headline: Headline | None = None
    read_from: str | None = None
    request_type: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The block a result record stores (``read_from`` and ``request_type`` only where they are said)."""
        out: dict[str, Any] = {
            "overall": None if self.overall is None else asdict(self.overall),
            "groups": {g: asdict(s) for g, s in self.groups.items()},
            "by": {column: {v: asdict(s) for v, s in stats.items()} for column, stats in self.by.items()},
            "headline": None if self.headline is None else asdict(self.headline),
        }
        out.update({k: v for k, v in (("read_from", self.read_from), ("request_type", self.request_type)) if v})
        return out

    @classmethod
    def from_json(cls, data: Any, where: str) -> MetricResult:
        """A metric's block as a result record stores it (a one-line ``ValueError`` for another shape)."""
        if not isinstance(data, dict) or not {"overall", "groups"} <= set(data) or set(data) - _BLOCK_KEYS:
            raise ValueError(f"{where}: a metric's results of another shape; {_REWRITE}")
        by = data.get("by") or {}
        return cls(
            overall=None if data["overall"] is None else GroupStat.from_json(data["overall"], where),
            groups={str(g): GroupStat.from_json(s, where) for g, s in (data["groups"] or {}).items()},
            by={str(c): {str(v): GroupStat.from_json(s, where) for v, s in stats.items()} for c, stats in by.items()},
            headline=Headline.from_json(data.get("headline"), where),
            read_from=data.get("read_from"),
            request_type=data.get("request_type"),
        )

    def group(self, name: str) -> GroupStat:
        """The statistics of group ``name`` (a group the run has no block for: no items, no value)."""
        return self.groups.get(name) or NO_ITEMS


@dataclass(frozen=True)
class ResultGroups:
    """The groups a record's results are given for: the item column naming the group, the groups in report order,
    the column whose values are the clusters an interval resamples, the breakdown columns, the headline pair (None:
    the task declares none), and what the intervals are (a bootstrap over templates unless the task computes its
    own, e.g. a Student-t interval over ratings)."""

    column: str
    order: list[str]
    cluster: str = "template_id"
    breakdowns: list[str] = field(default_factory=list)
    headline: list[str] | None = None
    unit: str = "templates"
    """What an interval's clusters are (and, for a bootstrap over templates, what is counted is items)."""
    interval: str = "bootstrap"

    @classmethod
    def from_json(cls, data: Any, where: str) -> ResultGroups:
        """The groups as a result record stores them; a record written before ``unit`` and ``interval`` were stored
        has a bootstrap over templates, one without ``breakdowns`` or ``headline`` none (a one-line ``ValueError``
        for another shape)."""
        if data == {}:
            return NO_GROUPS
        known = {f.name for f in fields(cls)}
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("column"), str)
            or not isinstance(data.get("order"), list)
            or set(data) - known
        ):
            raise ValueError(f"{where}: the result record's groups have another shape ({data!r}); {_REWRITE}")
        values = {k: v for k, v in data.items() if v is not None or k == "headline"}
        return cls(**{**values, "breakdowns": list(values.get("breakdowns") or [])})

    def to_json(self) -> dict[str, Any]:
        """The groups as a result record stores them (``{}``: :data:`NO_GROUPS`)."""
        return {} if self == NO_GROUPS else asdict(self)


NO_GROUPS = ResultGroups(column="", order=[])
"""The groups of a record with no declared metric (a ``probes`` task that declares none): stored as ``{}``."""


_BLOCK_KEYS = {f.name for f in fields(MetricResult)}
NO_ITEMS = GroupStat(value=None, ci=None, n=0, n_clusters=0)
"""The statistics of no items: what a group without a block, or a run without an overall value, reads as."""


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
