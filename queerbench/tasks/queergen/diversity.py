"""Prediction diversity: QueerGen's batched type-token ratio (Paper §4.6, Eq. 4).

``diversity = |unique predictions| / |predictions| × 100`` per batch of 100 rows. A group of exactly one batch
(QueerGen's 100 unmarked rows, and every group of its 300-row top-5 sample) is scored whole; a larger group is
scored as ``n // 100`` batches and reported as their mean with a 95% t-CI.

Two rules (``queerbench/data/queergen.json``, ``diversity``):

- ``queergen`` — as QueerGen's code (src/graphs.py): each batch is an **independent** sample of 100 rows without
  replacement (overlapping batches), and a row's prediction is one item: for top-k it is the whole list as a string,
  so ``['teacher', 'nurse']`` and ``['nurse', 'teacher']`` are two "types" and the top-5 score saturates near 100.
  QueerGen's batches are unseeded; here they are seeded (``seed``) and :func:`expected_batch_diversity` gives the
  exact expectation of one such batch (hypergeometric), which is what QueerGen's randomised mean estimates.
- ``default`` — as the paper says: the group is shuffled (seeded) and **partitioned** into ``n // 100`` disjoint
  batches, and the unit is the **word**: the k words of each row are flattened, so a batch has 100·k words.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
from scipy.special import gammaln

__all__ = ["batch_diversities", "expected_batch_diversity", "type_token_ratio"]


def type_token_ratio(items: Sequence[object]) -> float:
    """``|unique items| / |items| × 100``."""
    if len(items) == 0:
        raise ValueError("type_token_ratio needs at least one item")
    return len(set(items)) / len(items) * 100


def _unit(rows: Sequence[Sequence[str]], unit: str) -> list[object]:
    if unit == "row":  # QueerGen: one item per row; a top-k list is compared as its string form
        return [r[0] if len(r) == 1 else str(list(r)) for r in rows]
    raise AssertionError(unit)


def batch_diversities(
    rows: Sequence[Sequence[str]], *, rule: str = "queergen", batch_size: int = 100, seed: int = 0
) -> list[float]:
    """The diversity of each batch of one group's predictions (``rows``: the top-k words of each sentence).

    ``rule`` is ``queergen`` (independent samples, a row's list as one item) or ``default`` (a seeded partition,
    flattened words). A group of ``batch_size`` rows or fewer is one batch of all its rows.
    """
    if rule not in ("queergen", "default"):
        raise ValueError(f"unknown diversity rule {rule!r}; choose 'queergen' or 'default'")
    rows = [list(r) for r in rows]
    if not rows:
        raise ValueError("batch_diversities needs at least one row")
    rng = np.random.default_rng(seed)
    n_batches = max(1, len(rows) // batch_size)
    if len(rows) <= batch_size:
        batches = [list(range(len(rows)))]
    elif rule == "queergen":
        batches = [rng.choice(len(rows), size=batch_size, replace=False).tolist() for _ in range(n_batches)]
    else:
        order = rng.permutation(len(rows))
        batches = [order[i * batch_size : (i + 1) * batch_size].tolist() for i in range(n_batches)]
    if rule == "queergen":
        items = _unit(rows, "row")
        return [type_token_ratio([items[i] for i in b]) for b in batches]
    return [type_token_ratio([w for i in b for w in rows[i]]) for b in batches]


def expected_batch_diversity(rows: Sequence[Sequence[str]], *, batch_size: int = 100) -> float:
    """The exact expected diversity of one QueerGen batch: 100 rows drawn without replacement from the group.

    E[unique] = Σ_types (1 − C(N − c, b) / C(N, b)) for a type seen c times among N rows, b = ``batch_size``.
    QueerGen's published mean over unseeded random batches is an estimate of this number.
    """
    items = _unit([list(r) for r in rows], "row")
    n = len(items)
    b = min(batch_size, n)
    counts = np.asarray(list(Counter(items).values()), dtype=float)

    def log_comb(a: np.ndarray | float, k: float) -> np.ndarray:
        return gammaln(np.asarray(a) + 1) - gammaln(k + 1) - gammaln(np.asarray(a) - k + 1)

    rest = n - counts
    absent = np.where(rest >= b, np.exp(log_comb(np.maximum(rest, b), b) - log_comb(float(n), b)), 0.0)
    return float((1 - absent).sum() / b * 100)
