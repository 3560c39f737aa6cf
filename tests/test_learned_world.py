"""The learned tabletop: kinematics, a tiny end-to-end training run, the shipped weights, the env."""
from __future__ import annotations

import json

import gymnasium
import numpy as np
import pytest

import kosmos_env  # noqa: F401
from kosmos_env.spec import load_spec

ENV_ID = "Kosmos-TabletopLearned-v1"


def test_integrated_pose_matches_the_simulators_commanded_pose():
    from kosmos_env.worlds.tabletop.world import TabletopWorld
    from kosmos_env.worlds.tabletop_learned.kinematics import PoseIntegrator, matrix_to_euler

    spec = load_spec("Kosmos-Tabletop-v1").with_overrides(image_size=[64, 64])
    sim = TabletopWorld(spec)
    from kosmos_env.tasks import load_suite

    task = load_suite("tabletop").tasks["carrot_on_plate"]
    sim.reset(task, np.random.default_rng(0))
    integ = PoseIntegrator(spec.world)
    rng = np.random.default_rng(1)
    low, high = spec.action_low_array, spec.action_high_array
    for _ in range(12):  # large random moves: hits the workspace and tilt limits
        a = rng.uniform(low, high).astype(np.float32)
        sim.step(a[None])
        integ.step(a)
        np.testing.assert_allclose(integ.pos, sim._tcp, atol=1e-9)
        np.testing.assert_allclose(integ.euler, matrix_to_euler(sim._rot), atol=1e-9)
    # the measured TCP follows the commanded one closely
    assert np.linalg.norm(sim.tcp_position() - integ.pos) < 0.01
    sim.close()


def test_heatmap_peaks_at_the_projected_tool_point():
    from kosmos_env.worlds.tabletop_learned.kinematics import HeatmapRenderer

    world = load_spec("Kosmos-Tabletop-v1").world
    render = HeatmapRenderer(world["camera"])
    pos = np.array([0.3, 0.05, 0.05])
    heat = render(pos, np.eye(3))
    u, v = render.calibration.project(pos[None])[0]
    assert heat.shape == (64, 64) and 0.9 < heat.max() <= 1.0
    assert heat[int(v), int(u)] > 0.5


def test_wrong_resolution_is_refused_with_a_clear_error():
    with pytest.raises(ValueError, match="64x64 only"):
        gymnasium.make(ENV_ID, image_size=(128, 128))


def test_shipped_weights_load_match_the_spec_and_are_small():
    from kosmos_env.worlds.tabletop_learned.model import NextFrameNet, load_weights
    from kosmos_env.judges.vision_frame import load_classifier, shipped_classifier_path
    from kosmos_env.worlds.tabletop_learned.world import file_sha256, weights_dir

    spec = load_spec(ENV_ID)
    path = weights_dir() / spec.world["weights"]
    assert path.stat().st_size < 10 * 2**20
    assert file_sha256(path) == spec.world["weights_sha256"]
    model, info = load_weights(path)
    assert isinstance(model, NextFrameNet)
    err = info["heldout_error"]
    assert all(m < c for m, c in zip(err["model_mse"], err["copy_mse"]))  # what training measured
    assert shipped_classifier_path().stat().st_size < 2 * 2**20
    load_classifier()


def test_env_step_predicts_frames_integrates_pose_and_logs_gripper():
    env = gymnasium.make(ENV_ID)
    obs, info = env.reset(seed=3, options={"task": "spoon_on_towel"})
    ref = gymnasium.make("Kosmos-Tabletop-v1", image_size=(64, 64))
    ref_obs, _ = ref.reset(seed=3, options={"task": "spoon_on_towel"})
    np.testing.assert_array_equal(obs["image"], ref_obs["image"])  # same seed, same first scene
    action = np.array([0.03, 0.0, -0.03, 0, 0, 0.1, 1.0], dtype=np.float32)
    for _ in range(3):
        obs, reward, terminated, truncated, info = env.step(action)
    assert obs["image"].shape == (64, 64, 3) and obs["image"].dtype == np.uint8
    np.testing.assert_allclose(obs["ee_pos"], [0.39, 0.0, 0.06], atol=1e-5)
    np.testing.assert_allclose(obs["ee_euler"][2], 0.3, atol=1e-5)
    assert 0.0 <= obs["gripper"][0] <= 1.0
    assert env.unwrapped.world.evaluate() is None
    log = env.unwrapped.rollout().log
    assert set(log) == {"ee_pos", "gripper_cmd", "gripper_measured"} and len(log["ee_pos"]) == 3
    # the gripper moved in the picture: frames differ from the first one near the robot
    assert np.abs(obs["image"].astype(int) - ref_obs["image"].astype(int)).max() > 30
    env.close()
    ref.close()


@pytest.mark.slow
def test_shipped_model_beats_copy_last_frame_on_fresh_episodes():
    """Fresh layouts (seeds never recorded for training), several policies: model < copy at h = 1..10."""
    from kosmos_env.worlds.tabletop_learned.dataset import record
    from kosmos_env.worlds.tabletop_learned.model import load_weights
    from kosmos_env.worlds.tabletop_learned.train import multistep_error, prepare
    from kosmos_env.worlds.tabletop_learned.world import weights_dir

    from kosmos_env.policies import make_policy

    policies = {"scripted:skill=1.0": make_policy("scripted", skill=1.0),
                "scripted:skill=0.6": make_policy("scripted", skill=0.6), "random": make_policy("random")}
    eps = record(policies, seeds_per_task=1, seed_offset=777000, progress=False)
    model, _ = load_weights(weights_dir() / "world.safetensors")
    result = multistep_error(model, prepare(eps, load_spec("Kosmos-Tabletop-v1").world), horizon=10, stride=10, threads=1)
    assert all(m < c for m, c in zip(result["model_mse"], result["copy_mse"])), result


@pytest.mark.slow
def test_tiny_training_run_end_to_end(tmp_path):
    """Record tiny data, train a tiny model and vision judge a few steps, save, load, run the env on it."""
    from kosmos_env.cli import main
    from kosmos_env.worlds.tabletop_learned.model import load_weights
    from kosmos_env.judges.vision_frame import FrameVisionJudge
    from kosmos_env.worlds.tabletop_learned.world import file_sha256

    out = tmp_path / "w"
    report = tmp_path / "err.txt"
    rc = main(["train-world", "--data", str(tmp_path / "eps.npz"), "--policies", "scripted:skill=1.0", "random",
               "--seeds-per-task", "3", "--holdout", "0.34", "--steps", "3", "--batch", "2", "--judge-steps", "3",
               "--channels", "4", "4", "4", "4", "--out-dir", str(out), "--error-report", str(report), "--quiet"])
    assert rc == 0
    assert (tmp_path / "eps.npz").is_file()
    model, info = load_weights(out / "world.safetensors")
    assert model.config["channels"] == [4, 4, 4, 4]
    assert info["heldout_episodes"] == 8 and len(info["heldout_error"]["model_mse"]) == 10
    text = report.read_text()
    assert "copy_mse" in text and "train-world" in text and "vision judge" in text
    # the env runs on the new weights once the spec is bound to them (a different world, a new hash)
    spec = load_spec(ENV_ID).with_overrides(world={"weights_sha256": file_sha256(out / "world.safetensors")})
    env = gymnasium.make(ENV_ID, env_spec=spec, world_kwargs={"weights_path": str(out / "world.safetensors")})
    env.reset(seed=0)
    obs, *_ = env.step(env.action_space.sample())
    assert obs["image"].shape == (64, 64, 3)
    env.close()
    # an unbound file is refused: different weights are a different world
    env = gymnasium.make(ENV_ID, world_kwargs={"weights_path": str(out / "world.safetensors")})
    with pytest.raises(ValueError, match="sha256"):
        env.reset(seed=0)
    judge = FrameVisionJudge(weights=str(out / "vision_judge.safetensors"))
    from kosmos_env.judges.base import Rollout

    verdict = judge.judge(Rollout(frames=np.zeros((2, 64, 64, 3), np.uint8), instruction="x", actions=np.zeros((1, 7)),
                                  fps=5, task="carrot_on_plate"))
    assert verdict.success in (True, False) and 0.0 <= verdict.score <= 1.0
    json.dumps(info)
