"""The closed-loop bars (issue 41): registered only with --closed-loop-bars, so a design without it
(every registration made so far) registers today's bars; judged PASS and FAIL on synthetic
studies that clearly pass or fail; the same judge on world and simulator rollouts with a paired
ratio; the report's per-subgroup tables and the frame error by policy group."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from kosmos_env.study.analyze import analyze
from kosmos_env.study.bars import default_bars, judge_bars, judge_closed_loop_frames

ROOT = Path(__file__).resolve().parents[2]
CKPT = {"ckpt:path=a": 0.1, "ckpt:path=b": 0.25, "ckpt:path=c": 0.45, "ckpt:path=d": 0.65, "ckpt:path=e": 0.85}
SCRIPTED = {"scripted:skill=1.0": 0.9, "random": 0.05}
TODAY = [
    "world_adds_information:learned/vision:all",
    "world_adds_information:learned/vision:honest",
    "world_agreement:learned/vision",
    "repeatable:learned/vision",
    "world_adds_information:learned/robot_log:all",
    "world_adds_information:learned/robot_log:honest",
    "world_agreement:learned/robot_log",
    "repeatable:learned/robot_log",
    "drift",
    "cheapest_setting",
]


def _row(world, policy, task, seed, judges):
    return {
        "world": world,
        "gate": False,
        "policy": policy,
        "task": task,
        "seed": seed,
        "repeat": 0,
        "outcome": "pending",
        "discarded": False,
        "steps": 40,
        "judges": judges,
        "horizon_judges": {k: {40: v} for k, v in judges.items()},
        "seconds": {"episode": 0.1, "world": 0.05, "policy": 0.01, "gate": 0.0},
    }


def _study(world_on_closed_loop: str, policies=None) -> dict:
    """Truth drawn from the rates above; the simulator's own judges read it exactly. On the scripted
    policies the world tracks the truth. On the closed-loop ones it tracks it ("track") or inverts
    it ("invert"), and every cheap baseline inverts it (a command reader that is fooled by them)."""
    rates = {**SCRIPTED, **CKPT} if policies is None else policies
    rng = np.random.default_rng(0)
    rows = []
    for policy, rate in rates.items():
        closed = policy.startswith("ckpt")
        for task in ("a", "b"):
            for seed in range(20):
                truth = bool(rng.random() < rate)
                world = (not truth) if closed and world_on_closed_loop == "invert" else truth
                cheap = (not truth) if closed else bool(rng.random() < 0.5)
                base = {"action_only": cheap, "action_learned": cheap}
                rows.append(
                    _row("reference", policy, task, seed, {"state": truth, "robot_log": truth, "vision": truth, **base})
                )
                rows.append(_row("learned", policy, task, seed, {"robot_log": world, "vision": world, **base}))
                rows.append(_row("null", policy, task, seed, {"robot_log": cheap, "vision": cheap, **base}))
    cfg = {
        "world": "W",
        "reference": "R",
        "policies": list(rates),
        "tasks": ["a", "b"],
        "seeds": 20,
        "seed_offset": 0,
        "horizons": [40],
    }
    return {
        "config": cfg,
        "rows": rows,
        "gate_status": {"available": False, "detail": "not in this test"},
        "examples": {},
        "wall_seconds": 1.0,
        "frame_error": {},
    }


@pytest.fixture(scope="module")
def tracked():
    return analyze(_study("track"), n_boot=200)


@pytest.fixture(scope="module")
def inverted():
    return analyze(_study("invert"), n_boot=200)


def test_without_the_flag_the_bars_are_todays_and_the_committed_registrations():
    assert [b["id"] for b in default_bars()] == TODAY
    assert default_bars() == default_bars(closed_loop=False)
    # the registration committed with the first study still holds exactly these bars
    committed = json.loads((ROOT / "bench/results/validity_study/registration.json").read_text())
    assert committed["bars"] == default_bars()


def test_with_the_flag_the_closed_loop_bars_are_added_and_today_s_kept():
    bars = default_bars(closed_loop=True)
    ids = [b["id"] for b in bars]
    new = [i for i in ids if i not in TODAY]
    assert new == [
        "world_adds_information:learned/vision:closed_loop",
        "world_adds_information:learned/robot_log:closed_loop",
        "closed_loop_frames:learned/vision",
    ]
    assert [b for b in bars if b["id"] in TODAY] == default_bars()  # the old bars unchanged, in order
    frames = bars[-1]
    assert frames["threshold"] == 0.8 and frames["share"] == 0.85 and frames["subgroup"] == "closed_loop"
    assert "reference/vision" in frames["text"] and ">= 0.85 x" in frames["text"]


def _args(*extra):
    from kosmos_env.study.arguments import add_design_arguments

    p = argparse.ArgumentParser()
    add_design_arguments(p)
    return p.parse_args(["--tasks", "carrot_on_plate", "--seeds", "2", "--horizons", "40", *extra])


def test_the_flag_is_not_a_config_field_and_needs_two_checkpoints():
    from kosmos_env.study.arguments import bars_from_args, config_from_args

    pols = ["--policies", "scripted:skill=1.0", "ckpt:path=a.safetensors", "ckpt:path=b.safetensors"]
    with_flag, without = _args(*pols, "--closed-loop-bars"), _args(*pols)
    # the config (what a registration binds under "config") does not move; the bars list does
    assert config_from_args(with_flag).to_dict() == config_from_args(without).to_dict()
    assert bars_from_args(without) == default_bars()
    assert bars_from_args(with_flag) == default_bars(closed_loop=True)
    with pytest.raises(ValueError, match="at least 2 ckpt: policies, got 1"):
        config_from_args(_args("--policies", "scripted:skill=1.0", "ckpt:path=a.safetensors", "--closed-loop-bars"))


def test_the_flag_without_checkpoints_is_one_clear_line(tmp_path, capsys):
    from kosmos_env.cli import main

    out = tmp_path / "reg.json"
    argv = ["register", "--study", "--policies", "scripted:skill=1.0", "random", "--seeds", "2"]
    rc = main([*argv, "--closed-loop-bars", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--closed-loop-bars" in err[0] and "got 0" in err[0], err
    assert not out.exists()


def test_closed_loop_bars_pass_when_the_world_keeps_the_ranking(tracked):
    verdicts = {b["id"]: b for b in judge_bars({"bars": default_bars(closed_loop=True)}, tracked)}
    for ev in ("learned/vision", "learned/robot_log"):
        adds = verdicts[f"world_adds_information:{ev}:closed_loop"]
        assert adds["verdict"] == "PASS", adds
        assert adds["value"]["difference"] == pytest.approx(2.0)  # +1 against baselines at -1
    frames = verdicts["closed_loop_frames:learned/vision"]
    assert frames["verdict"] == "PASS", frames
    v = frames["value"]
    assert v["world_kendall"] == pytest.approx(1.0) and v["simulator_kendall"] == pytest.approx(1.0)
    assert v["ratio"] == pytest.approx(1.0) and v["ratio_interval"] == pytest.approx([1.0, 1.0])
    assert v["world_p_value"] <= 1 / 120 + 1e-12  # 5 policies, exact permutation test


def test_closed_loop_bars_fail_when_the_world_loses_the_ranking(inverted):
    verdicts = {b["id"]: b for b in judge_bars({"bars": default_bars(closed_loop=True)}, inverted)}
    for ev in ("learned/vision", "learned/robot_log"):
        adds = verdicts[f"world_adds_information:{ev}:closed_loop"]
        assert adds["verdict"] == "FAIL" and adds["value"]["difference"] == pytest.approx(0.0)
    frames = verdicts["closed_loop_frames:learned/vision"]
    assert frames["verdict"] == "FAIL"
    assert frames["value"]["world_kendall"] == pytest.approx(-1.0)
    assert frames["value"]["ratio"] == pytest.approx(-1.0)
    # the scripted policies are untouched: the all-policy bars are judged as before, from the same analysis
    assert verdicts["world_agreement:learned/vision"]["verdict"] in ("PASS", "FAIL")


def test_a_design_without_checkpoints_leaves_the_closed_loop_bars_not_run():
    res = analyze(_study("track", policies=dict(SCRIPTED, **{"scripted:skill=0.5": 0.5})), n_boot=100)
    assert "closed_loop" not in res["world_vs_simulator"]["learned/vision"]
    assert "closed_loop" not in res["agreement"]["vs_best_baseline"]["learned/vision"]
    verdicts = {b["id"]: b["verdict"] for b in judge_bars({"bars": default_bars(closed_loop=True)}, res)}
    assert verdicts["closed_loop_frames:learned/vision"] == "NOT RUN"
    assert verdicts["world_adds_information:learned/vision:closed_loop"] == "NOT RUN"


@pytest.mark.parametrize(
    "world, p, simulator, verdict",
    [
        (0.82, 0.001, 0.95, "PASS"),  # 0.82 >= 0.8 and >= 0.85 x 0.95 = 0.8075
        (0.82, 0.001, 1.0, "FAIL"),  # keeps only 0.82 of the simulator's 1.0
        (0.78, 0.001, 0.80, "FAIL"),  # under 0.8 however much it keeps
        (0.90, 0.2, 0.90, "FAIL"),  # no better than a random ranking
        (0.90, 0.001, None, "FAIL"),  # the simulator side undefined: the share cannot be shown
    ],
)
def test_the_frame_bar_rule(world, p, simulator, verdict):
    bar = default_bars(closed_loop=True)[-1]
    entry = {
        "world": {"value": world, "interval": [world - 0.1, min(1.0, world + 0.1)], "p_value": p},
        "simulator": {"value": simulator, "interval": None, "p_value": 0.001},
        "ratio": {"estimate": None if simulator is None else world / simulator, "interval": None},
    }
    results = {"world_vs_simulator": {"learned/vision": {"closed_loop": entry}}}
    assert judge_closed_loop_frames(bar, results)[0] == verdict


def test_the_ratio_is_paired_with_the_two_kendalls():
    from kosmos_env.stats.uncertainty import agreement_ratio, agreement_uncertainty

    rng = np.random.default_rng(5)
    rates = np.linspace(0.9, 0.1, 6)
    truth = (rng.random((6, 60)) < rates[:, None]).astype(float)
    noisy = np.where(rng.random(truth.shape) < 0.2, 1 - truth, truth)
    r = agreement_ratio(truth, noisy, truth, n_boot=400, seed=3)
    k = agreement_uncertainty({"n": noisy}, truth, metrics=("kendall",), n_boot=400, seed=3)["evaluators"]["n"]
    # world = truth: Kendall 1 in every resample, so the ratio is 1 / the reference's Kendall, resample by
    # resample; with the same draws its interval is the reciprocal of the reference's interval
    assert r["evaluator"] == pytest.approx(1.0) and r["reference"] == pytest.approx(k["kendall"]["value"])
    assert r["estimate"] == pytest.approx(1 / k["kendall"]["value"])
    lo, hi = k["kendall"]["interval"]
    assert r["interval"] == pytest.approx([1 / hi, 1 / lo], rel=0.02)
    assert agreement_ratio(noisy, noisy, truth, n_boot=100)["interval"] == pytest.approx([1.0, 1.0])
    anti = 1 - truth
    none = agreement_ratio(truth, anti, truth, n_boot=100)
    assert none["estimate"] is None and "not above 0" in none["reason"]
    with pytest.raises(ValueError, match="higher is better"):
        agreement_ratio(truth, noisy, truth, metric="mmrv")


def test_the_report_has_a_table_per_subgroup_and_the_same_judge_section(tracked):
    from kosmos_env.study.report import _markdown

    bars = judge_bars({"bars": default_bars(closed_loop=True)}, tracked)
    md = _markdown(tracked, _study("track"), [], bars, None, "registered")
    for heading in ("### all (7 policies)", "### honest (7 policies)", "### closed_loop (5 policies)"):
        assert heading in md, heading
    assert "accuracy − best [95 %]" in md
    section = md[md.index("## The same judge on the world's rollouts") :]
    line = next(x for x in section.splitlines() if x.startswith("| vision | closed_loop | 5 |"))
    assert "1.00 [1.00, 1.00]" in line
    assert "| **PASS** | on the closed-loop policies, the frame judge" in md


def test_frame_error_by_policy_group_in_the_report():
    from kosmos_env.study.report import _frame_error_by_group
    from kosmos_env.study.run import frame_error_summary

    world = {20: [10.0, 12.0, 30.0, 34.0], 40: [15.0, 16.0, 40.0, 44.0]}
    copy = {20: [20.0, 20.0, 20.0, 20.0], 40: [25.0, 25.0, 25.0, 25.0]}
    groups = {"closed_loop": [2, 3], "scripted": [0, 1]}
    by = {
        g: {
            "n_episodes": len(j),
            **frame_error_summary(
                {h: [world[h][i] for i in j] for h in world}, {h: [copy[h][i] for i in j] for h in copy}
            ),
        }
        for g, j in groups.items()
    }
    assert by["closed_loop"]["ratio"][20] == pytest.approx(32.0 / 20.0)
    assert by["scripted"]["ratio_interval"][20][1] < 1 < by["closed_loop"]["ratio_interval"][20][0]
    lines = _frame_error_by_group(by)
    assert "closed_loop 2 episodes" in lines[1]
    row = next(x for x in lines if x.startswith("| 20 |"))
    assert "32.0 / 20.0, 1.60" in row and "11.0 / 20.0, 0.55" in row
