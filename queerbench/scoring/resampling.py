"""The one engine of per-group uncertainty: bootstrap replicates over templates and the sign-flip test of a gap, for
any per-group statistic.

Every task's per-group figures come from here: a fill-in-the-blank task's QueerBench score and its components
(:func:`queerbench.scoring.uncertainty.weighted_components`, a statistic of three sums) and a declared metric's
mean (:func:`mean_statistic`), so a CI or a p-value means the same in every task.

A *statistic* sees a group's items only through sums over units (templates): it is called as
``statistic(w, n, sums)`` with ``w`` a (B, U) matrix of unit weights (one row per replicate or swap pattern), ``n``
each row's number of items and ``sums`` each item column summed per unit, and returns its values by key, one per row
(None for a key it cannot compute). The exact value is the same call with one row of ones, so the value, its
replicates and its test statistic cannot disagree.

- The bootstrap (:func:`group_replicates`) resamples units with replacement (:func:`resample_weights`); every group
  of one replicate uses the same resampled units, so a gap's replicates are paired by template.
- The gap's test (:func:`sign_flip_p`) asks the same question as its interval, how far the gap moves when the
  templates change: each group's statistic is taken over its units' *shares* (sums over the group's size), and under
  the null hypothesis a unit's two shares are exchangeable, so each unit holding both groups swaps them with
  probability 1/2. Without units (each item its own), :func:`label_permutation_p` permutes the labels instead.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "MIN_PAIRED_TEMPLATES",
    "Statistic",
    "Units",
    "group_replicates",
    "label_permutation_p",
    "mean_statistic",
    "paired_templates",
    "percentile_ci",
    "resample_weights",
    "sign_flip_p",
    "sign_flip_share",
    "swap_patterns",
    "unit_sums",
]

Statistic = Callable[[np.ndarray, np.ndarray, Mapping[str, np.ndarray]], Mapping[str, "np.ndarray | None"]]
"""``statistic(w, n, sums)``: each key's values for the rows of unit weights ``w`` (see the module's docstring)."""

MIN_PAIRED_TEMPLATES = 6
"""The fewest templates holding both groups of a gap for the gap to get a CI: with T such templates the smallest
two-sided sign-flip p-value is 2 / 2^T, under 0.05 only from T = 6 on. With fewer, no test over templates can tell a
gap from chance, and a percentile interval over 2–5 templates only spans their own gaps (it would exclude 0 while
the test cannot), so the CI is ``None`` and the p-value says how little the templates can show."""


@dataclass(frozen=True)
class Units:
    """The resampling units of a set of items: each item's unit index (0 … ``t`` − 1) and the number of units."""

    index: np.ndarray
    t: int

    @classmethod
    def of(cls, ids: Any) -> Units:
        """The units of items labelled by ``ids`` (template ids; equal ids are one unit)."""
        _, index = np.unique(np.asarray(ids), return_inverse=True)
        return cls(index=index, t=int(index.max()) + 1 if len(index) else 0)


def mean_statistic(column: str) -> Statistic:
    """The statistic of a declared metric: the mean of ``column`` over the weighted items, under the key ``"mean"``."""

    def mean(w: np.ndarray, n: np.ndarray, sums: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        with np.errstate(invalid="ignore", divide="ignore"):  # a replicate without the group: NaN, dropped later
            return {"mean": (w @ sums[column]) / n}

    return mean


def resample_weights(t: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """``n_resamples`` bootstrap resamples of ``t`` units, one row each: how often each unit was drawn."""
    if t == 0:
        return np.zeros((0, 0))
    return rng.multinomial(t, np.full(t, 1.0 / t), size=n_resamples).astype(float)


def unit_sums(
    mask: np.ndarray, units: Units, columns: Mapping[str, np.ndarray | None]
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Per unit: how many items ``mask`` selects, and each column's sum over them (a ``None`` column is left out)."""
    counts = np.bincount(units.index[mask], minlength=units.t).astype(float)
    sums = {
        key: np.bincount(units.index[mask], weights=values[mask], minlength=units.t)
        for key, values in columns.items()
        if values is not None
    }
    return counts, sums


def group_replicates(
    weights: np.ndarray,
    units: Units,
    mask: np.ndarray,
    columns: Mapping[str, np.ndarray | None],
    statistic: Statistic,
) -> Mapping[str, np.ndarray | None]:
    """The bootstrap replicates of ``statistic`` over the items ``mask`` selects, one per row of ``weights``
    (:func:`resample_weights`): a replicate without the group is NaN (:func:`percentile_ci` drops it)."""
    counts, sums = unit_sums(mask, units, columns)
    return statistic(weights, weights @ counts, sums)


def paired_templates(labels: np.ndarray, clusters: np.ndarray, g1: str, g2: str) -> int:
    """How many clusters (templates) hold items of both ``g1`` and ``g2``."""
    both = set(clusters[labels == g1].tolist()) & set(clusters[labels == g2].tolist())
    return len(both)


def percentile_ci(values: np.ndarray) -> list[float] | None:
    """The 95% percentile interval of the finite replicates; ``None`` when there are none."""
    values = values[np.isfinite(values)]
    if len(values) == 0:
        return None
    lo, hi = np.percentile(values, [2.5, 97.5])
    return [float(lo), float(hi)]


def _two_sided(diffs: np.ndarray, observed: float) -> np.ndarray:
    """Which values of ``diffs`` are at least as far from 0 as ``observed`` (a relative tolerance for ties)."""
    return np.abs(diffs) >= abs(observed) - 1e-9 * max(1.0, abs(observed))


def swap_patterns(both: np.ndarray, t: int, n_perm: int, rng: np.random.Generator) -> tuple[np.ndarray, int | None]:
    """The sign-flip test's swap patterns over ``t`` templates, one row each (1: the template's two groups swap):
    every pattern of the templates in ``both`` when there are at most ``n_perm`` of them (the observed one, no swap,
    among them; draws ``None``: exact), else ``n_perm`` random ones (draws ``n_perm``)."""
    if 2 ** len(both) <= n_perm:
        pattern = np.array(list(itertools.product((0.0, 1.0), repeat=len(both))))
        n_draws = None
    else:
        pattern = rng.integers(0, 2, size=(n_perm, len(both))).astype(float)
        n_draws = n_perm
    swap = np.zeros((len(pattern), t))
    swap[:, both] = pattern
    return swap, n_draws


def sign_flip_share(diffs: np.ndarray, observed: float, n_draws: int | None) -> float:
    """The two-sided p-value from the gaps of :func:`swap_patterns`' patterns: the share as far from 0 as
    ``observed`` (exact), or (as extreme + 1) / (draws + 1)."""
    extreme = int(np.sum(_two_sided(diffs, observed)))
    return extreme / len(diffs) if n_draws is None else (extreme + 1) / (n_draws + 1)


def sign_flip_p(
    labels: np.ndarray,
    units: Units,
    columns: Mapping[str, np.ndarray | None],
    statistic: Statistic,
    key: str,
    pair: tuple[str, str],
    n_permutations: int,
    rng: np.random.Generator,
    observed: float,
) -> float | None:
    """Two-sided sign-flip p-value of the gap ``statistic[key](a) − statistic[key](b)`` over units (``observed``,
    unrounded).

    Each group's statistic is taken over its units' shares (a unit's share: the group's columns summed there, over
    the group's size); each unit holding both groups swaps their shares with probability 1/2 (a unit holding one
    group keeps its share). Every swap pattern is enumerated when there are at most ``n_permutations`` of them (an
    exact p-value), otherwise that many are drawn and p is (as extreme + 1) / (draws + 1). ``None`` when no unit
    holds both groups (nothing can be swapped) or no permutation is asked."""
    shares = []
    for g in pair:
        mask = labels == g
        counts, sums = unit_sums(mask, units, columns)
        size = max(int(mask.sum()), 1)
        shares.append((counts, {k: v / size for k, v in sums.items()}))
    both = np.flatnonzero((shares[0][0] > 0) & (shares[1][0] > 0))
    if len(both) == 0 or n_permutations < 1:
        return None
    swap, n_draws = swap_patterns(both, units.t, n_permutations, rng)
    stacked = {k: np.concatenate([shares[0][1][k], shares[1][1][k]]) for k in shares[0][1]}
    one = np.ones(len(swap))
    first = (np.hstack([1.0 - swap, swap]), one)  # g1 takes g2's share where a unit swaps
    return _gap_p(statistic, key, stacked, first, (np.hstack([swap, 1.0 - swap]), one), observed, n_draws)


def label_permutation_p(
    labels: np.ndarray,
    columns: Mapping[str, np.ndarray | None],
    statistic: Statistic,
    key: str,
    pair: tuple[str, str],
    n_permutations: int,
    rng: np.random.Generator,
    observed: float,
) -> float | None:
    """Two-sided permutation p-value of the gap when each item is its own unit: the labels of the two groups' items
    are permuted over all of them, ``n_permutations`` times; p is (as extreme + 1) / (permutations + 1). ``None``
    when no permutation is asked, as :func:`sign_flip_p`."""
    if n_permutations < 1:
        return None
    g1, g2 = pair
    sel = np.flatnonzero((labels == g1) | (labels == g2))
    is_g1 = labels[sel] == g1
    perm = np.argsort(rng.random((n_permutations, len(sel))), axis=1)
    m1 = is_g1[perm].astype(float)  # (B, n): permuted membership of g1 at each position
    kept = {k: v[sel] for k, v in columns.items() if v is not None}
    first, second = (m1, m1.sum(axis=1)), (1.0 - m1, (1.0 - m1).sum(axis=1))
    return _gap_p(statistic, key, kept, first, second, observed, n_permutations)


def _gap_p(
    statistic: Statistic,
    key: str,
    sums: Mapping[str, np.ndarray],
    first: tuple[np.ndarray, np.ndarray],
    second: tuple[np.ndarray, np.ndarray],
    observed: float,
    n_draws: int | None,
) -> float | None:
    """The p-value of the gaps ``statistic[key]`` under the ``(w, n)`` of the first group minus under the second's,
    one per relabelling (:func:`sign_flip_share`); ``None`` when the statistic has no such value."""
    own, other = statistic(*first, sums)[key], statistic(*second, sums)[key]
    if own is None or other is None:
        return None
    return sign_flip_share(own - other, observed, n_draws)
