"""Anytime-valid paired A/B test (predictable-plug-in empirical-Bernstein confidence sequence)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from kosmos_env.stats.sequential import SequentialABTest, eb_confidence_sequence, sequential_ab, simulate_type1


@pytest.mark.parametrize("rule", ["betting", "eb"])
@pytest.mark.parametrize("kind, p", [("bernoulli", 0.5), ("bernoulli", 0.15), ("beta", 0.5)])
def test_type1_error_below_alpha_when_peeking_after_every_episode(kind, p, rule):
    alpha = 0.05
    t0 = time.perf_counter()
    rate = simulate_type1(n_experiments=2000, n_steps=500, p=p, alpha=alpha, seed=11, kind=kind, rule=rule)
    assert time.perf_counter() - t0 < 5.0
    # ever rejecting a true null, over 500 looks, in 2000 experiments: must stay below alpha
    # (binomial sd at 0.05 over 2000 experiments is 0.005; measured ~0.02 betting, ~0.002-0.007 eb)
    assert rate <= 0.035


def test_betting_rule_decides_sooner_than_the_eb_rule_at_valid_error():
    from kosmos_env.stats.sequential import fixed_n_pairs, simulate_ab

    bet = simulate_ab(0.7, 0.5, 600, 400, seed=2, rule="betting")
    eb = simulate_ab(0.7, 0.5, 600, 400, seed=2, rule="eb")
    assert bet["median_pairs"] < eb["median_pairs"] and bet["decided"] >= eb["decided"] - 0.01
    assert 85 < fixed_n_pairs(0.7, 0.5) < 95


def test_naive_peeking_would_fail_the_same_simulation():
    """Sanity check that the simulation can detect inflation: a fixed-n 95% z-interval
    checked after every episode rejects the null far more often than alpha."""
    rng = np.random.default_rng(11)
    d = (rng.random((2000, 500)) < 0.5).astype(float) - (rng.random((2000, 500)) < 0.5).astype(float)
    t = np.arange(1, 501)
    mean = np.cumsum(d, axis=1) / t
    var = np.maximum(np.cumsum(d * d, axis=1) / t - mean**2, 1e-12)
    z = mean / np.sqrt(var / t)
    assert (np.abs(z[:, 9:]) > 1.96).any(axis=1).mean() > 0.2


def test_incremental_matches_vectorised_and_detects_real_difference():
    rng = np.random.default_rng(0)
    a = (rng.random(400) < 0.75).astype(float)
    b = (rng.random(400) < 0.35).astype(float)
    lo, hi = eb_confidence_sequence((a - b + 1) / 2)
    test = SequentialABTest(alpha=0.05)
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        st = test.update_pair(x, y)
        assert st.lower == pytest.approx(np.max(2 * lo[: i + 1] - 1), abs=1e-12)
        assert st.upper == pytest.approx(np.min(2 * hi[: i + 1] - 1), abs=1e-12)
    assert st.decision == "A better" and st.n_used < 150 and st.t == 400
    res = sequential_ab(a=a, b=b)
    assert res.decision == "A better" and res.n_used == st.n_used and len(res.lower) == res.n_used
    swapped = sequential_ab(b - a)
    assert swapped.decision == "B better" and swapped.n_used == st.n_used


def test_undecided_when_no_difference_and_interval_covers_zero():
    rng = np.random.default_rng(5)
    a = rng.random(300)
    res = sequential_ab(a=a, b=a[::-1].copy(), stop_at_decision=False)
    assert res.decision == "undecided" and res.n_used == 300
    assert res.final.lower < 0 < res.final.upper
    assert res.final.upper - res.final.lower < 0.5  # it did narrow


def test_sequential_input_validation():
    t = SequentialABTest()
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        t.update(1.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        t.update_pair(0.5, 2.0)
    with pytest.raises(ValueError, match="alpha"):
        SequentialABTest(alpha=0)
    with pytest.raises(ValueError, match="rule"):
        SequentialABTest(rule="peek")
    with pytest.raises(ValueError, match="pair up"):
        sequential_ab(a=[1, 0], b=[1])
    with pytest.raises(ValueError, match="empty"):
        sequential_ab([])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        eb_confidence_sequence([0.2, 1.2])


def test_interval_decides_only_under_the_eb_rule():
    # betting may decide while its (EB) interval still holds 0; only under "eb" is the printed
    # interval the decision, and to_dict says which
    d = [1.0] * 11 + [0.0]
    bet = sequential_ab(d, rule="betting").final
    eb = sequential_ab(d, rule="eb").final
    assert not bet.interval_decides and bet.to_dict()["interval_decides"] is False
    assert eb.interval_decides and eb.to_dict()["interval_decides"] is True
    if eb.decision == "A better":
        assert eb.lower > 0
    else:
        assert eb.decision == "undecided" and eb.lower <= 0 <= eb.upper
