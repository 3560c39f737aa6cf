"""Split-half repeatability and the Spearman-Brown correction."""

from __future__ import annotations

import numpy as np
import pytest

from kosmos_env.stats.repeatability import spearman_brown, split_half


def test_spearman_brown_formula():
    # r_full = 2 r / (1 + r): r = 0.5 -> 2/3, r = 0.6 -> 0.75, r = 0 -> 0, r = 1 -> 1
    assert spearman_brown(0.5) == pytest.approx(2 / 3)
    assert spearman_brown(0.6) == pytest.approx(0.75)
    assert spearman_brown(0.0) == 0.0 and spearman_brown(1.0) == 1.0
    # general length factor k: k r / (1 + (k - 1) r); r = 0.5, k = 3 -> 0.75
    assert spearman_brown(0.5, factor=3) == pytest.approx(0.75)
    np.testing.assert_allclose(spearman_brown(np.array([0.2, -0.5])), [0.4 / 1.2, -1.0 / 0.5])
    assert spearman_brown(-1.0) == -1.0


def test_split_half_separated_policies_are_repeatable():
    rng = np.random.default_rng(0)
    rates = np.linspace(0.05, 0.95, 6)
    m = (rng.random((6, 400)) < rates[:, None]).astype(float)
    res = split_half(m, n_splits=300, seed=1)
    assert res.median > 0.9 and res.half_size == 200
    assert res.corrected_median >= res.median
    # corrected values are exactly the Spearman-Brown transform of the raw ones
    ok = ~np.isnan(res.values)
    np.testing.assert_allclose(res.corrected[ok], 2 * res.values[ok] / (1 + res.values[ok]))
    assert res.corrected_median == pytest.approx(np.median(res.corrected[ok]))


def test_split_half_noise_policies_are_not_repeatable():
    rng = np.random.default_rng(1)
    m = (rng.random((6, 40)) < 0.5).astype(float)  # all policies identical in truth
    res = split_half(m, metric="kendall", n_splits=500, seed=2)
    assert abs(res.median) < 0.35
    assert res.q05 < 0 < res.q95
    # seeded: same seed, same distribution
    res2 = split_half(m, metric="kendall", n_splits=500, seed=2)
    np.testing.assert_array_equal(res.values, res2.values)


def test_split_half_counts_undefined_splits_and_validates():
    m = np.zeros((3, 10))  # every policy always fails: halves all tied, undefined
    res = split_half(m, n_splits=20)
    assert res.n_undefined == 20 and res.median is None
    with pytest.raises(ValueError, match="2 policies"):
        split_half(np.zeros((1, 10)))
    with pytest.raises(ValueError, match="2 seeds"):
        split_half(np.zeros((3, 1)))
