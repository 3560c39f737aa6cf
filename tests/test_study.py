"""The evaluator-validity study: analysis on synthetic rows, and a tiny end-to-end run."""
from __future__ import annotations

import json

import numpy as np
import pytest

from kosmos_env.study.analyze import analyze

POLICIES = ["good", "mid", "bad"]
RATES = {"good": 0.9, "mid": 0.5, "bad": 0.1}


def _row(world, policy, task, seed, verdict, gate=False, discarded=False):
    return {"world": world, "gate": gate, "policy": policy, "task": task, "seed": seed, "repeat": 0,
            "outcome": "discarded" if discarded else ("success" if verdict else "failure"), "discarded": discarded,
            "steps": 40, "judges": {"vision": verdict, "robot_log": verdict, **({"state": verdict} if world == "sim" else {})},
            "horizon_judges": {j: {20: verdict, 40: verdict} for j in ("vision", "robot_log", "state")},
            "seconds": {"episode": 0.1, "world": 0.05, "policy": 0.01, "gate": 0.0}}


def _study(flip_learned: bool):
    rng = np.random.default_rng(0)
    rows = []
    for policy in POLICIES:
        for task in ("a", "b"):
            for seed in range(12):
                truth = bool(rng.random() < RATES[policy])
                rows.append(_row("sim", policy, task, seed, truth))
                # the learned world either tracks the truth or inverts the ranking
                rows.append(_row("learned", policy, task, seed, (not truth) if flip_learned else truth))
    cfg = {"world": "learned", "reference": "sim", "policies": POLICIES, "tasks": ["a", "b"], "seeds": 12,
           "seed_offset": 0, "horizons": [20, 40]}
    return {"config": cfg, "rows": rows, "gate_status": {"available": False, "detail": "not in this test"},
            "examples": {}, "wall_seconds": 1.0}


def test_analysis_agrees_when_the_world_tracks_the_truth_and_not_when_it_inverts():
    good = analyze(_study(False))
    bad = analyze(_study(True))
    g, b = good["evaluators"]["learned/vision"], bad["evaluators"]["learned/vision"]
    assert g["agreement"]["kendall"]["value"] == pytest.approx(1.0)
    assert g["agreement"]["mmrv"]["value"] == pytest.approx(0.0)
    assert g["episode_accuracy"] == 1.0
    assert b["agreement"]["kendall"]["value"] == pytest.approx(-1.0)
    assert b["agreement"]["mmrv"]["value"] > b["agreement"]["mmrv"]["random_floor"]
    assert b["episode_accuracy"] == 0.0
    assert set(g["per_task"]) == {"a", "b"}
    assert g["split_half"]["median"] is not None and g["detectable"]["unpaired_mdd"] > 0
    assert good["horizon"]["learned/vision"]["kendall_vs_reference_same_horizon"][1]["value"] == pytest.approx(1.0)
    assert good["gate"]["available"] is False
    assert good["cost_seconds_per_rollout"]["learned"]["episode"] == pytest.approx(0.1)


@pytest.mark.slow
def test_tiny_study_end_to_end_writes_report_plots_and_json(tmp_path):
    from kosmos_env.cli import main

    out = tmp_path / "study"
    rc = main(["study", "--policies", "scripted:skill=1.0", "random", "--tasks", "carrot_on_plate",
               "--seeds", "2", "--horizons", "10", "40", "--out", str(out), "--quiet"])
    assert rc == 0
    report = (out / "report.md").read_text()
    for section in ("Headline", "Per-task", "split-half", "horizon", "gate", "Cost per rollout"):
        assert section.lower() in report.lower(), section
    data = json.loads((out / "study.json").read_text())
    res = data["results"]
    assert res["policies"] == ["scripted:skill=1.0", "random"]
    assert res["reference_rates"][0] > res["reference_rates"][1]  # the simulator separates them
    assert {"learned/vision", "learned/robot_log", "reference/vision", "reference/robot_log"} <= set(res["evaluators"])
    worlds = {(e["world"], e["gate"]) for e in data["episodes"]}
    assert ("Kosmos-Tabletop-v1", False) in worlds and ("Kosmos-TabletopLearned-v1", False) in worlds
    assert len([e for e in data["episodes"] if not e["gate"]]) == 2 * 2 * 2
    for png in ("success_rates.png", "agreement_vs_horizon.png", "agreement_per_task.png", "cost.png"):
        assert (out / png).stat().st_size > 1000
    assert res["cost_seconds_per_rollout"]["learned"]["world"] > 0
