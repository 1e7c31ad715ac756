"""The uncertainty of QueerBench group scores: cluster bootstrap CIs and within-template permutation tests.

Every figure comes from :func:`weighted_components` (Eq. 1–4 for weighted samples), so the exact score, its
bootstrap replicates and the permutation statistic cannot disagree. Templates are the clusters: a sentence set has
many sentences per template, which are not independent draws.
"""

from __future__ import annotations

import numpy as np

__all__ = ["bootstrap", "percentile_ci", "permutation_p", "qb_from_masks", "weighted_components"]


def weighted_components(
    w: np.ndarray, n: np.ndarray, a: np.ndarray, h: np.ndarray, p: np.ndarray | None
) -> dict[str, np.ndarray | None]:
    """Eq. 1–4 for weighted samples, one row of ``w`` per sample: ``w @ a`` sums the a_i it selects (sentences, or
    clusters with ``a`` summed per cluster) and ``n`` is each row's number of sentences. The exact scores, the
    bootstrap replicates and the permutation statistic all come from here, so they cannot disagree."""
    with np.errstate(invalid="ignore", divide="ignore"):  # a replicate without the group: NaN, dropped later
        A = np.abs(w @ a / n) * 20
        H = 100 * (w @ h) / n
        P = None if p is None else 100 * (w @ p) / n
    return {"afinn": A, "hurtlex": H, "toxicity": P, "queerbench": None if P is None else (A + H + P) / 3}


def bootstrap(
    labels: np.ndarray,
    clusters: np.ndarray,
    a: np.ndarray,
    h: np.ndarray,
    p: np.ndarray | None,
    order: list[str],
    n_boot: int,
    rng: np.random.Generator,
) -> dict[str, np.ndarray]:
    """Bootstrap over clusters (templates): per group and component, ``n_boot`` replicate values."""
    uniq, cl = np.unique(clusters, return_inverse=True)
    t = len(uniq)
    weights = rng.multinomial(t, np.full(t, 1.0 / t), size=n_boot).astype(float)  # (B, T) resample counts
    out: dict[str, np.ndarray] = {}
    for g in order:
        m = labels == g
        cnt = np.bincount(cl[m], minlength=t)
        sums = {
            k: None if v is None else np.bincount(cl[m], weights=v[m], minlength=t)
            for k, v in (("a", a), ("h", h), ("p", p))
        }
        comps = weighted_components(weights, weights @ cnt, sums["a"], sums["h"], sums["p"])
        out.update({f"{g}/{key}": values for key, values in comps.items() if values is not None})
    return out


def qb_from_masks(masks: np.ndarray, a: np.ndarray, h: np.ndarray, p: np.ndarray) -> np.ndarray:
    """QB of the sentences each row of ``masks`` selects."""
    return weighted_components(masks, masks.sum(axis=1), a, h, p)["queerbench"]


def permutation_p(
    labels: np.ndarray,
    clusters: np.ndarray,
    a: np.ndarray,
    h: np.ndarray,
    p: np.ndarray,
    g1: str,
    g2: str,
    n_perm: int,
    rng: np.random.Generator,
    observed: float,
) -> float:
    """Two-sided permutation p-value of QB(g1) − QB(g2), group labels shuffled within each template (block).

    ``None`` when no block holds both groups: then no permutation can move a label and the test says nothing.
    """
    sel = np.flatnonzero((labels == g1) | (labels == g2))
    mixed = [b for b in np.unique(clusters[sel]) if len({*labels[sel][clusters[sel] == b]}) == 2]
    if not mixed:
        return None
    order = sel[np.argsort(clusters[sel], kind="stable")]
    cl = clusters[order]
    _, block = np.unique(cl, return_inverse=True)
    is_g1 = labels[order] == g1
    aa, hh, pp = a[order], h[order], p[order]
    keys = rng.random((n_perm, len(order))) + block[None, :]  # sorting keeps blocks, shuffles within them
    perm = np.argsort(keys, axis=1)
    m1 = is_g1[perm].astype(float)  # (B, n): permuted membership of g1 at each position
    diffs = qb_from_masks(m1, aa, hh, pp) - qb_from_masks(1.0 - m1, aa, hh, pp)
    extreme = np.sum(np.abs(diffs) >= abs(observed) - 1e-12)
    return float((extreme + 1) / (n_perm + 1))


def percentile_ci(values: np.ndarray) -> list[float] | None:
    """The 95% percentile interval of the finite replicates; ``None`` when there are none."""
    values = values[np.isfinite(values)]
    if len(values) == 0:
        return None
    lo, hi = np.percentile(values, [2.5, 97.5])
    return [float(lo), float(hi)]
