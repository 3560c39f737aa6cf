"""The train-in-world experiment's statistics on records whose answers are known."""

from __future__ import annotations

import numpy as np
import pytest

from kosmos_env.training.analysis import UnitBootstrap, analyse, analyse_seeds, unit_vector

UNITS = [("carrot_on_plate", 330000 + i) for i in range(20)] + [("spoon_on_towel", 331000 + i) for i in range(20)]


def _records(truth: np.ndarray, world: np.ndarray) -> tuple[list, list]:
    t = [{"task": u[0], "seed": u[1], "true_success": bool(x)} for u, x in zip(UNITS, truth, strict=True)]
    w = [{"task": u[0], "seed": u[1], "world_success": bool(x)} for u, x in zip(UNITS, world, strict=True)]
    return t, w


def _eval(step, truth, world):
    t, w = _records(np.asarray(truth), np.asarray(world))
    return {"step": step, "truth": t, "world": w}


def test_lift_exploitability_and_transfer_on_known_records():
    n = len(UNITS)
    start = np.zeros(n)
    start[:8] = 1  # 0.2 true success at the start, judged the same by every world
    a_last = start.copy()
    a_last[:24] = 1  # A: +0.4 true lift, honestly judged
    b_last = start.copy()
    b_last[:16] = 1  # B: +0.2 true lift ...
    b_world = b_last.copy()
    b_world[:36] = 1  # ... but its world calls 0.9 a success: exploitability +0.5
    arms = {
        "A": [_eval(0, start, start), _eval(1000, a_last, a_last)],
        "B": [_eval(0, start, start), _eval(1000, b_last, b_world)],
        "C": [_eval(0, start, start), _eval(1000, b_last, b_last)],
    }
    r = analyse(arms, UNITS, n_boot=2000)
    assert r["arms"]["A"]["lift"]["estimate"] == pytest.approx(0.4)
    assert r["arms"]["A"]["lift"]["lower"] > 0
    assert r["arms"]["B"]["lift"]["estimate"] == pytest.approx(0.2)
    assert r["arms"]["B"]["checkpoints"][-1]["exploitability"]["estimate"] == pytest.approx(0.5)
    assert r["arms"]["B"]["exploitability_growth"]["lower"] > 0
    assert r["arms"]["A"]["exploitability_growth"]["estimate"] == 0
    ratio = r["arms"]["B"]["transfer_ratio"]
    assert ratio["defined"] and ratio["estimate"] == pytest.approx(0.5)
    assert ratio["lower"] <= 0.5 <= ratio["upper"]
    assert r["gate_effect"]["B-C"]["estimate"] == pytest.approx(0.5)


def test_transfer_ratio_is_undefined_when_the_simulator_arm_did_not_improve():
    n = len(UNITS)
    start = np.zeros(n)
    start[:10] = 1
    flat = start.copy()
    up = start.copy()
    up[:20] = 1
    arms = {"A": [_eval(0, start, start), _eval(500, flat, flat)], "B": [_eval(0, start, start), _eval(500, up, up)]}
    r = analyse(arms, UNITS, n_boot=500)
    ratio = r["arms"]["B"]["transfer_ratio"]
    assert ratio["defined"] is False and "contains 0" in ratio["note"]


def test_unit_vectors_need_every_unit_and_bootstrap_needs_two():
    t, _ = _records(np.ones(len(UNITS)), np.ones(len(UNITS)))
    with pytest.raises(ValueError, match="no record for unit"):
        unit_vector(t[1:], "true_success", UNITS)
    with pytest.raises(ValueError, match="at least 2 units"):
        UnitBootstrap(1)
    boot = UnitBootstrap(len(UNITS), n_boot=300, seed=1)
    x = np.r_[np.ones(10), np.zeros(30)]
    m = boot.mean(x)
    assert m["estimate"] == 0.25 and m["lower"] < 0.25 < m["upper"]


def _seed_eval(step, truth, sim_judged, world=None):
    t = np.asarray(truth)
    j = np.asarray(sim_judged)
    sim = [
        {"task": u[0], "seed": u[1], "true_success": bool(a), "world_success": bool(b)}
        for u, a, b in zip(UNITS, t, j, strict=True)
    ]
    out = {"step": step, "simulator": sim}
    if world is not None:
        out["world"] = [
            {"task": u[0], "seed": u[1], "world_success": bool(x)} for u, x in zip(UNITS, world, strict=True)
        ]
    return out


def test_pooled_over_seeds_lift_split_of_over_credit_and_oracle_arm():
    n = len(UNITS)
    start = np.zeros(n)
    start[:8] = 1  # 0.2 at every seed's start
    d0, d1 = start.copy(), start.copy()
    d0[:24] = 1  # seed 0: +0.4
    d1[:16] = 1  # seed 1: +0.2 -> pooled +0.3
    b_last = start.copy()
    b_last[:12] = 1  # B: +0.1 true
    b_sim = b_last.copy()
    b_sim[12:16] = 1  # the judge on the simulator's frames adds +0.1 ...
    b_world = b_sim.copy()
    b_world[16:28] = 1  # ... and the world adds +0.3 more
    arms = {
        # the oracle arm's simulator-judged column is ignored: its world-judged success is the truth
        "D": {
            0: [_seed_eval(0, start, 1 - start), _seed_eval(9, d0, 1 - d0)],
            1: [_seed_eval(0, start, start), _seed_eval(9, d1, d1)],
        },
        "A": {0: [_seed_eval(0, start, start), _seed_eval(9, start, start)]},
        "B": {0: [_seed_eval(0, start, start, start), _seed_eval(9, b_last, b_sim, b_world)]},
    }
    r = analyse_seeds(arms, UNITS, n_boot=2000)
    d = r["arms"]["D"]
    assert d["seeds"] == [0, 1]
    assert d["lift"]["estimate"] == pytest.approx(0.3)
    assert d["per_seed"]["0"]["lift"]["estimate"] == pytest.approx(0.4)
    assert d["per_seed"]["1"]["lift"]["estimate"] == pytest.approx(0.2)
    assert d["lift"]["lower"] > 0
    assert d["checkpoints"][-1]["exploitability"]["estimate"] == 0  # oracle: judged by the truth itself
    b = r["arms"]["B"]
    assert b["over_credit_split"]["judge"]["estimate"] == pytest.approx(0.1)
    assert b["over_credit_split"]["world"]["estimate"] == pytest.approx(0.3)
    assert b["checkpoints"][-1]["exploitability"]["estimate"] == pytest.approx(0.4)
    assert b["exploitability_growth"]["estimate"] == pytest.approx(0.4)
    # A did not improve: B's transfer ratio is undefined rather than a number over zero
    assert not b["transfer_ratio"]["defined"]
    assert "transfer_ratio" not in d


def test_pooled_analysis_refuses_seeds_evaluated_at_different_steps():
    start = np.zeros(len(UNITS))
    arms = {"D": {0: [_seed_eval(0, start, start), _seed_eval(9, start, start)], 1: [_seed_eval(0, start, start)]}}
    with pytest.raises(ValueError, match="different steps"):
        analyse_seeds(arms, UNITS, n_boot=100)
