"""`kosmos-env gate-check` end to end on a small configuration, plus its helpers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kosmos_env.checks.controls import auroc, parse_policies


def test_auroc_matches_the_definition():
    assert auroc([3, 4, 5], [0, 1, 2]) == 1.0
    assert auroc([0, 1], [2, 3]) == 0.0
    assert auroc([1, 1], [1, 1]) == 0.5  # ties count half
    rng = np.random.default_rng(0)
    pos, neg = rng.normal(1, 1, 200), rng.normal(0, 1, 300)
    brute = np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg])
    assert abs(auroc(pos, neg) - brute) < 1e-12
    assert auroc([], [1.0]) is None


def test_parse_policies_keeps_kwargs_together():
    assert parse_policies("scripted:skill=1.0,scripted:skill=0.3,random") == [
        "scripted:skill=1.0",
        "scripted:skill=0.3",
        "random",
    ]
    assert parse_policies("random:scale=0.5,seed=3;scripted") == ["random:scale=0.5,seed=3", "scripted"]


@pytest.mark.slow
def test_gate_check_command_small_run(tmp_path, capsys):
    from kosmos_env.cli import main

    out = tmp_path / "gate.json"
    rc = main(
        [
            "gate-check",
            "--policies",
            "scripted:skill=1.0,random",
            "--tasks",
            "carrot_on_plate",
            "--seeds",
            "1",
            "--campaign-skills",
            "0.3",
            "--campaign-seeds",
            "1",
            "--image-size",
            "64",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "AUROC true vs permuted" in text and "[campaign]" in text and "acceptance:" in text
    report = json.loads(out.read_text())
    cal = report["calibrated"]
    assert cal["true"]["step_pass_rate"] == 1.0
    assert cal["frozen"]["rejection_rate_demanded"] == 1.0 and cal["frozen"]["demanded_steps"] > 0
    assert cal["pan"]["rejection_rate_demanded"] == 1.0
    assert cal["permuted"]["step_pass_rate"] < cal["true"]["step_pass_rate"]
    camp = report["campaign"]["scripted:skill=0.3"]
    # the expert-playing world hands the weak policy a success; the gate takes it away
    assert camp["expert_nogate"]["success_rate"] == 1.0
    assert camp["expert_gate"]["success_rate"] == 0.0 and camp["expert_gate"]["discard_rate"] == 1.0
    assert camp["true_gate"]["discard_rate"] == 0.0
