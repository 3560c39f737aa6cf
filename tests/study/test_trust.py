"""Truth-free trust diagnostics (kosmos_env.study.trust), `kosmos-env trust` and analyze's trust section."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from kosmos_env import cli
from kosmos_env.study import trust as tr

TASKS = ("a", "b")


def _rows(rate_by_policy, *, seeds=6, discard_every=0, judge="vision"):
    """Deterministic synthetic episode rows: policy p succeeds on the first round(rate * seeds) seeds."""
    rows = []
    for p, rate in rate_by_policy.items():
        for t in TASKS:
            for s in range(seeds):
                rows.append(
                    {
                        "policy": p,
                        "task": t,
                        "seed": 100 + s,
                        "judges": {judge: s < round(rate * seeds)},
                        "gate_discard": bool(discard_every and s % discard_every == 0),
                    }
                )
    return rows


def test_diagnostics_from_rows_equal_direct_counts():
    world = _rows({"p1": 1.0, "p2": 0.5}, discard_every=3)
    shuffled = _rows({"p1": 0.5, "p2": 0.0})
    drift = [{"task": t, "seed": 100 + s, "world": 2.0 + s, "copy": 4.0} for t in TASKS for s in range(6)]
    d = tr.diagnostics_from_rows(world, judge="vision", shuffled_rows=shuffled, drift_rows=drift, n_boot=300, world="w")
    discard = np.mean([r["gate_discard"] for r in world])
    assert d["gate_discard"]["value"] == pytest.approx(discard) and d["gate_discard"]["n"] == len(world)
    gap = np.mean([r["judges"]["vision"] for r in world]) - np.mean([r["judges"]["vision"] for r in shuffled])
    assert d["shuffled_gap"]["value"] == pytest.approx(gap)
    assert d["shuffled_gap"]["world_rate"] == pytest.approx(0.75) and d["shuffled_gap"][
        "shuffled_rate"
    ] == pytest.approx(0.25)
    assert d["drift_ratio"]["value"] == pytest.approx(np.mean([r["world"] for r in drift]) / 4.0)
    for name in tr.DIAGNOSTICS:  # every number with an interval around it
        lo, hi = d[name]["interval"]
        assert lo <= d[name]["value"] <= hi
    assert d["n_units"] == 12


def test_missing_diagnostics_say_why():
    world = [dict(r, gate_discard=None) for r in _rows({"p1": 1.0, "p2": 0.0})]
    d = tr.diagnostics_from_rows(world, judge="vision", n_boot=100, notes={"drift_ratio": "no clip here"})
    assert d["gate_discard"]["value"] is None and "gate" in d["gate_discard"]["reason"]
    assert d["shuffled_gap"]["value"] is None and "shuffled" in d["shuffled_gap"]["reason"]
    assert d["drift_ratio"]["reason"] == "no clip here"
    lines = tr.trust_lines(d, LADDER)
    assert sum("unavailable (" in line for line in lines) == 3


def _study():
    rows = []
    for world, rates in (
        ("reference", {"p1": 1.0, "p2": 0.0}),
        ("learned", {"p1": 1.0, "p2": 0.5}),
        ("control:shuffled", {"p1": 0.5, "p2": 0.5}),
        ("learned+gate", {"p1": 1.0, "p2": 0.5}),
    ):
        for r in _rows(rates, discard_every=2 if world == "learned+gate" else 0):
            rows.append(
                {
                    "world": world,
                    "policy": r["policy"],
                    "task": r["task"],
                    "seed": r["seed"],
                    "judges": {"vision": r["judges"]["vision"], "state": r["judges"]["vision"]},
                    "discarded": r["gate_discard"],
                }
            )
    return {
        "config": {"world": "Kosmos-TabletopLearned-v1"},
        "rows": rows,
        "frame_error": {"n_episodes": 4, "ratio": {20: 0.6}, "ratio_interval": {20: [0.5, 0.7]}},
    }


def test_diagnostics_from_study_reads_gate_control_and_frame_error():
    d = tr.diagnostics_from_study(_study(), judge="vision", n_boot=200)
    assert d["gate_discard"]["value"] == pytest.approx(0.5)  # seeds 0, 2, 4 of 6 discarded
    assert d["shuffled_gap"]["value"] == pytest.approx(0.75 - 0.5)
    assert d["drift_ratio"]["value"] == 0.6 and d["drift_ratio"]["interval"] == [0.5, 0.7]
    bare = {
        **_study(),
        "rows": [r for r in _study()["rows"] if r["world"] in ("reference", "learned")],
        "frame_error": {"n_episodes": 0},
    }
    d = tr.diagnostics_from_study(bare, n_boot=100)
    assert "without --gate" in d["gate_discard"]["reason"] and "--control shuffled" in d["shuffled_gap"]["reason"]
    with pytest.raises(ValueError, match="no episode rows"):
        tr.diagnostics_from_study({"rows": []})


def _rung(name, k, k_iv, discard, gap, drift):
    def e(v, w=0.05):
        return {"value": v, "interval": [v - w, v + w], "n": 40}

    return {
        "name": name,
        "kendall": {"vision": {"value": k, "interval": k_iv, "constant": False}},
        "diagnostics": {"gate_discard": e(discard), "drift_ratio": e(drift), "vision": {"shuffled_gap": e(gap)}},
    }


LADDER = {
    "judges": ["vision"],
    "source": "synthetic ladder",
    "rungs": [
        _rung("null", 0.0, [0.0, 0.0], 1.0, 0.0, 1.0),
        _rung("half", 0.5, [0.3, 0.7], 0.4, 0.1, 0.7),
        _rung("good", 0.8, [0.7, 0.9], 0.1, 0.3, 0.4),
        _rung("sim", 1.0, [1.0, 1.0], 0.02, 0.35, 0.0),
    ],
    "prediction": {
        "vision": {
            "gate_discard": {"value": -0.9, "interval": [-1.0, -0.6]},
            "shuffled_gap": {"value": 0.4, "interval": [-0.2, 0.9]},
            "drift_ratio": {"value": -0.8, "interval": [-1.0, -0.5]},
            "combined": {"value": 0.9, "interval": [0.6, 1.0]},
        }
    },
}


def test_trust_lines_read_against_the_ladder():
    d = {
        "world": "W",
        "judge": "vision",
        "gate_discard": {"value": 0.12, "interval": [0.08, 0.17], "n": 50},
        "shuffled_gap": {"value": 0.3, "interval": [0.25, 0.36], "n": 50, "world_rate": 0.5, "shuffled_rate": 0.2},
        "drift_ratio": {"value": 0.42, "interval": [0.38, 0.46], "n": 10},
    }
    lines = tr.trust_lines(d, LADDER)
    gate = next(line for line in lines if "gate discards" in line)
    assert "12 % [8, 17]" in gate and "(good)" in gate and "Kendall 0.80" in gate and "goes with agreement" in gate
    gap = next(line for line in lines if "shuffled ones" in line)
    assert "good, sim" in gap and "0.80-1.00" in gap and "does NOT reliably predict" in gap
    assert any("combined standing" in line and "goes with agreement" in line for line in lines)
    # the upper ladder (worlds whose judge ranks at all) is read too
    upper = dict(
        LADDER,
        prediction_upper={
            "vision": {
                "shuffled_gap": {"value": -0.2, "interval": [-0.9, 0.9]},
                "gate_discard": {"value": None, "interval": None},
            }
        },
    )
    lines = tr.trust_lines(d, upper)
    assert "does not order agreement (Spearman -0.20 [-0.90, +0.90])" in next(x for x in lines if "shuffled ones" in x)
    assert "constant and says nothing" in next(x for x in lines if "gate discards" in x)
    # no overlap with any rung: the nearest one is named
    far = dict(d, gate_discard={"value": 0.7, "interval": [0.65, 0.75], "n": 50})
    assert "(half)" in next(line for line in tr.trust_lines(far, LADDER) if "gate discards" in line)


def test_combined_score_is_the_standing_among_rungs():
    best = {"gate_discard": {"value": 0.0}, "shuffled_gap": {"value": 0.5}, "drift_ratio": {"value": -1.0}}
    worst = {"gate_discard": {"value": 1.01}, "shuffled_gap": {"value": -0.1}, "drift_ratio": {"value": 2.0}}
    assert tr.combined_score(best, LADDER) == 1.0 and tr.combined_score(worst, LADDER) == 0.0
    # one diagnostic only: it alone decides; equal to a rung counts half of that rung
    assert tr.combined_score({"gate_discard": {"value": 0.4}}, LADDER) == pytest.approx((1 + 0.5) / 4)
    assert tr.combined_score({}, LADDER) is None


def test_gate_replay_matches_the_envs_gate():
    """Replaying a finished rollout through a fresh gate discards exactly when the env's own gate does."""
    import gymnasium

    import kosmos_env  # noqa: F401
    from kosmos_env.policies import make_policy
    from kosmos_env.rollouts import run_episode
    from kosmos_env.spec import load_spec
    from kosmos_env.worlds import make_world
    from kosmos_env.worlds.null import NullWorld

    spec = load_spec("Kosmos-Tabletop-v1").with_overrides(image_size=[64, 64], horizon=12)
    gate = tr.gate_spec_for(spec)
    policy = make_policy("scripted", skill=1.0)
    for world in (None, NullWorld(make_world(spec), spec.world)):
        verdicts = []
        for gate_cfg in (gate, {"enabled": False}):
            env = gymnasium.make(
                "Kosmos-Tabletop-v1",
                defer_judging=True,
                image_size=(64, 64),
                horizon=12,
                gate=gate_cfg,
                **({"world_model": world} if world is not None else {}),
            )
            res = run_episode(env, policy, seed=200001, task="carrot_on_plate")
            verdicts.append(
                res.outcome == "discarded"
                if gate_cfg["enabled"]
                else tr.replay_gate(gate, res.rollout, 1, env.unwrapped.world.calibration)
            )
            env.close()
        assert verdicts[0] == verdicts[1]
        assert verdicts[0] is (world is not None)  # the frozen null world is discarded, the simulator passes


def _err(argv, capsys) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_trust_cli_refuses_bad_input_in_one_line(capsys):
    assert "Nope-v0" in _err(["trust", "--env", "Nope-v0"], capsys)
    assert "--seeds must be >= 2" in _err(["trust", "--env", "Kosmos-Tabletop-v1", "--seeds", "1"], capsys)
    assert "--world-kwargs" in _err(["trust", "--env", "Kosmos-Tabletop-v1", "--world-kwargs", "{bad"], capsys)
    assert "unknown task" in _err(["trust", "--env", "Kosmos-Tabletop-v1", "--tasks", "nope", "--quiet"], capsys)


def test_trust_cli_on_the_simulator(capsys, tmp_path):
    """The simulator against itself: no drift, a gap from the judge, lines read against the ladder."""
    out = tmp_path / "d.json"
    assert (
        cli.main(
            [
                "trust",
                "--env",
                "Kosmos-Tabletop-v1",
                "--policies",
                "scripted:skill=1.0",
                "random",
                "--tasks",
                "carrot_on_plate",
                "--seeds",
                "2",
                "--seed-offset",
                "200000",
                "--n-boot",
                "100",
                "--quiet",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    d = json.loads(out.read_text())
    assert (
        d["drift_ratio"]["value"] == 0.0 and d["n_episodes"] == 4 and d["seeds"] == [201000, 201001]
    )  # carrot_on_plate is task 1
    assert d["gate_discard"]["value"] is not None
    assert "how far to trust Kosmos-Tabletop-v1" in text and "drift" in text


def test_analyze_prints_the_trust_section(tmp_path, capsys):
    from tests.support.report_bundle import make_bundle

    d = make_bundle(tmp_path / "c", seeds=4, rng_seed=3)
    rows = json.loads((d / "results.json").read_text())["per_episode"]
    assert cli.main(["analyze", str(d), "--n-boot", "200", "--n-splits", "20", "--no-write"]) == 0
    out = capsys.readouterr().out
    share = np.mean([r["outcome"] == "discarded" for r in rows])
    assert f"the gate discards {100 * share:.0f} %" in out
    assert "shuffled-command gap: unavailable" in out and "kosmos-env trust --env" in out


def test_committed_ladder_has_every_rung_number_with_an_interval():
    ladder = tr.load_ladder()
    if ladder is None:
        pytest.skip("no ladder reference installed")
    assert len(ladder["rungs"]) >= 3
    for r in ladder["rungs"]:
        for j in ladder["judges"]:
            assert r["kendall"][j]["value"] is not None
        assert set(tr.DIAGNOSTICS) <= set(r["diagnostics"]) | {"shuffled_gap"}
    for j in ladder["judges"]:
        assert set(ladder["prediction"][j]) == {*tr.DIAGNOSTICS, "combined"}


COLLAPSED = re.compile(r"\[([+-]?\d+\.\d+), \1\]")


def _campaign_on(tmp_path, world: dict, judge: dict) -> Path:
    """The synthetic campaign with a spec whose world and judge are ``world`` and ``judge``."""
    from kosmos_env.spec import load_spec
    from tests.support.report_bundle import make_bundle

    d = make_bundle(tmp_path / "c", seeds=4, rng_seed=3)
    results = json.loads((d / "results.json").read_text())
    spec = load_spec("Kosmos-Tabletop-v1").to_dict()
    results["campaign"]["spec"] = {**spec, "world": {**spec["world"], **world}, "judge": judge}
    (d / "results.json").write_text(json.dumps(results))
    return d


def _trust_part(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("how far to trust"))
    return [line for line in lines[start:] if line.strip() and not line.startswith("wrote ")]


def test_analyze_on_the_simulator_says_in_one_line_why_trust_is_trivial(tmp_path, capsys):
    """The simulator is the ground truth the diagnostics are read against: no trust block (whose
    ladder line read "Spearman -0.39 [-0.39, -0.39]"), one line saying why."""
    d = _campaign_on(tmp_path, {}, {"type": "state"})
    assert cli.main(["analyze", str(d), "--n-boot", "200", "--n-splits", "20"]) == 0
    trust = _trust_part(capsys.readouterr().out)
    assert len(trust) == 1 and "nothing to measure, it is the simulator" in trust[0], trust
    assert "judge reads the simulator's own state" in trust[0]
    assert "Spearman" not in trust[0] and "gate discards" not in trust[0]
    saved = json.loads((d / "analysis.json").read_text())["trust"]
    assert saved == {"world": "Kosmos-Tabletop-v1", "judge": "campaign", "ground_truth": trust[0]}
    # another judge on the simulator: the world is still the truth, the line names what can be wrong
    line = tr.ground_truth_world(
        {"env_id": "Kosmos-Tabletop-v1", "spec": {"world": {"type": "tabletop"}, "judge": {"type": "vision"}}}
    )
    assert "its vision judge is what can be wrong here" in line and "--judges RUN campaign state" in line


@pytest.mark.parametrize(
    "world",
    [{"type": "tabletop_learned"}, {"control": {"type": "shuffled"}}],
    ids=["learned world", "shuffled control on the simulator"],
)
def test_analyze_keeps_the_trust_block_where_trust_is_a_question(tmp_path, capsys, world):
    d = _campaign_on(tmp_path, world, {"type": "state"})
    assert tr.ground_truth_world(json.loads((d / "results.json").read_text())["campaign"]) is None
    assert cli.main(["analyze", str(d), "--n-boot", "200", "--n-splits", "20", "--no-write"]) == 0
    trust = _trust_part(capsys.readouterr().out)
    assert len(trust) > 1 and any("the gate discards" in line for line in trust)
    assert not any(COLLAPSED.search(line) for line in trust), trust


def test_ladder_correlations_never_print_as_a_collapsed_interval():
    """A rank correlation whose interval is narrower than the printed decimals gets the decimals
    that show its width (the committed ladder's gate-discard Spearman is -0.3898 [-0.3937, -0.3898])."""
    narrow = dict(
        LADDER,
        prediction={
            "vision": {
                **LADDER["prediction"]["vision"],
                "gate_discard": {"value": -0.3898, "interval": [-0.3937, -0.3898]},
            }
        },
    )
    d = {"world": "W", "judge": "vision", "gate_discard": {"value": 0.12, "interval": [0.08, 0.17], "n": 50}}
    gate = next(line for line in tr.trust_lines(d, narrow) if "gate discards" in line)
    assert "Spearman -0.390 [-0.394, -0.390]" in gate and not COLLAPSED.search(gate)
    ladder = tr.load_ladder()
    if ladder is not None:  # the committed reference, read by every analyze of a learned world
        lines = tr.trust_lines(d, ladder)
        assert not any(COLLAPSED.search(line) for line in lines), lines


def test_a_diagnostic_predicts_only_when_its_interval_and_its_permutation_p_agree():
    """The ladder's registered rule: interval excluding 0 in the expected direction AND p < 0.05 over
    rungs; an interval alone (five rungs can give one by chance) does not make a predictor."""
    d = {"world": "W", "judge": "vision", "drift_ratio": {"value": 0.42, "interval": [0.38, 0.46], "n": 10}}

    def upper(p):
        entry = {"value": -0.4, "interval": [-0.8, -0.1], "rungs": 10, "p_value": p}
        return {**LADDER, "prediction_upper": {"vision": {**LADDER["prediction"]["vision"], "drift_ratio": entry}}}

    weak = next(line for line in tr.trust_lines(d, upper(0.15)) if "drift" in line)
    strong = next(line for line in tr.trust_lines(d, upper(0.01)) if "drift" in line)
    assert "does not order agreement" in weak and "permutation p = 0.150 over 10 rungs" in weak
    assert "among worlds whose judge ranks at all too" in strong and "p = 0.010" in strong
