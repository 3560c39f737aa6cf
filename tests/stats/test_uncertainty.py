"""Agreement with its uncertainty, the action-only judge, the null world, deceptive policies, and
analyze's --reference --map and --cost-sweep."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from kosmos_env.stats.uncertainty import agreement_uncertainty, permutation_test
from tests.support.paths import DATA


def test_permutation_p_value_is_exact_for_few_policies():
    r = [0.1, 0.4, 0.6, 0.9]
    res = permutation_test(r, r, "kendall")
    assert res["method"] == "exact" and res["p_value"] == pytest.approx(1 / 24)  # only the identity is as good
    assert res["null_mean"] == pytest.approx(0.0, abs=1e-12)  # why a mean is no floor: it is 0 by symmetry
    assert 0 < res["null_quantile"] < 1
    worst = permutation_test(r[::-1], r, "kendall")
    assert worst["p_value"] == pytest.approx(1.0)
    mm = permutation_test(r, r, "mmrv")
    assert mm["p_value"] == pytest.approx(1 / 24)


def test_bootstrap_interval_covers_and_differences_are_paired():
    rng = np.random.default_rng(1)
    rates = np.linspace(0.05, 0.95, 8)
    truth = (rng.random((8, 40)) < rates[:, None]).astype(float)
    noisy = np.where(rng.random(truth.shape) < 0.1, 1 - truth, truth)  # 10 % of episodes misjudged
    res = agreement_uncertainty({"same": truth.copy(), "noisy": noisy}, truth, baselines=["noisy"], n_boot=400)
    same = res["evaluators"]["same"]["kendall"]
    assert same["value"] == 1.0 and same["interval"] == [1.0, 1.0]
    nz = res["evaluators"]["noisy"]["kendall"]
    assert nz["interval"][0] <= nz["value"] <= nz["interval"][1] and nz["p_value"] < 0.01
    d = res["differences"]["same"]["noisy"]["kendall"]
    assert d["estimate"] == pytest.approx(1.0 - nz["value"]) and d["interval"][0] >= 0
    with pytest.raises(ValueError, match="pair up"):
        agreement_uncertainty({"x": truth[:, :5]}, truth)


def test_mdd_is_never_zero_from_zero_variance():
    from kosmos_env.stats.detectable import NotEstimable, detectable_summary, mdd_paired, mdd_two_proportion

    with pytest.raises(NotEstimable, match="resolution is 1/10"):
        mdd_paired(np.ones(10))
    with pytest.raises(NotEstimable):
        mdd_two_proportion(0.0, 20)
    m = np.zeros((3, 10))
    m[0, :] = 1.0
    s = detectable_summary(m, ["a", "b", "c"])
    assert s.paired_mdd_median is None and s.n_pairs_not_estimable == 3 and s.resolution == pytest.approx(0.1)


def test_horizon_undefined_neither_passes_nor_breaks():
    from kosmos_env.stats.horizon import horizon_agreement

    res = horizon_agreement(
        [[0, 0, 0], [0.1, 0.2, 0.3], [0.1, 0.2, 0.3]], [5, 10, 40], metric="kendall", threshold=0.8, floor=False
    )
    assert res.undefined_horizons == [5] and res.break_horizon is None and res.shortest_safe_horizon == 10


def _pick_and_place(close_at: int = 5) -> np.ndarray:
    a = np.zeros((30, 7))
    a[:, 6] = 1.0
    a[:3, 2] = -0.04  # down to the object
    a[close_at:20, 6] = 0.0  # closed from close_at on
    a[8:11, 2] = 0.04  # lift
    a[11:15, 0] = 0.03  # carry 12 cm
    return a


def test_action_only_judge_reads_commands_only():
    from kosmos_env.judges import Rollout, make_judge

    judge = make_judge("action_only")
    ok = judge.judge(
        Rollout(frames=np.zeros((31, 4, 4, 3), np.uint8), instruction="x", actions=_pick_and_place(), fps=5)
    )
    assert ok.success
    no_lift = _pick_and_place()
    no_lift[8:11, 2] = 0.0
    assert not judge.judge(
        Rollout(frames=np.zeros((31, 4, 4, 3), np.uint8), instruction="x", actions=no_lift, fps=5)
    ).success
    # the workspace clips: commanding through the table lifts nothing
    from kosmos_env.judges.action_only import action_log

    log = action_log(np.tile([0, 0, -0.05, 0, 0, 0, 1.0], (10, 1)))
    assert log["ee_pos"][:, 2].min() == pytest.approx(0.004)


class _StubWorld:
    frames_per_action = 1
    calibration = None

    def state_space(self):
        return {}

    def load(self):
        pass

    def reset(self, task, rng):
        from kosmos_env.worlds.base import WorldReset

        frame = np.arange(48, dtype=np.uint8).reshape(4, 4, 3)
        return WorldReset(
            frame=frame,
            state={"ee_pos": np.array([0.3, 0.0, 0.15]), "ee_euler": np.zeros(3), "gripper": np.array([1.0])},
        )

    def step(self, actions):
        raise AssertionError("the null world must never step the world it wraps")

    def close(self):
        pass


def test_null_world_copies_the_first_frame_and_grasps_nothing():
    from kosmos_env.worlds.null import NullWorld

    w = NullWorld(_StubWorld(), {"home_tcp": [0.3, 0.0, 0.15], "workspace": [[0.1, 0.6], [-0.3, 0.3], [0.004, 0.3]]})
    first = w.reset(None, np.random.default_rng(0)).frame
    out = w.step(_pick_and_place()[:12])
    assert (out.frames == first[None]).all() and out.frames.shape[0] == 12
    assert np.array_equal(out.log["gripper_measured"], out.log["gripper_cmd"])
    assert out.log["ee_pos"][2, 2] == pytest.approx(0.15 - 0.12)
    with pytest.raises(ValueError, match="mode"):
        NullWorld(_StubWorld(), {"home_tcp": [0, 0, 0], "workspace": [[0, 1]] * 3}, mode="last")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["grasp_miss", "wrong_target"])
def test_deceptive_policy_fools_the_action_only_judge_not_the_simulator(mode):
    import gymnasium

    import kosmos_env  # noqa: F401
    from kosmos_env.judges.action_only import ActionOnlyJudge
    from kosmos_env.policies import make_policy
    from kosmos_env.rollouts import run_episode

    env = gymnasium.make("Kosmos-Tabletop-v1", image_size=(64, 64), gate={"enabled": False})
    try:
        res = run_episode(env, make_policy("deceptive", mode=mode, rate=1.0), seed=100001, task="carrot_on_plate")
    finally:
        env.close()
    assert res.ground_truth["success"] is False
    assert ActionOnlyJudge().judge(res.rollout).success


def test_deceptive_policy_rate_is_validated():
    from kosmos_env.policies import make_policy

    with pytest.raises(ValueError, match="mode"):
        make_policy("deceptive", mode="teleport")
    with pytest.raises(ValueError, match="rate"):
        make_policy("deceptive", rate=1.5)


# -- analyze --reference --map and --cost-sweep ------------------------------------------------
@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    from tests.support.report_bundle import make_bundle

    return make_bundle(tmp_path_factory.mktemp("val") / "c", seeds=6, rng_seed=5)


def _err(argv, capsys):
    from kosmos_env.cli import main

    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    return err[0]


SIMPLER = DATA / "simpler_widowx.csv"
MAP = (
    "rt-1-x=random;octo-base=scripted:skill=0.5;octo-small=scripted:skill=1.0;"
    "widowx_carrot_on_plate=carrot_on_plate;widowx_stack_cube=stack_cube"
)


def _two_task_csv(tmp_path) -> Path:
    lines = [ln for ln in SIMPLER.read_text().splitlines() if ln.startswith(("task", "widowx_carrot", "widowx_stack"))]
    p = tmp_path / "simpler_two_tasks.csv"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_reference_map_joins_a_published_table(campaign, tmp_path, capsys):
    from kosmos_env.cli import main

    d = Path(shutil.copytree(campaign, tmp_path / "c"))
    csv = _two_task_csv(tmp_path)
    assert (
        main(
            [
                "analyze",
                str(d),
                "--reference",
                str(csv),
                "--map",
                MAP,
                "--n-boot",
                "200",
                "--n-splits",
                "20",
                "--no-write",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "agreement with reference" in out and "permutation p-values" in out and "baseline/action_only" in out
    msg = _err(["analyze", str(d), "--reference", str(SIMPLER), "--map", MAP, "--no-write"], capsys)
    assert "do not map" in msg and "widowx_spoon_on_towel" in msg
    msg = _err(["analyze", str(d), "--reference", str(csv), "--map", "rt-1-x=openvla", "--no-write"], capsys)
    assert "openvla" in msg
    msg = _err(["analyze", str(d), "--map", MAP, "--no-write"], capsys)
    assert "--reference" in msg


def test_cost_sweep_over_campaign_runs(campaign, tmp_path, capsys):
    from kosmos_env.cli import main

    a = Path(shutil.copytree(campaign, tmp_path / "cheap"))
    b = Path(shutil.copytree(campaign, tmp_path / "dear"))
    assert main(["analyze", "--cost-sweep", str(a), str(b), "--n-boot", "200"]) == 0
    out = capsys.readouterr().out
    assert "answer: the cheapest run that holds the bar is" in out and "judge share" in out
    msg = _err(["analyze", "--cost-sweep", str(a)], capsys)
    assert "at least 2" in msg


def test_history_shuffled_world_executes_only_earlier_commands():
    from kosmos_env.worlds.shuffled import ShuffledCommandWorld

    executed = []

    class Inner(_StubWorld):
        def step(self, actions):
            executed.append(np.asarray(actions).copy())
            return None

    w = ShuffledCommandWorld(Inner(), history=True)
    w.reset(None, np.random.default_rng(3))
    given = [np.full(7, float(i), dtype=np.float32) for i in range(20)]
    for t, a in enumerate(given):
        w.step(a[None])
        assert executed[-1][0, 0] <= t  # never a command not yet given
    assert len({float(e[0, 0]) for e in executed}) > 3
    assert any(float(e[0, 0]) != t for t, e in enumerate(executed))  # decoupled in time


@pytest.mark.slow
def test_eval_control_shuffled_is_a_different_world(tmp_path, capsys):
    import json

    from kosmos_env.cli import main

    out = tmp_path / "ctl"
    rc = main(
        [
            "eval",
            "--policy",
            "scripted:skill=1.0",
            "--tasks",
            "carrot_on_plate",
            "--seeds",
            "1",
            "--no-video",
            "--no-progress",
            "--control",
            "shuffled",
            "--out",
            str(out),
        ]
    )
    assert rc in (0, 1)
    res = json.loads((out / "results.json").read_text())
    from kosmos_env.spec import load_spec

    assert res["campaign"]["spec_hash"] != load_spec("Kosmos-Tabletop-v1").hash
    assert [e["outcome"] for e in res["per_episode"]] != ["success"]  # the expert's commands no longer act
    capsys.readouterr()
    msg = _err(["eval", "--registration", str(tmp_path / "r.json"), "--control", "shuffled", "--out", str(out)], capsys)
    assert "--control" in msg
