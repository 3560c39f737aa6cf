"""Horizon break detection and cost-sweep choice."""

from __future__ import annotations

import pytest

from kosmos_env.stats.cost import Setting, cost_sweep
from kosmos_env.stats.horizon import horizon_agreement


def test_horizon_break_against_final_horizon():
    # 4 policies; the final (80-step) ranking is a < b < c < d
    final = [0.1, 0.3, 0.5, 0.7]
    scores = {
        10: [0.0, 0.0, 0.0, 0.0],  # all tied: Kendall undefined -> fails
        20: [0.3, 0.1, 0.2, 0.0],  # reversed-ish
        40: [0.1, 0.3, 0.2, 0.6],  # one swap: tau = 4/6
        60: [0.1, 0.25, 0.45, 0.6],  # same order
        80: final,
    }
    hs = [40, 10, 80, 20, 60]  # any order in
    res = horizon_agreement([scores[h] for h in hs], hs, threshold=0.8, floor=False)
    assert res.horizons == [10, 20, 40, 60, 80]
    vals = [a.value for a in res.agreements]
    assert vals[0] is None and res.agreements[0].reason
    assert vals[2] == pytest.approx(4 / 6) and vals[3] == 1.0 and vals[4] == 1.0
    assert res.break_horizon == 40  # first failure scanning down from the longest horizon
    assert res.shortest_safe_horizon == 60
    assert res.reference_source.startswith("longest horizon")
    # looser threshold: 40 passes, 20 breaks
    res2 = horizon_agreement([scores[h] for h in hs], hs, threshold=0.6, floor=False)
    assert res2.break_horizon == 20 and res2.shortest_safe_horizon == 40


def test_horizon_with_reference_and_mmrv():
    ref = [0.0, 0.5, 1.0]
    res = horizon_agreement([[0.2, 0.1, 0.3], [0.1, 0.2, 0.3]], [5, 10], reference=ref, metric="mmrv", threshold=0.1)
    assert res.agreements[1].value == 0.0 and res.agreements[0].value > 0.1
    assert res.break_horizon == 5 and res.shortest_safe_horizon == 10
    assert res.agreements[0].random_floor is not None
    # nothing breaks
    ok = horizon_agreement([[0.1, 0.2, 0.3]] * 2, [5, 10], reference=ref, floor=False)
    assert ok.break_horizon is None and ok.shortest_safe_horizon == 5
    with pytest.raises(ValueError, match="horizons"):
        horizon_agreement([[1, 2]], [5, 10])
    with pytest.raises(ValueError, match="distinct"):
        horizon_agreement([[1, 2], [2, 1]], [5, 5])


def test_cost_sweep_picks_cheapest_within_tolerance():
    full = {"a": 0.1, "b": 0.4, "c": 0.6, "d": 0.9, "e": 0.5}
    settings = [
        Setting("steps=50", full, 10.0),
        {"name": "steps=4", "scores": {"a": 0.5, "b": 0.1, "c": 0.6, "d": 0.2, "e": 0.3}, "cost": 1.0},
        ("steps=10", {"a": 0.1, "b": 0.5, "c": 0.45, "d": 0.8, "e": 0.55}, 2.0),  # 2 swaps: tau 0.6
        ("steps=20", {"a": 0.12, "b": 0.38, "c": 0.58, "d": 0.95, "e": 0.52}, 4.0),  # same order
    ]
    res = cost_sweep(settings, metric="kendall", tolerance=0.1, floor=False)
    assert res.reference == "steps=50"
    assert [r[0] for r in res.rows] == ["steps=4", "steps=10", "steps=20", "steps=50"]
    assert res.rows[1][2].value == pytest.approx(0.6)
    assert [r[3] for r in res.rows] == [False, False, True, True]
    assert res.cheapest_ok == "steps=20"
    loose = cost_sweep(settings, metric="kendall", tolerance=0.5, floor=False)
    assert loose.cheapest_ok == "steps=10"
    m = cost_sweep(settings, metric="mmrv", tolerance=0.0, floor=False)
    assert m.cheapest_ok == "steps=20"


def test_cost_sweep_errors():
    with pytest.raises(ValueError, match="lacks scores"):
        cost_sweep([("x", {"a": 1, "b": 2}, 1), ("y", {"a": 1}, 0.5)])
    with pytest.raises(ValueError, match="distinct"):
        cost_sweep([("x", [1, 2], 1), ("x", [1, 2], 2)])
    with pytest.raises(ValueError, match="cost"):
        cost_sweep([("x", [1, 2], -1)])
    # list scores work positionally; all-tied reference still qualifies as itself
    r = cost_sweep([("x", [1.0, 1.0], 5), ("y", [0.0, 1.0], 1)], floor=False)
    assert r.cheapest_ok == "x" and r.rows[0][2].value is None
