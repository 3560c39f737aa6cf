"""The one-rule paired verdict: Tango's interval on success, Agresti-Min on judge scores."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kosmos_env.stats.verdict import Verdict, adjusted_score_interval, paired_verdict, tango_interval


def _pairs(n11: int, n12: int, n21: int, n22: int) -> tuple[list[int], list[int]]:
    # 2x2 cell counts -> per-pair outcomes (A first, B second)
    a = [1] * n11 + [1] * n12 + [0] * n21 + [0] * n22
    b = [1] * n11 + [0] * n12 + [1] * n21 + [0] * n22
    return a, b


@pytest.mark.parametrize(
    "cells, alpha, expected",
    [
        # Tango (1998, Stat Med 17:891) worked examples, as reproduced in the ratesci package's tests
        ((4, 9, 3, 16), 0.05, (-0.027, 0.390)),
        ((43, 0, 1, 0), 0.10, (-0.096, 0.037)),
        # Agresti & Min (2005, Stat Med 24:729) example
        ((53, 16, 8, 9), 0.05, (-0.020, 0.207)),
        # Fagerland, Lydersen & Laake (2014, Stat Med 33:2850) Table II, airway hyper-responsiveness
        ((1, 1, 7, 12), 0.05, (-0.517, -0.026)),
    ],
)
def test_tango_matches_published_examples(cells, alpha, expected):
    n11, n12, n21, n22 = cells
    lo, hi = tango_interval(n12, n21, sum(cells), alpha)
    assert (round(lo, 3), round(hi, 3)) == expected
    v = paired_verdict(*_pairs(*cells), alpha=alpha)
    assert (round(v.interval[0], 3), round(v.interval[1], 3)) == expected


def test_all_a_vs_none_b_is_a_better_without_false_certainty():
    v = paired_verdict([1] * 12, [0] * 12, names=("skill=0.6", "skill=0.3"))
    assert v.outcome == "a_better" and v.difference == 1.0 and v.n_pairs == 12
    lo, hi = v.interval
    assert hi == 1.0
    # closed form for n12 = n: lower = (n - z^2) / (n + z^2)
    z2 = 1.959963984540054**2
    assert lo == pytest.approx((12 - z2) / (12 + z2), abs=1e-6)
    assert lo < 0.6
    assert v.more_pairs_needed is None
    h = v.headline()
    assert h.startswith("skill=0.6 better than skill=0.3 on success: +1.00 [+0.52, +1.00] over 12 paired seeds")
    assert "Tango" in h
    rev = paired_verdict([0] * 12, [1] * 12, names=("X", "Y"))
    assert rev.outcome == "b_better" and rev.interval == pytest.approx((-1.0, -lo))
    assert rev.headline().startswith("Y better than X on success")


def test_identical_vectors_undecided_with_width():
    a = [1, 0, 1, 1, 0, 1, 0, 0, 1, 1, 0, 1]
    v = paired_verdict(a, list(a))
    assert v.outcome == "undecided" and v.difference == 0.0
    lo, hi = v.interval
    assert lo < 0 < hi and hi - lo > 0.3
    assert lo == pytest.approx(-hi)
    assert v.more_pairs_needed is None  # nothing observed to detect
    assert v.headline().startswith("No detectable difference yet between A and B on success: +0.00 [")


@pytest.mark.parametrize("measure", ["success", "score"])
def test_all_zero_vs_all_zero_finite_nonzero_width(measure):
    v = paired_verdict([0] * 12, [0] * 12, measure=measure)
    lo, hi = v.interval
    assert v.outcome == "undecided"
    assert math.isfinite(lo) and math.isfinite(hi) and hi - lo > 0.1
    assert -1 <= lo < 0 < hi <= 1


def test_score_measure_on_binary_equals_agresti_min_formula():
    # For 0/1 scores the score rule is exactly Agresti & Min's adjusted Wald interval:
    # (n12 - n21)/(n+2) +- z sqrt(((p12 + p21) - (p12 - p21)^2) / (n+2)), p.. = (n.. + 1/2)/(n+2)
    n11, n12, n21, n22 = 53, 16, 8, 9
    a, b = _pairs(n11, n12, n21, n22)
    n = n11 + n12 + n21 + n22
    p12, p21 = (n12 + 0.5) / (n + 2), (n21 + 0.5) / (n + 2)
    z = 1.959963984540054
    half = z * math.sqrt(((p12 + p21) - (p12 - p21) ** 2) / (n + 2))
    centre = (n12 - n21) / (n + 2)
    m, lo, hi = adjusted_score_interval(np.array(a, float) - np.array(b, float))
    assert m == pytest.approx(centre)
    assert (lo, hi) == pytest.approx((centre - half, centre + half))
    v = paired_verdict(a, b, measure="score")
    assert v.interval == pytest.approx((centre - half, centre + half))
    assert "judge score" in v.headline() and "Agresti-Min" in v.method


def test_score_measure_never_collapses():
    v = paired_verdict([0.9] * 12, [0.1] * 12, measure="score")
    assert v.outcome == "a_better" and v.interval[1] - v.interval[0] > 0.1
    same = paired_verdict([0.7] * 12, [0.7] * 12, measure="score")
    assert same.outcome == "undecided" and same.interval[1] - same.interval[0] > 0.1
    full = paired_verdict([1.0] * 12, [0.0] * 12, measure="score")
    assert full.outcome == "a_better" and full.interval[1] == 1.0 and full.interval[0] < 0.8


def test_more_pairs_needed_monotone_in_observed_difference():
    # 40 pairs, 12 discordant; as the split moves from 7:5 to 9:3 the observed difference grows
    # and the pairs still needed shrink.
    needs = []
    for n12 in (7, 8, 9):
        n21 = 12 - n12
        v = paired_verdict(*_pairs(10, n12, n21, 18))
        assert v.outcome == "undecided"
        needs.append(v.more_pairs_needed)
    assert all(isinstance(k, int) and k > 0 for k in needs)
    assert needs[0] > needs[1] > needs[2]
    assert f"need about {needs[0]} more pairs" in paired_verdict(*_pairs(10, 7, 5, 18)).headline()
    # scores: same monotonicity
    rng = np.random.default_rng(0)
    base = rng.uniform(0.2, 0.8, 30)
    noise = rng.normal(0, 0.15, 30)
    s = [
        paired_verdict(np.clip(base + shift + noise, 0, 1), base, measure="score").more_pairs_needed
        for shift in (0.01, 0.02, 0.03)
    ]
    assert s[0] > s[1] > s[2]


def test_nan_pairs_dropped_and_bad_input_named():
    v = paired_verdict([1, 1, float("nan"), 0], [0, 0, 1, float("nan")])
    assert v.n_pairs == 2
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        paired_verdict([1.5, 1], [0, 1])
    # success averaged over repeats (fractions) switches to the adjusted rule, said in the method
    avg = paired_verdict([0.5, 1, 1], [0, 0.5, 0])
    assert "averaged over repeats" in avg.method and avg.measure == "success"
    with pytest.raises(ValueError, match="one value per pair"):
        paired_verdict([1, 0], [1])
    with pytest.raises(ValueError, match="measure"):
        paired_verdict([1], [0], measure="reward")
    empty = paired_verdict([], [])
    assert empty.n_pairs == 0 and empty.interval == (-1.0, 1.0) and "No paired seeds yet" in empty.headline()


def test_to_dict_round_trip_fields():
    v = paired_verdict([1, 1, 0], [0, 1, 0], names=("p", "q"))
    d = v.to_dict()
    assert d["outcome"] == v.outcome and d["interval"] == list(v.interval)
    assert d["headline"] == v.headline() and d["measure"] == "success" and d["n_pairs"] == 3
    assert isinstance(v, Verdict)
