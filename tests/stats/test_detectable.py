"""Minimum detectable difference: analytic formulas by hand, resampling, separable pairs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kosmos_env.stats.detectable import (
    detectable_summary,
    mdd_paired,
    mdd_resampled,
    mdd_two_proportion,
    separable_pairs,
)

Z975 = 1.959963984540054  # z_{1 - 0.05/2}
Z80 = 0.8416212335729143  # z_{0.8}


def test_mdd_paired_hand_computation():
    d = np.array([1, 0, 0, 1, -1, 0, 1, 0, 0, 1], dtype=float)
    # mean 0.3; sum of squares about the mean = 10*var: values - 0.3 -> sd(ddof=1)
    sd = math.sqrt(sum((x - 0.3) ** 2 for x in d) / 9)
    assert sd == pytest.approx(0.6749485577105528)
    assert mdd_paired(d) == pytest.approx((Z975 + Z80) * sd / math.sqrt(10), abs=1e-12)
    assert mdd_paired(d) == pytest.approx(0.5980, abs=1e-4)  # 2.80159 * 0.67495 / 3.16228
    with pytest.raises(ValueError, match="at least 2"):
        mdd_paired([0.5])


def test_mdd_two_proportion_hand_computation():
    # p = 0.5, n = 100 per arm: (1.95996 + 0.84162) * sqrt(2 * 0.25 / 100) = 0.19810
    assert mdd_two_proportion(0.5, 100) == pytest.approx(2.801585218 * math.sqrt(0.005), abs=1e-9)
    assert mdd_two_proportion(0.5, 100) == pytest.approx(0.1981, abs=1e-4)
    # alpha 0.01 / power 0.9 -> (2.5758 + 1.2816)
    assert mdd_two_proportion(0.2, 50, alpha=0.01, power=0.9) == pytest.approx(
        (2.5758293035489 + 1.2815515655446) * math.sqrt(2 * 0.16 / 50), abs=1e-9
    )
    with pytest.raises(ValueError, match="alpha"):
        mdd_two_proportion(0.5, 10, alpha=0)


def test_mdd_resampled_agrees_with_analytic_and_shrinks_with_seeds():
    rng = np.random.default_rng(0)
    d = rng.choice([-1.0, 0.0, 1.0], p=[0.2, 0.5, 0.3], size=400)
    curve = mdd_resampled(d, n_resamples=4000, seed=1)
    assert sorted(curve) == [100, 200, 300, 400]  # never past the 400 units there are
    assert curve[400] == pytest.approx(mdd_paired(d), rel=0.06)
    assert curve[100] > curve[200] > curve[300] > curve[400]
    assert curve[100] == pytest.approx(2 * curve[400], rel=0.1)  # SE ~ 1/sqrt(n)


def test_mdd_curve_never_extends_past_the_campaigns_units():
    """The issue's case: a 48-unit campaign drew its MDD curve to 96 units. The default curve now
    ends at the units there are, and asking for more is refused with the limit named."""
    rng = np.random.default_rng(5)
    d = rng.choice([-1.0, 0.0, 1.0], p=[0.25, 0.4, 0.35], size=48)
    curve = mdd_resampled(d, n_resamples=500, seed=0)
    assert max(curve) == 48 and sorted(curve) == [12, 24, 36, 48]
    with pytest.raises(ValueError, match=r"\[96\] exceed the 48 per-seed differences"):
        mdd_resampled(d, sizes=[24, 96])
    # NaN units (a policy without a verdict there) are not units: the curve ends at the 40 left
    d[:8] = np.nan
    assert max(mdd_resampled(d, n_resamples=200, seed=0)) == 40
    # the campaign summary's curve ends at its units too, for every pair it could pick
    m = (rng.random((3, 48)) < np.array([[0.2], [0.5], [0.8]])).astype(float)
    s = detectable_summary(m, ["p", "q", "r"])
    assert s.resampled and max(s.resampled) <= s.n_seeds == 48


def test_pairing_beats_unpaired_when_seed_difficulty_dominates():
    rng = np.random.default_rng(3)
    easy = rng.random(200) < 0.5  # seed difficulty shared by both policies
    a = (easy | (rng.random(200) < 0.1)).astype(float)
    b = easy.astype(float)
    assert mdd_paired(a - b) < 0.6 * mdd_two_proportion((a.mean() + b.mean()) / 2, 200)


def test_separable_pairs_and_summary():
    rng = np.random.default_rng(4)
    rates = np.array([0.1, 0.5, 0.52, 0.9])
    m = (rng.random((4, 300)) < rates[:, None]).astype(float)
    tests, frac = separable_pairs(m, ["w", "x", "y", "z"])
    sep = {(t.a, t.b): t.separated for t in tests}
    assert len(tests) == 6
    assert not sep[("x", "y")]  # 2-point gap with 300 seeds: not separable
    assert sep[("w", "z")] and sep[("w", "x")] and sep[("y", "z")]
    assert frac == pytest.approx(sum(sep.values()) / 6)
    # Holm never separates more than uncorrected
    _, frac_none = separable_pairs(m, correction="none")
    assert frac_none >= frac
    # constant non-zero differences: separated; identical policies: not
    t2, f2 = separable_pairs(np.array([[1, 1, 1], [0, 0, 0], [0, 0, 0]], dtype=float))
    assert [t.separated for t in t2] == [True, True, False]
    s = detectable_summary(m, ["w", "x", "y", "z"])
    assert s.fraction_separable == frac
    assert s.n_seeds == 300 and 0 < s.paired_mdd_median < 0.2
    assert s.unpaired_mdd == pytest.approx(mdd_two_proportion(m.mean(), 300))
    assert 300 in s.resampled
