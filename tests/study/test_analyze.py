"""The evaluator-validity study: analysis on synthetic rows, bad input, and a tiny end-to-end run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kosmos_env.study.analyze import analyze
from tests.conftest import requires_extra

POLICIES = ["p0", "p1", "p2", "p3", "p4", "p5"]
RATES = {"p0": 0.95, "p1": 0.8, "p2": 0.6, "p3": 0.4, "p4": 0.2, "p5": 0.05}
HORIZONS = [10, 20, 40]


def _row(world, policy, task, seed, judges, per_h):
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
        "horizon_judges": per_h,
        "seconds": {"episode": 0.1, "world": 0.05, "policy": 0.01, "gate": 0.0, "judge_robot_log": 0.001},
    }


def _study(world_mode: str):
    """Truth from RATES; the world tracks it ("track") or inverts it ("invert"); the action-only
    baseline says success for every policy but the last two (it cannot see the scene). Nobody
    succeeds by step 10, so agreement at H = 10 is undefined."""
    rng = np.random.default_rng(0)
    rows = []
    for policy in POLICIES:
        for task in ("a", "b"):
            for seed in range(10):
                truth = bool(rng.random() < RATES[policy])
                world = truth if world_mode == "track" else (not truth)
                ao = policy not in ("p4", "p5") or truth
                h = {10: False, 20: truth, 40: truth}
                rows.append(
                    _row(
                        "reference",
                        policy,
                        task,
                        seed,
                        {"state": truth, "robot_log": truth, "vision": truth, "action_only": ao},
                        {"state": h, "robot_log": h, "vision": h, "action_only": {10: False, 20: ao, 40: ao}},
                    )
                )
                wh = {10: False, 20: world, 40: world}
                rows.append(
                    _row(
                        "learned",
                        policy,
                        task,
                        seed,
                        {"robot_log": world, "vision": world, "action_only": ao},
                        {"robot_log": wh, "vision": wh},
                    )
                )
                rows.append(
                    _row(
                        "null",
                        policy,
                        task,
                        seed,
                        {"robot_log": False, "vision": False, "action_only": ao},
                        {
                            "robot_log": {10: False, 20: False, 40: False},
                            "vision": {10: False, 20: False, 40: False},
                            "action_only": {10: False, 20: ao, 40: ao},
                        },
                    )
                )
    cfg = {
        "world": "W",
        "reference": "R",
        "policies": POLICIES,
        "tasks": ["a", "b"],
        "seeds": 10,
        "seed_offset": 0,
        "horizons": HORIZONS,
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
    return analyze(_study("track"), n_boot=300)


def test_world_vs_baselines_with_intervals_and_p_values(tracked):
    agr = tracked["agreement"]
    w = agr["evaluators"]["learned/robot_log"]["kendall"]
    assert w["value"] == pytest.approx(1.0)
    assert w["interval"][0] <= 1.0 <= w["interval"][1] + 1e-12
    assert w["p_value"] < 0.01  # 6 policies, exact: 1/720 of orders are as good
    assert w["null_quantile"] < 1.0
    ao = agr["evaluators"]["baseline/action_only"]["kendall"]
    assert ao["value"] < w["value"]
    d = agr["differences"]["learned/robot_log"]["baseline/action_only"]["kendall"]
    assert d["estimate"] == pytest.approx(w["value"] - ao["value"])
    assert d["interval"][0] <= d["estimate"] <= d["interval"][1]
    # the copy-first-frame world never says success: its correlations are undefined, and stay so
    nw = agr["evaluators"]["baseline/copy_first_frame/robot_log"]["kendall"]
    assert nw["value"] is None and nw["interval"] is None and nw["reason"]


def test_inverted_world_does_not_add_information():
    bad = analyze(_study("invert"), n_boot=300)
    d = bad["agreement"]["differences"]["learned/robot_log"]["baseline/action_only"]["kendall"]
    assert d["estimate"] < 0 and not d["excludes_zero"]
    assert bad["agreement"]["evaluators"]["learned/robot_log"]["kendall"]["p_value"] > 0.5


def test_horizon_as_drift_keeps_undefined_undefined(tracked):
    h = tracked["horizon"]["agreement"]
    assert h[10]["evaluators"]["learned/robot_log"]["value"] is None  # nothing succeeded yet
    assert h[10]["evaluators"]["learned/robot_log"]["reason"]
    assert h[40]["evaluators"]["learned/robot_log"]["value"] == pytest.approx(1.0)


def test_split_half_range_and_mdd_never_zero(tracked):
    e = tracked["evaluators"]["learned/robot_log"]
    s = e["split_half"]
    assert s["q05"] <= s["median"] <= s["q95"] and s["corrected_q05"] is not None
    d = tracked["evaluators"]["baseline/copy_first_frame/robot_log"]["detectable"]
    # all-failure: no variance anywhere; never an MDD of 0
    assert d["paired_mdd_median"] is None and d["unpaired_mdd"] is None and d["resolution"] == pytest.approx(1 / 20)


def test_bars_are_judged_from_the_best_baseline(tracked):
    from kosmos_env.study.bars import default_bars, judge_bars

    bars = judge_bars({"bars": default_bars()}, tracked)
    verdicts = {b["id"]: b["verdict"] for b in bars}
    assert verdicts["world_agreement:learned/robot_log"] == "PASS"
    assert verdicts["drift"] == "NOT RUN" and verdicts["cheapest_setting"] == "NOT RUN"
    adds = next(b for b in bars if b["id"] == "world_adds_information:learned/robot_log:all")
    best = tracked["agreement"]["vs_best_baseline"]["learned/robot_log"]["all"]["kendall"]
    assert adds["verdict"] == ("PASS" if best["excludes_zero"] else "FAIL")
    assert adds["value"]["difference"] == best["estimate"]


def test_world_is_compared_with_the_best_baseline_by_subgroup(tracked):
    best = tracked["agreement"]["vs_best_baseline"]["learned/robot_log"]
    assert set(best) == {"all", "honest", "scripted"}  # no deceptive or checkpoint policy here
    k = best["all"]["kendall"]
    top = max(v for v in k["baselines"].values() if v is not None)
    assert k["estimate"] == pytest.approx(k["evaluator"] - top)
    assert k["best_baseline"] in ("baseline/action_only", "baseline/same_rollout/action_only")
    assert k["interval"][0] <= k["estimate"] <= k["interval"][1]
    acc = best["all"]["accuracy"]
    assert acc["evaluator"] == pytest.approx(1.0) and acc["estimate"] > 0
    inverted = analyze(_study("invert"), n_boot=200)["agreement"]["vs_best_baseline"]["learned/robot_log"]["all"]
    assert inverted["kendall"]["estimate"] < 0 and not inverted["kendall"]["excludes_zero"]


def test_subgroups_split_deceptive_closed_loop_and_scripted():
    from kosmos_env.study.analyze import subgroup_rows

    pols = ["scripted:skill=1.0", "random", "deceptive:mode=grasp_miss", "ckpt:shipped=x", "ckpt:path=y"]
    assert subgroup_rows(pols, "honest") == [0, 1, 3, 4]
    assert subgroup_rows(pols, "deceptive") == [2]
    assert subgroup_rows(pols, "closed_loop") == [3, 4]
    assert subgroup_rows(pols, "scripted") == [0, 1]
    with pytest.raises(ValueError, match="unknown subgroup"):
        subgroup_rows(pols, "nice")


def test_best_baseline_is_chosen_inside_each_resample():
    from kosmos_env.stats.uncertainty import difference_to_best

    rng = np.random.default_rng(3)
    rates = np.linspace(0.9, 0.1, 6)
    truth = (rng.random((6, 30)) < rates[:, None]).astype(float)
    noisy = {f"b{i}": np.where(rng.random(truth.shape) < 0.3, 1 - truth, truth) for i in range(3)}
    d = difference_to_best(truth, noisy, truth, metric="accuracy", n_boot=300)
    # against the best of three the margin is smaller than against any one of them
    singles = [
        difference_to_best(truth, {k: v}, truth, metric="accuracy", n_boot=300)["estimate"] for k, v in noisy.items()
    ]
    assert d["estimate"] == pytest.approx(min(singles))
    assert d["interval"][0] <= d["estimate"] <= d["interval"][1]
    with pytest.raises(ValueError, match="at least one baseline"):
        difference_to_best(truth, {}, truth)


def _error(argv, capsys):
    from kosmos_env.cli import main

    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    return err[0]


def test_bad_input_gives_one_clear_error(tmp_path, capsys):
    out = str(tmp_path / "s")
    msg = _error(["study", "--horizons", "5", "80", "--out", out, "--quiet"], capsys)
    assert "80" in msg and "1..40" in msg
    msg = _error(["study", "--sweep", "width=8,16", "--out", out, "--quiet"], capsys)
    assert "no sweep setting 'width'" in msg and "Kosmos-TabletopLearned-v1" in msg
    msg = _error(["study", "--sweep", "colour=red", "--sweep-world", "Kosmos-Tabletop-v1", "--out", out], capsys)
    assert "image_size" in msg and "physics_dt" in msg
    assert not (tmp_path / "s" / "registration.json").exists()  # nothing registered for a refused study


def test_sweep_settings_map_onto_spec_and_kwargs():
    from kosmos_env.study.sweep import overrides, parse_sweep

    assert parse_sweep(["image_size=32,48", "physics_dt=0.008"]) == {"image_size": [32, 48], "physics_dt": [0.008]}
    assert overrides("Kosmos-Tabletop-v1", "image_size", 32) == ({"image_size": [32, 32]}, {})
    assert overrides("Kosmos-Tabletop-v1", "physics_dt", 0.008) == ({"world": {"physics_dt": 0.008}}, {})
    with pytest.raises(ValueError, match="NAME=V1"):
        parse_sweep(["physics_dt"])


@pytest.mark.slow
@requires_extra("results")  # the study writes plots
def test_tiny_registered_study_end_to_end_writes_report_plots_and_json(tmp_path, capsys):
    from kosmos_env.cli import main

    out = tmp_path / "study"
    design = [
        "--policies",
        "scripted:skill=1.0",
        "deceptive:mode=grasp_miss,rate=1.0",
        "random",
        "--tasks",
        "carrot_on_plate",
        "--seeds",
        "2",
        "--horizons",
        "10",
        "40",
        "--frame-error-seeds",
        "1",
        "--control",
        "shuffled",
        "--n-boot",
        "100",
    ]
    reg = tmp_path / "reg.json"
    assert main(["register", "--study", *design, "--out", str(reg)]) == 0
    rc = main(["study", *design, "--registration", str(reg), "--out", str(out), "--quiet"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "[PASS]" in printed or "[FAIL]" in printed
    report = (out / "report.md").read_text()
    assert "EXPLORATORY" not in report
    assert report.index("Registered bars") < report.index("Agreement with the simulator")
    for section in (
        "baseline/action_only",
        "baseline/action_learned",
        "baseline/copy_first_frame/vision",
        "baseline/null_world/vision",
        "World vs the best baseline, by subgroup",
        "Horizon as drift",
        "copy-last-frame",
        "Cost per rollout",
        "not estimable",
    ):
        assert section in report, section
    data = json.loads((out / "study.json").read_text())
    res = data["results"]
    truth = res["truth"]["rates"]
    assert truth[0] > truth[1] == truth[2] == 0.0  # the grasp-miss policy never succeeds in the simulator
    ao = res["evaluators"]["baseline/action_only"]["rates"]
    assert ao[1] == 1.0  # ...but its commands look like success
    assert {r["world"] for r in data["episodes"]} == {"reference", "learned", "null", "blank", "control:shuffled"}
    assert "control:shuffled/robot_log" in res["agreement"]["evaluators"]
    assert data["status"] == "registered" and data["registration_sha256"] == json.loads(reg.read_text())["sha256"]
    assert (out / "registration.json").read_text() == reg.read_text() and (out / "episodes.json").exists()
    for png in ("agreement_intervals.png", "horizon_drift.png", "success_rates.png"):
        assert (out / png).stat().st_size > 1000
