"""A gap's CI and p-value answer one question: how far the gap moves when the templates change.

Both are over templates (the unit), with a template's two groups moving together (paired), of the gap itself
(QB(queer) − QB(non-queer)): the CI is the percentile interval of the gap over resampled templates, the p-value a
sign-flip test that swaps a template's two groups. So a 95% CI that excludes 0 and p < .05 go together, away from
the edge. Each case below is built so that the old pair (a bootstrap over templates beside a permutation of
sentences within templates) disagreed far from the edge.
"""

from __future__ import annotations

import numpy as np
import pytest

from queerbench.scoring.aggregate import ScoringOptions, compute

MIN_PAIRED_TEMPLATES = min(t for t in range(1, 20) if 2 / 2**t < 0.05)
"""The fewest templates at which a two-sided sign-flip test can give p < .05 (its smallest p is 2 / 2^T): 6."""


def counts_for(p: int) -> list[int]:
    """A toxicity-count vector (k = 1) with ``p`` attributes flagged."""
    return [1] * p + [0] * (5 - p)


def _gap(cells: list[tuple[int, str, str, int]], n: int = 1000, seed: int = 0) -> dict:
    """The queer − non-queer comparison of sentences given as (template, group, word, flags)."""
    r = compute(
        [[w] for _, _, w, _ in cells],
        [g for _, g, _, _ in cells],
        toxicity_counts=[counts_for(p) for *_, p in cells],
        template_ids=[t for t, *_ in cells],
        options=ScoringOptions(toxicity="precomputed", n_bootstrap=n, n_permutations=n, seed=seed),
    )
    return r["comparisons"]["queer - non-queer"]


def _excludes_zero(ci: list[float]) -> bool:
    return ci[0] > 0 or ci[1] < 0


def _far_from_the_edge(gap: dict) -> bool:
    """The CI's nearest end is at least a tenth of its width from 0, and p is not within .02 of .05."""
    lo, hi = gap["ci"]
    return min(abs(lo), abs(hi)) > 0.1 * (hi - lo) and abs(gap["p_value"] - 0.05) > 0.02


def test_a_gap_carried_by_one_template_is_no_evidence_either_way():
    """Ten templates (QueerGen has ten), twenty queer and ten non-queer sentences in each: one template gives every
    queer sentence four flags, the other nine differ by a flag one way or the other. Within that template the
    sentences differ far beyond chance (the old p was 1/1001), but over templates the gap rests on one template of
    ten: the CI spans 0, and so must the p-value say."""
    cells = []
    for t in range(10):
        for g, size in (("queer", 20), ("non-queer", 10)):
            # template 0: queer +4 flags; odd templates: queer +1 flag; even: non-queer +1
            flags = (4 if g == "queer" else 0) if t == 0 else int((g == "queer") == (t % 2 == 1))
            cells += [(t, g, "doctor", flags)] * size
    gap = _gap(cells)
    assert not _excludes_zero(gap["ci"]) and _far_from_the_edge(gap)
    assert gap["p_value"] >= 0.05


def test_a_gap_from_how_groups_fill_templates_gets_a_small_p_with_its_ci_off_zero():
    """Twenty templates, both groups identical within each, but queer sentences fill the harmful templates three to
    one and non-queer ones the harmless: the gap is real over templates (every resample keeps it above 0), while
    shuffling labels within a template never moved it (the old p was 1)."""
    cells = []
    for t in range(20):
        harmful = t < 10
        word, flags = ("dog", 1) if harmful else ("doctor", 0)
        for g, size in (("queer", 3 if harmful else 1), ("non-queer", 1 if harmful else 3)):
            cells += [(t, g, word, flags)] * size
    gap = _gap(cells)
    assert gap["diff"] > 0 and _excludes_zero(gap["ci"]) and _far_from_the_edge(gap)
    assert gap["p_value"] < 0.05


def test_too_few_templates_give_no_ci_and_no_small_p():
    """Two templates (``eval --limit 2``), queer higher in both: a percentile interval over two templates only spans
    their two gaps, so it excluded 0 whatever the within-template test said (an eval's gap 1.99 [0.87, 3.11] had
    p = .832). With fewer than MIN_PAIRED_TEMPLATES templates no sign-flip test can reach p < .05, so there is no
    CI and p says the templates cannot tell."""
    rng = np.random.default_rng(1)
    cells = []
    for t in range(2):
        for g in ("queer", "non-queer"):
            cells += [(t, g, "doctor", int(rng.integers(0, 3)) + (g == "queer") * (t + 1)) for _ in range(15)]
    gap = _gap(cells)
    assert gap["diff"] > 0
    assert gap["ci"] is None
    assert gap["p_value"] >= 2 / 2**2  # two of the four swap patterns are as extreme as the observed one


def test_a_template_short_of_the_minimum_still_has_a_ci_at_the_minimum():
    """The rule is the templates holding both groups: MIN_PAIRED_TEMPLATES of them give a CI."""
    cells = [
        (t, g, "doctor", int(g == "queer") + t % 2) for t in range(MIN_PAIRED_TEMPLATES) for g in ("queer", "non-queer")
    ]
    assert _gap(cells)["ci"] is not None
    assert _gap(cells[2:])["ci"] is None  # the first template dropped: one short


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_clear_gap_gets_a_ci_off_zero_and_a_small_p(seed: int):
    """Thirty templates of varied words and flags; in each, queer sentences get one more flag on average."""
    rng = np.random.default_rng(seed)
    vocab = ["doctor", "dog", "hero", "whore", "outstanding"]
    cells = []
    for t in range(30):
        word = vocab[rng.integers(len(vocab))]
        for g in ("queer", "non-queer"):
            cells += [(t, g, word, min(5, int(rng.integers(0, 3)) + (g == "queer"))) for _ in range(6)]
    gap = _gap(cells, seed=seed)
    assert gap["diff"] > 0 and _excludes_zero(gap["ci"]) and gap["p_value"] < 0.01


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_gap_gets_a_ci_across_zero_and_a_large_p(seed: int):
    """The same thirty templates with no group difference at all: both measures say so."""
    rng = np.random.default_rng(seed)
    vocab = ["doctor", "dog", "hero", "whore", "outstanding"]
    cells = []
    for t in range(30):
        word = vocab[rng.integers(len(vocab))]
        cells += [(t, g, word, int(rng.integers(0, 3))) for g in ("queer", "non-queer") for _ in range(6)]
    gap = _gap(cells, seed=seed)
    assert (not _excludes_zero(gap["ci"])) == (gap["p_value"] >= 0.05)
