"""Success-rate intervals, discard/abstention bounds, and paired bootstrap by seed."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from kosmos_env.stats.intervals import (
    bootstrap_ranking,
    clopper_pearson,
    paired_bootstrap_diff,
    rate_interval,
    summarize_rate,
    wilson,
)

CASES = [(0, 10), (1, 10), (5, 10), (10, 10), (3, 7), (17, 50), (0, 1), (42, 137)]


@pytest.mark.parametrize("k, n", CASES)
@pytest.mark.parametrize("alpha", [0.05, 0.1])
def test_wilson_and_clopper_pearson_match_scipy(k, n, alpha):
    w = wilson(k, n, alpha)
    ref_w = binomtest(k, n).proportion_ci(confidence_level=1 - alpha, method="wilson")
    assert (w.lower, w.upper) == pytest.approx((ref_w.low, ref_w.high), abs=1e-10)
    cp = clopper_pearson(k, n, alpha)
    ref_cp = binomtest(k, n).proportion_ci(confidence_level=1 - alpha, method="exact")
    assert (cp.lower, cp.upper) == pytest.approx((ref_cp.low, ref_cp.high), abs=1e-10)
    assert w.estimate == cp.estimate == pytest.approx(k / n)


def test_known_textbook_values():
    # Wilson 95% for 8/10 (Newcombe 1998 table): 0.4902 - 0.9433
    w = wilson(8, 10)
    assert (round(w.lower, 4), round(w.upper, 4)) == (0.4902, 0.9433)
    # Clopper-Pearson 95% for 0/10: upper = 1 - 0.025^(1/10) = 0.3085
    cp = clopper_pearson(0, 10)
    assert cp.lower == 0.0 and cp.upper == pytest.approx(1 - 0.025**0.1, abs=1e-12)


def test_interval_input_errors_and_empty():
    with pytest.raises(ValueError):
        wilson(11, 10)
    with pytest.raises(ValueError):
        clopper_pearson(-1, 10)
    with pytest.raises(ValueError, match="alpha"):
        wilson(1, 2, alpha=1.5)
    with pytest.raises(ValueError, match="method"):
        rate_interval(1, 2, method="agresti")
    e = wilson(0, 0)
    assert e.estimate is None and (e.lower, e.upper) == (0.0, 1.0)


def test_discard_bounds_width_equals_discard_rate():
    outcomes = ["success"] * 6 + ["failure"] * 10 + ["discarded"] * 3 + ["abstained"] * 1
    s = summarize_rate(outcomes)
    assert s.raw.estimate == pytest.approx(6 / 16)
    assert s.worst_case == pytest.approx((6 / 20, 10 / 20))
    assert s.worst_case[1] - s.worst_case[0] == pytest.approx(s.undecided_rate) == pytest.approx(4 / 20)
    assert s.discard_rate == pytest.approx(3 / 20) and s.abstain_rate == pytest.approx(1 / 20)
    assert s.discard_bounds == pytest.approx((6 / 19, 9 / 19))
    assert s.discard_bounds[1] - s.discard_bounds[0] == pytest.approx(3 / 19)
    assert s.abstain_bounds == pytest.approx((6 / 17, 7 / 17))
    # the sampling-widened worst case contains both extremes
    assert s.worst_case_ci[0] == pytest.approx(wilson(6, 20).lower)
    assert s.worst_case_ci[1] == pytest.approx(wilson(10, 20).upper)
    assert s.worst_case_ci[0] < s.worst_case[0] and s.worst_case_ci[1] > s.worst_case[1]
    # counts dict in, same answer
    s2 = summarize_rate({"success": 6, "failure": 10, "discarded": 3, "abstained": 1})
    assert s2.worst_case == s.worst_case
    with pytest.raises(ValueError, match="unknown outcome"):
        summarize_rate(["success", "timeout"])


def test_no_discards_means_zero_width_bounds():
    s = summarize_rate(["success", "failure", "failure"])
    assert s.worst_case == pytest.approx((1 / 3, 1 / 3))
    assert s.undecided_rate == 0.0


def test_paired_bootstrap_diff_uses_pairing():
    rng = np.random.default_rng(0)
    difficulty = rng.random(200)
    a = np.clip(difficulty + 0.05, 0, 1)  # A is uniformly 0.05 better on every seed
    b = difficulty
    res = paired_bootstrap_diff(a, b, n_boot=2000, seed=1)
    assert res.estimate == pytest.approx(np.mean(a - b))
    assert res.lower > 0 and res.prob_a_better == 1.0
    # shuffling the pairing destroys the variance reduction: interval much wider
    unpaired = paired_bootstrap_diff(a, rng.permutation(b), n_boot=2000, seed=1)
    assert (unpaired.upper - unpaired.lower) > 5 * (res.upper - res.lower)
    # NaN pairs are dropped
    a2 = a.copy()
    a2[:10] = np.nan
    assert paired_bootstrap_diff(a2, b, n_boot=200).n_pairs == 190
    with pytest.raises(ValueError, match="equal length"):
        paired_bootstrap_diff([1, 0], [1])
    assert not res.collapsed and res.to_dict()["collapsed"] is False


def test_paired_bootstrap_collapse_is_flagged_and_the_verdict_is_not():
    # 12/12 vs 0/12: every resample has difference 1, so the bootstrap "interval" is [1, 1];
    # it is flagged, and the paired verdict's Tango interval on the same pairs keeps its width
    from kosmos_env.stats.verdict import paired_verdict

    res = paired_bootstrap_diff([1] * 12, [0] * 12, n_boot=500)
    assert (res.lower, res.upper) == (1.0, 1.0) and res.collapsed and res.to_dict()["collapsed"]
    v = paired_verdict([1] * 12, [0] * 12)
    assert v.interval[1] == 1.0 and v.interval[0] < 0.6 and v.outcome == "a_better"


def test_bootstrap_ranking_orders_clearly_separated_policies():
    rng = np.random.default_rng(2)
    rates = np.array([0.2, 0.8, 0.5])
    m = (rng.random((3, 300)) < rates[:, None]).astype(float)
    m[0, :5] = np.nan
    r = bootstrap_ranking(m, ["low", "high", "mid"], n_boot=1000, seed=0)
    assert list(r.ranks) == [3.0, 1.0, 2.0]
    assert r.prob_best[1] > 0.99
    assert r.win_prob[1, 0] > 0.99 and r.win_prob[0, 1] < 0.01
    off = ~np.eye(3, dtype=bool)
    assert np.allclose((r.win_prob + r.win_prob.T)[off], 1.0)
    assert np.isnan(np.diag(r.win_prob)).all()
    assert r.rank_interval[1].tolist() == [1.0, 1.0]
    # two identical policies split the first place
    same = np.tile((rng.random(50) < 0.5).astype(float), (2, 1))
    r2 = bootstrap_ranking(same, n_boot=200)
    assert r2.prob_best == pytest.approx([0.5, 0.5])
