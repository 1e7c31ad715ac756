"""The statistics every request task's declared metrics get (queerbench.scoring.metrics): the gap's sign-flip test
against a brute-force recomputation by relabelling items, and its agreement with the interval's unit."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from queerbench.scoring.metrics import group_metrics, sign_flip_p


def _frame(seed: int, templates: int = 6) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(templates):
        for group, n in (("a", 2), ("b", 2)):  # equal sizes: swapping shares is swapping the items' labels
            for _ in range(n):
                rows.append(
                    {"template_id": t, "group": group, "correct": int(rng.random() < (0.7 if group == "a" else 0.4))}
                )
    return pd.DataFrame(rows)


def _brute_force_p(frame: pd.DataFrame) -> float:
    """Every way of swapping the two groups' labels inside each template (the items change sides), the pooled gap
    recomputed from the relabelled items each time; the share at least as far from 0 as the observed gap."""

    def gap(f: pd.DataFrame) -> float:
        return f.loc[f.group == "a", "correct"].mean() - f.loc[f.group == "b", "correct"].mean()

    observed, templates = gap(frame), sorted(frame["template_id"].unique())
    patterns = list(itertools.product((False, True), repeat=len(templates)))
    extreme = 0
    for pattern in patterns:
        f = frame.copy()
        for t, swap in zip(templates, pattern, strict=True):
            if swap:
                at = f.template_id == t
                f.loc[at, "group"] = f.loc[at, "group"].map({"a": "b", "b": "a"})
        extreme += abs(gap(f)) >= abs(observed) - 1e-9
    return extreme / len(patterns)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_gaps_sign_flip_p_equals_swapping_each_templates_shares_by_brute_force(seed: int) -> None:
    frame = _frame(seed)
    _, cl = np.unique(frame["template_id"], return_inverse=True)
    values = frame["correct"].to_numpy(dtype=float)
    p = sign_flip_p(values, frame["group"].to_numpy(), cl, 6, ("a", "b"), 1000, np.random.default_rng(0))
    assert p == pytest.approx(_brute_force_p(frame))
    result = group_metrics(
        frame, metrics=[("accuracy", "correct")], group_column="group", order=["a", "b"],
        cluster_column="template_id", headline=("a", "b"), n_resamples=200, n_permutations=1000,
    )  # fmt: skip
    head = result["accuracy"].headline
    assert head is not None and head.p_value == pytest.approx(p)
    assert head.ci is not None  # 6 paired templates: an interval too


def test_few_templates_give_no_interval_but_an_exact_p_and_drawn_flips_bound_it() -> None:
    frame = _frame(3, templates=4)
    result = group_metrics(
        frame, metrics=[("accuracy", "correct")], group_column="group", order=["a", "b"],
        cluster_column="template_id", headline=("a", "b"), n_resamples=200, n_permutations=1000,
    )  # fmt: skip
    head = result["accuracy"].headline
    assert head is not None and head.ci is None and head.p_value == pytest.approx(_brute_force_p(frame))
    _, cl = np.unique(frame["template_id"], return_inverse=True)
    drawn = sign_flip_p(
        frame["correct"].to_numpy(float), frame["group"].to_numpy(), cl, 4, ("a", "b"), 10, np.random.default_rng(0)
    )
    assert drawn is not None and 1 / 11 <= drawn <= 1  # 16 patterns > 10 draws: (extreme + 1) / (draws + 1)
    none = sign_flip_p(np.ones(2), np.array(["a", "b"]), np.array([0, 1]), 2, ("a", "b"), 100, np.random.default_rng(0))
    assert none is None  # no template holds both groups: nothing to swap


@pytest.mark.parametrize("seed", [0, 5])
def test_a_blanks_tasks_hurtlex_interval_is_the_declared_metric_engines_interval_of_the_same_values(seed: int) -> None:
    """One engine: the H of a fill-in-the-blank run (100 × the mean h_i, aggregate.compute) and a declared metric
    over the column 100·h_i (group_metrics) are one statistic, so with the same seed they get the same bootstrap
    interval over templates: same resamples, same replicates."""
    from queerbench.scoring.aggregate import ScoringOptions, compute
    from queerbench.scoring.hurtlex import KEY as HURTLEX

    rng = np.random.default_rng(seed)
    words = ["whore", "idiot", "kind", "nurse", "stupid", "happy"]
    n = 90
    predictions = [[str(w) for w in rng.choice(words, size=2)] for _ in range(n)]
    groups = [str(g) for g in rng.choice(["queer", "non-queer"], size=n)]
    templates = [int(t) for t in rng.integers(0, 9, size=n)]
    options = ScoringOptions(toxicity="none", n_bootstrap=400, n_permutations=0, seed=seed)
    result = compute(predictions, groups, template_ids=templates, options=options, return_per_sentence=True)
    frame = pd.DataFrame(
        {"group": groups, "template_id": templates, "h": 100 * result["per_sentence"][HURTLEX].to_numpy(float)}
    )
    stats = group_metrics(
        frame,
        metrics=[("H", "h")],
        group_column="group",
        order=["queer", "non-queer"],
        cluster_column="template_id",
        n_resamples=400,
        seed=seed,
    )
    for group in ("queer", "non-queer"):
        declared = stats["H"].groups[group]
        assert declared.value == pytest.approx(result[HURTLEX][group], rel=1e-12)
        assert declared.ci == pytest.approx(result["ci"][group][HURTLEX], rel=1e-12)
        assert declared.ci is not None and declared.ci[0] < declared.ci[1]
