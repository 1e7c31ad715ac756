"""The shared per-group mean and Student-t interval (queerbench.scoring.uncertainty.mean_ci) and the two tasks that
read it: the SCM probes' ratings and QueerGen's per-group scores keep the numbers they had before sharing it.

The literals below were computed with the two functions this one replaced (``mean_ci`` of tasks/scm/analysis.py and
of tasks/queergen/aggregate.py, run before their removal); the inputs are ones where the two half-width arithmetics
differ in the last bit, so each task's literal pins its own arithmetic.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from queerbench.scoring.uncertainty import MeanCI, mean_ci
from queerbench.tasks.queergen.aggregate import aggregate
from queerbench.tasks.scm.analysis import analyze


@pytest.mark.parametrize("values", [[1, 2, 3, 3, 3], [0.1, 0.2, 0.4], [-0.68, 0.47, -0.77], list(range(40))])
@pytest.mark.parametrize("arithmetic", ["scipy_sem", "t_sd_root_n"])
@pytest.mark.parametrize("level", [0.9, 0.95])
def test_the_interval_is_scipys_student_t_interval(values: list[float], arithmetic, level: float) -> None:
    x = np.asarray(values, dtype=float)
    lo, hi = stats.t.interval(level, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
    got = mean_ci(values, level=level, arithmetic=arithmetic)
    assert got.n == len(x) and got.mean == pytest.approx(x.mean(), rel=1e-15)
    assert got.std == pytest.approx(np.std(x, ddof=1), rel=1e-15)
    assert (got.lo, got.hi) == (pytest.approx(lo, rel=1e-12), pytest.approx(hi, rel=1e-12))
    assert got.half_width == pytest.approx((hi - lo) / 2, rel=1e-12)


def test_few_values_missing_values_and_a_constant_sample() -> None:
    assert mean_ci([]) == MeanCI(mean=None, n=0, std=None, half_width=None, lo=None, hi=None)
    assert mean_ci([None, math.nan]) == mean_ci([])
    assert mean_ci([4, None, math.nan]) == MeanCI(mean=4.0, n=1, std=None, half_width=None, lo=None, hi=None)
    assert mean_ci(np.array([3.0, np.nan, 5.0])) == mean_ci([3, 5])
    # every value equal: a zero-width interval at the mean, for both arithmetics
    assert mean_ci([3, 3], clip=(1.0, 5.0)) == MeanCI(mean=3.0, n=2, std=0.0, half_width=0.0, lo=3.0, hi=3.0)
    assert mean_ci([0.25] * 3, arithmetic="t_sd_root_n").half_width == 0.0


def test_clip_bounds_the_interval_to_the_scale() -> None:
    free = mean_ci([5, 5, 4])
    clipped = mean_ci([5, 5, 4], clip=(1.0, 5.0))
    assert free.hi is not None and free.hi > 5.0 and clipped.hi == 5.0
    assert clipped.lo == free.lo and clipped.half_width == free.half_width  # the half-width is the t interval's


def test_the_two_arithmetics_are_the_two_old_functions_bit_for_bit() -> None:
    # SCM's old function: t · s / sqrt(n), clipped to 1–5
    scm = mean_ci([1, 2, 3, 3, 3], clip=(1.0, 5.0), arithmetic="t_sd_root_n")
    assert (scm.mean, scm.lo, scm.hi, scm.n) == (2.4, 1.2894219579208828, 3.510578042079117, 5)
    other = mean_ci([1, 2, 3, 3, 3], clip=(1.0, 5.0), arithmetic="scipy_sem")
    assert (other.lo, other.hi) != (scm.lo, scm.hi)  # the literal tells the two apart
    # QueerGen's old function: scipy.stats.sem · t
    qg = mean_ci([-0.68, 0.47, -0.77], arithmetic="scipy_sem")
    assert (qg.mean, qg.half_width, qg.std) == (-0.3266666666666667, 1.7175316881254612, 0.6913995468130806)
    assert mean_ci([-0.68, 0.47, -0.77], arithmetic="t_sd_root_n").half_width != qg.half_width
    with pytest.raises(ValueError, match="arithmetic must be"):
        mean_ci([1, 2], arithmetic="normal")  # type: ignore[arg-type]


def _ratings(group: str, axis: str, ratings: list[int]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"task": "rating", "prompt_type": "rating_v1", "group": group, "axis": axis, "response": f"Rating: {r}"}
            | {"status": "ok"}
            for r in ratings
        ]
    )


def test_scm_ratings_keep_their_keys_and_numbers() -> None:
    free = analyze(_ratings("men", "Competence", [1, 2, 3, 3, 3]))["rating_free"]["men"]
    assert free["Competence"] == {"mean": 2.4, "lo": 1.2894219579208828, "hi": 3.510578042079117, "n": 5}
    assert free["Warmth"] == {"mean": None, "lo": None, "hi": None, "n": 0}
    one = analyze(_ratings("men", "Warmth", [4]))["rating_free"]["men"]["Warmth"]
    assert one == {"mean": 4.0, "lo": None, "hi": None, "n": 1}
    top = analyze(_ratings("men", "Warmth", [5, 5, 4]))["rating_free"]["men"]["Warmth"]
    assert top == {"mean": 4.666666666666667, "lo": 3.232449090083513, "hi": 5.0, "n": 3}


def test_queergen_group_scores_keep_their_keys_and_numbers() -> None:
    vader = {"a": [-0.68, 0.47, -0.77], "b": [0.5]}
    frame = pd.DataFrame([{"group": g, "words": ["w"], "vader": v} for g, vs in vader.items() for v in vs])
    res = aggregate(frame, config="default")
    expected = {"mean": -0.3266666666666667, "ci": 1.7175316881254612, "std": 0.6913995468130806, "n": 3}
    assert res["vader"]["a"] == expected
    assert res["vader"]["b"] == {"mean": 0.5, "ci": 0.0, "std": 0.0, "n": 1}
