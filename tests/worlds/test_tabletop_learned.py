"""The learned tabletop: kinematics, object state, a tiny end-to-end training run, the shipped weights, the env."""

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


def test_world_code_version_is_in_the_spec_hash():
    """The engine's rules are code, not weights: their version enters the spec hash, so results of
    the same weights under different rules never share a hash."""
    import kosmos_env.spec as spec_module
    from kosmos_env.worlds.tabletop_learned import world as learned_world

    assert spec_module.WORLD_VERSIONS["tabletop_learned"] == learned_world.WORLD_VERSION
    spec = load_spec("Kosmos-TabletopLearned-v1")
    versions = dict(spec_module.WORLD_VERSIONS)
    before = spec.hash
    try:
        spec_module.WORLD_VERSIONS["tabletop_learned"] = "999"
        assert spec.hash != before
    finally:
        spec_module.WORLD_VERSIONS.clear()
        spec_module.WORLD_VERSIONS.update(versions)
    assert spec.hash == before


def test_shipped_weights_load_match_the_spec_and_are_small():
    from kosmos_env.hashing import sha256_file
    from kosmos_env.judges.vision_frame import load_classifier, shipped_classifier_path
    from kosmos_env.worlds.tabletop_learned.model import LearnedTabletop, load_weights
    from kosmos_env.worlds.tabletop_learned.world import weights_dir

    spec = load_spec(ENV_ID)
    path = weights_dir() / spec.world["weights"]
    assert path.stat().st_size < 10 * 2**20
    assert sha256_file(path) == spec.world["weights_sha256"]
    model, info = load_weights(path)
    assert isinstance(model, LearnedTabletop)
    err = info["heldout_error"]
    assert len(err["model_mse"]) == 20
    assert all(m < c for m, c in zip(err["model_mse"], err["copy_mse"], strict=True))  # what training measured
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
    """Fresh layouts (seeds never recorded for training), several policies: model < copy at h = 1..20."""
    from kosmos_env.policies import make_policy
    from kosmos_env.worlds.tabletop_learned.dataset import record
    from kosmos_env.worlds.tabletop_learned.model import load_weights
    from kosmos_env.worlds.tabletop_learned.train import multistep_error, prepare
    from kosmos_env.worlds.tabletop_learned.world import weights_dir

    policies = {
        "scripted:skill=1.0": make_policy("scripted", skill=1.0),
        "scripted:skill=0.6": make_policy("scripted", skill=0.6),
        "random": make_policy("random"),
    }
    eps = record(policies, seeds_per_task=1, seed_offset=777000, progress=False)
    model, _ = load_weights(weights_dir() / "world.safetensors")
    world = load_spec("Kosmos-Tabletop-v1").world
    result = multistep_error(model, prepare(eps, world), world, horizon=20, threads=1)
    assert all(m < c for m, c in zip(result["model_mse"], result["copy_mse"], strict=True)), result


@pytest.mark.slow
def test_tiny_training_run_end_to_end(tmp_path):
    """Record tiny data, train a tiny model and vision judge a few steps, save, load, run the env on it."""
    from kosmos_env.cli import main
    from kosmos_env.hashing import sha256_file
    from kosmos_env.judges.vision_frame import FrameVisionJudge
    from kosmos_env.worlds.tabletop_learned.model import load_weights

    out = tmp_path / "w"
    report = tmp_path / "err.txt"
    rc = main(
        [
            "train-world",
            "--data",
            str(tmp_path / "eps.npz"),
            "--policies",
            "scripted:skill=1.0",
            "random",
            "--seeds-per-task",
            "3",
            "--holdout",
            "0.34",
            "--steps",
            "3",
            "--batch",
            "2",
            "--judge-steps",
            "3",
            "--segmenter-steps",
            "2",
            "--dynamics-steps",
            "2",
            "--error-horizon",
            "5",
            "--channels",
            "4",
            "4",
            "4",
            "4",
            "--out-dir",
            str(out),
            "--error-report",
            str(report),
            "--quiet",
        ]
    )
    assert rc == 0
    assert (tmp_path / "eps.npz").is_file()
    model, info = load_weights(out / "world.safetensors")
    assert model.config["channels"] == [4, 4, 4, 4]
    assert info["heldout_episodes"] == 8 and len(info["heldout_error"]["model_mse"]) == 5
    text = report.read_text()
    assert "copy_mse" in text and "train-world" in text and "vision judge" in text and "object_cm" in text
    # the env runs on the new weights once the spec is bound to them (a different world, a new hash)
    spec = load_spec(ENV_ID).with_overrides(world={"weights_sha256": sha256_file(out / "world.safetensors")})
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

    verdict = judge.judge(
        Rollout(
            frames=np.zeros((2, 64, 64, 3), np.uint8),
            instruction="x",
            actions=np.zeros((1, 7)),
            fps=5,
            task="carrot_on_plate",
        )
    )
    assert verdict.success in (True, False) and 0.0 <= verdict.score <= 1.0
    json.dumps(info)


def test_shift_layers_moves_a_pixel_by_whole_pixels_and_keeps_its_mass():
    import torch

    from kosmos_env.worlds.tabletop_learned.objects import shift_layers

    layer = torch.zeros(1, 1, 16, 16)
    layer[0, 0, 5, 7] = 1.0
    moved = shift_layers(layer, torch.tensor([[3.0, -2.0]]))  # (du, dv): right 3, up 2
    assert moved[0, 0, 3, 10].item() == pytest.approx(1.0, abs=1e-5)
    half = shift_layers(layer, torch.tensor([[0.5, 0.0]]))  # sub-pixel: split between neighbours
    assert half[0, 0, 5, 7].item() == pytest.approx(0.5, abs=1e-5) and half[0, 0, 5, 8].item() == pytest.approx(
        0.5, abs=1e-5
    )


def test_sprite_alpha_keeps_one_opaque_object_and_drops_the_halo_and_stray_blobs():
    from kosmos_env.worlds.tabletop_learned.objects import sprite_alpha

    prob = np.full((2, 16, 16), 0.1, np.float32)  # a faint halo everywhere (the raw segmenter's)
    prob[0, 4:8, 4:8] = 0.9  # the object
    prob[0, 5, 9] = 0.6  # a separate, lighter blob (e.g. on the target)
    prob[0, 12, 2:14] = 0.25  # a faint ring segment below the threshold
    prob[0, 3, 4:8] = 0.4  # the object's soft edge, connected to it
    alpha = sprite_alpha(prob)
    assert alpha.shape == prob.shape and alpha.dtype == np.float32
    assert np.all(alpha[0, 4:8, 4:8] == 1.0)  # opaque inside the object
    assert alpha[0, 3, 5] == pytest.approx(0.8)  # the soft edge scaled, kept
    outside = np.ones((16, 16), bool)
    outside[3:8, 4:8] = False
    assert np.all(alpha[0][outside] == 0.0)  # no halo, no stray blob, no ring
    assert np.all(alpha[1] == 0.0)  # nothing above the threshold: no sprite


def test_the_renderer_redraws_where_the_object_started():
    import torch

    from kosmos_env.worlds.tabletop_learned.model import StateRenderer

    torch.manual_seed(0)
    net = StateRenderer().eval()  # untrained: its learned mask is near 0 (copies the first frame)
    first = torch.rand(1, 3, 64, 64)
    alpha_first = torch.zeros(1, 64, 64)
    alpha_first[0, 20:26, 30:36] = 1.0
    with torch.no_grad():
        frame, mask, content = net(
            first, alpha_first, torch.zeros(1, 4, 64, 64), torch.zeros(1, 4, 64, 64), torch.zeros(1, 17)
        )
    assert mask.max().item() < 0.1
    inside = (slice(None), slice(None), slice(20, 26), slice(30, 36))
    assert torch.allclose(frame[inside], content[inside], atol=1e-6)  # the old footprint is redrawn
    outside = torch.ones(64, 64, dtype=torch.bool)
    outside[20:26, 30:36] = False
    assert (frame - first)[..., outside].abs().max().item() < 0.1  # the rest is (nearly) the first frame


def test_mask_centre_back_projects_to_the_point_that_projects_there():
    from kosmos_env.worlds.tabletop.geometry import tabletop_calibration
    from kosmos_env.worlds.tabletop_learned.objects import locate, mask_centre

    world = load_spec("Kosmos-Tabletop-v1").world
    cal = tabletop_calibration(world["camera"], (64, 64))
    point = np.array([0.33, 0.05, 0.012])
    u, v = cal.project(point[None])[0]
    prob = np.zeros((64, 64))
    prob[int(v) - 1 : int(v) + 2, int(u) - 1 : int(u) + 2] = 1.0
    centre = mask_centre(prob)
    assert np.allclose(centre, [int(u) + 0.5, int(v) + 0.5])
    found, ok = locate(cal, prob, 0.012, (0.3, 0.0))
    assert ok and np.linalg.norm(found[:2] - point[:2]) < 0.012  # within a pixel's footprint
    assert mask_centre(np.zeros((64, 64))) is None
    assert locate(cal, np.zeros((64, 64)), 0.01, (0.3, 0.0)) == (pytest.approx(np.array([0.3, 0.0, 0.01])), False)


def test_vision_judge_and_world_agree_on_the_task_order():
    from kosmos_env.judges.vision_frame import TASKS as JUDGE_TASKS
    from kosmos_env.tasks import load_suite
    from kosmos_env.worlds.tabletop_learned.objects import TASKS

    assert TASKS == JUDGE_TASKS and set(TASKS) == set(load_suite("tabletop").tasks)


def test_actions_per_call_is_declared_sweepable_and_checked():
    from kosmos_env.study.sweep import declared_settings
    from kosmos_env.worlds.tabletop_learned.world import SWEEPABLE

    spec = load_spec(ENV_ID)
    declared = spec.world["sweep"]
    assert set(declared) <= set(SWEEPABLE) <= set(declared_settings(ENV_ID))  # study --sweep reaches it
    for name, values in declared.items():
        assert set(values) <= set(SWEEPABLE[name]) and spec.world[name] in values
    with pytest.raises(ValueError, match="actions_per_call"):
        gymnasium.make(ENV_ID, env_spec=spec.with_overrides(world={"actions_per_call": 7}))
    with pytest.raises(ValueError, match="sweep"):
        gymnasium.make(ENV_ID, env_spec=spec.with_overrides(world={"sweep": {"image_size": [32]}}))


def test_two_actions_per_call_halve_the_model_calls_and_end_on_a_generated_frame():
    spec = load_spec(ENV_ID).with_overrides(world={"actions_per_call": 2}, horizon=5)
    env = gymnasium.make(ENV_ID, env_spec=spec)
    env.reset(seed=5, options={"task": "carrot_on_plate"})
    action = np.array([0.03, 0.02, -0.02, 0, 0, 0, 1.0], dtype=np.float32)
    for _ in range(5):
        env.step(action)
    frames = env.unwrapped.rollout().frames
    same = [bool((frames[i] == frames[i - 1]).all()) for i in range(1, 6)]
    # steps 1, 3 repeat the last generated frame; 2, 4 call the model; 5 is the last step: always generated
    assert same == [True, False, True, False, False]
    env.close()


def test_the_renderer_draws_from_the_state_not_from_its_own_last_frame():
    """After the same 4 actions, one model call (4 actions per call) and four (1 per call) give
    the same frame: nothing generated earlier feeds back, so errors cannot compound into blur."""
    frames = {}
    for n in (1, 4):
        spec = load_spec(ENV_ID).with_overrides(world={"actions_per_call": n}, horizon=8)
        env = gymnasium.make(ENV_ID, env_spec=spec)
        env.reset(seed=11, options={"task": "eggplant_in_basket"})
        for a in (
            [0.04, 0.02, -0.03, 0, 0, 0.1, 1.0],
            [0.03, -0.02, -0.03, 0, 0, 0, 1.0],
            [0.0, 0.03, -0.02, 0, 0, 0, 0.0],
            [0.02, 0.0, 0.0, 0, 0, -0.1, 0.0],
        ):
            obs, *_ = env.step(np.asarray(a, dtype=np.float32))
        frames[n] = obs["image"]
        env.close()
    np.testing.assert_array_equal(frames[1], frames[4])


def _drive_to(env, engine, goal, grip, max_steps=12):
    """Servo the integrated tool point to ``goal`` with gripper command ``grip``."""
    for _ in range(max_steps):
        delta = np.clip(goal - engine.ee_pos()[0], -0.045, 0.045)
        env.step(np.array([*delta, 0, 0, 0, grip], dtype=np.float32))
        if np.linalg.norm(goal - engine.ee_pos()[0]) < 1e-3:
            return


def test_predicted_gripper_tells_an_empty_grasp_from_a_held_object():
    """Closing beside the object leaves the predicted opening at ~0 (an empty grasp for the
    robot-log judge); closing on it stops the fingers short and the object is held, lifted with them."""
    from kosmos_env.judges.robot_log import LogThresholds

    empty_gap = LogThresholds().empty_gap
    env = gymnasium.make(ENV_ID, horizon=40)
    for away, expect_held in ((0.0, True), (0.08, False)):
        env.reset(seed=31, options={"task": "stack_green_on_yellow"})
        engine = env.unwrapped.world._engine
        obj = engine.obj[0].numpy().astype(np.float64)
        from_target = obj[:2] - engine.target_xy[0].numpy()
        spot = np.array([*(obj[:2] + away * from_target / np.linalg.norm(from_target)), 0.1])  # away from the target
        _drive_to(env, engine, spot, 1.0)
        _drive_to(env, engine, np.array([*spot[:2], max(obj[2], 0.008)]), 1.0)
        for _ in range(3):
            env.step(np.array([0, 0, 0, 0, 0, 0, 0.0], dtype=np.float32))
        measured = env.unwrapped.rollout().log["gripper_measured"][-1]
        if expect_held:
            assert measured > 0.1 and engine.held[0].item() == 1.0
            start = engine.obj[0].numpy().copy()
            _drive_to(env, engine, np.array([*spot[:2], 0.12]), 0.0)
            assert engine.obj[0].numpy()[2] - start[2] > 0.05  # lifted with the gripper
        else:
            assert measured < empty_gap and engine.held[0].item() == 0.0
    env.close()


def test_a_scripted_pick_and_place_keeps_the_object_and_leaves_it_where_the_simulator_does():
    """Fresh layout (seed never recorded for training): the learned world's object is carried
    (it ends far from where it started) and ends on the plate where the simulator's does, and
    the object's colour is still visible in the last frame."""
    from kosmos_env.policies import make_policy
    from kosmos_env.rollouts import run_episode
    from kosmos_env.tasks import load_suite

    task = "carrot_on_plate"
    learned = gymnasium.make(ENV_ID)
    sim = gymnasium.make("Kosmos-Tabletop-v1", image_size=(64, 64), gate={"enabled": False})
    truth = run_episode(sim, make_policy("scripted", skill=1.0), seed=424242, task=task)
    result = run_episode(learned, make_policy("scripted", skill=1.0), seed=424242, task=task)
    engine = learned.unwrapped.world._engine
    final_obj = engine.obj[0].numpy()
    assert truth.ground_truth["success"]
    # the layout puts the carrot >= 0.14 m from the plate: on the plate means it was carried
    plate_radius = load_suite("tabletop").tasks[task].params["target"]["size"][0]
    assert np.linalg.norm(final_obj[:2] - np.asarray(truth.ground_truth["target_pos"])[:2]) < plate_radius
    # and near the simulator's final position: within 5 cm, about the mean held-out object error
    # after 40 steps (4.6 cm in bench/results/learned_world_error.txt); the plate check above is the claim
    assert np.linalg.norm(final_obj[:2] - np.asarray(truth.ground_truth["object_pos"])[:2]) < 0.05
    # the carrot's colour is still in the picture at the end (it did not vanish)
    rgba = np.array(load_suite("tabletop").tasks[task].params["object"]["rgba"][:3]) * 255
    last = result.rollout.frames[-1].astype(float)
    assert (np.linalg.norm(last - rgba, axis=-1) < 60).sum() >= 5
    learned.close()
    sim.close()


class _ScriptedDynamics:
    """Stands in for the learned object dynamics: every action it moves a free object by ``free``
    (the learned "moves" switch firing) and reports it held while ``held_for`` actions remain,
    carrying it with the tool point. So a test sees only what the engine's fixed rules do."""

    def __init__(self, free, held_for: int = 0):
        import torch

        self.free = torch.tensor(free, dtype=torch.float32)
        self.held_for = held_for

    def step(self, obj, tcp, tcp_next, cmd, grip, held, rest_z, target_xy, task, hard=False):
        import torch

        h = torch.full((len(obj),), float(self.held_for > 0))
        self.held_for -= 1
        nxt = obj + h[:, None] * (tcp_next - tcp) + (1 - h)[:, None] * self.free
        nxt = torch.cat([nxt[:, :2], torch.maximum(nxt[:, 2:3], rest_z[:, None])], dim=1)
        return nxt, h, None, None, cmd


def _scripted_engine(task_name: str, obj, tool, dynamics):
    """A one-episode engine on ``task_name`` with the object at ``obj``, the target's centre at
    (0.35, 0) and the tool point at ``tool``; the segmenter and renderer are never used."""
    from types import SimpleNamespace

    import torch

    from kosmos_env.tasks import load_suite
    from kosmos_env.worlds.tabletop_learned.engine import Engine
    from kosmos_env.worlds.tabletop_learned.objects import TASKS

    segmenter = lambda images, task: torch.zeros(len(images), 2, 64, 64)  # noqa: E731
    world = load_spec(ENV_ID).world
    engine = Engine(SimpleNamespace(segmenter=segmenter, dynamics=dynamics), world)
    engine.start(
        np.zeros((1, 64, 64, 3), np.uint8), [TASKS.index(task_name)], [load_suite("tabletop").tasks[task_name].params]
    )
    engine.obj = torch.tensor(np.asarray(obj, dtype=np.float32)[None])
    engine.target_xy = torch.tensor([[0.35, 0.0]])
    engine.integrators[0].pos = np.asarray(tool, dtype=np.float64)
    return engine


def _step(engine, n: int, move=(0.0, 0.0, 0.0), gripper: float = 1.0):
    for _ in range(n):
        engine.step(np.array([[*move, 0, 0, 0, gripper]]), render=False)
    return engine.obj[0].numpy().astype(np.float64)


def test_a_free_object_at_rest_stays_put_while_the_fingers_cannot_reach_it():
    """The learned "moves" switch firing on a resting object (here every action, 1 cm) moves it
    only where a finger could touch it: not with the tool above it or across the table; yes
    with the tool sweeping through it at table height; and a falling object still falls."""
    rest = 0.012  # the carrot (a capsule of radius 0.012) lying on the table
    creep = _ScriptedDynamics([0.01, 0.0, 0.0])
    start = np.array([0.30, 0.10, rest])
    for tool in ([0.30, 0.10, 0.10], [0.30, -0.05, rest]):  # 8.8 cm above; 15 cm beside
        engine = _scripted_engine("carrot_on_plate", start, tool, creep)
        np.testing.assert_array_equal(_step(engine, 5), start.astype(np.float32))
        # and on the target's top (a plate 8 mm thick): the object lies still there too
        on_plate = np.array([0.38, 0.03, 0.008 + rest])
        engine = _scripted_engine("carrot_on_plate", on_plate, tool, creep)
        np.testing.assert_array_equal(_step(engine, 5), on_plate.astype(np.float32))
    # pushed: the tool sweeps through the object at its height
    engine = _scripted_engine("carrot_on_plate", start, [0.26, 0.10, rest], creep)
    assert _step(engine, 3, move=(0.02, 0.0, 0.0))[0] > start[0] + 0.02
    # falling: released above the table, far from the tool, it comes down and the learned
    # displacement applies until it lies at rest
    fall = _ScriptedDynamics([0.0, 0.0, -0.02])
    engine = _scripted_engine("carrot_on_plate", [0.30, 0.10, 0.06], [0.30, -0.10, 0.15], fall)
    assert abs(_step(engine, 4)[2] - rest) < 1e-6


def test_a_released_object_drops_straight_down_and_stays_on_a_support_under_its_centre():
    """On the action the grasp ends the learned displacement (here 3 cm sideways and down) moves
    it only down: a green cube released 2 cm off the yellow cube's centre (inside its 2.4 cm half
    width) lands on its top; released 3 cm off (its centre beyond the edge) it falls to the table."""
    green_half, yellow_top = 0.017, 0.048
    for off, on_top in ((0.02, True), (0.03, False)):
        held_xy = np.array([0.35 + off, 0.0])
        tool = [*held_xy, 0.09]
        engine = _scripted_engine(
            "stack_green_on_yellow", [*held_xy, 0.09], tool, _ScriptedDynamics([0.03, 0.0, -0.08], held_for=1)
        )
        _step(engine, 1, gripper=0.0)  # still held
        final = _step(engine, 1, move=(0.0, 0.0, 0.02))  # released while the hand rises
        np.testing.assert_allclose(final[:2], held_xy, atol=1e-6)
        expect_z = yellow_top + green_half if on_top else green_half
        assert abs(final[2] - expect_z) < 1e-6


def test_closed_fingers_sweeping_through_a_free_object_push_it_ahead_of_them():
    """The learned dynamics do not push (here: they never move a free object). Closed fingers
    swept through the carrot at its height leave it just ahead of them on their path, its
    sideways offset kept; swept 5 cm above it, or with the fingers open, they leave it alone."""
    still = _ScriptedDynamics([0.0, 0.0, 0.0])
    start = np.array([0.30, 0.10, 0.012])
    for height, gripper, pushed in ((0.012, 0.0, True), (0.062, 0.0, False), (0.012, 1.0, False)):
        engine = _scripted_engine("carrot_on_plate", start, [0.22, 0.105, height], still)
        final = _step(engine, 8, move=(0.02, 0.0, 0.0), gripper=gripper)  # the tool ends at x = 0.38
        if pushed:
            assert final[0] > 0.38 + 0.012 and abs(final[1] - start[1]) < 1e-6  # ahead of the fingers
        else:
            np.testing.assert_array_equal(final, start.astype(np.float32))


# -- the slip predictor (a held object leaving fingers still commanded closed) ---------------------------------


def _slip_episodes(path):
    """Tiny synthetic recording (noise frames, 4 tasks x 3 seeds, 12 steps): the gripper closes at
    step 3 over the object and lifts it; on odd seeds the command goes partly open (0.4) at step
    7 and the contact ends there (a slip); elsewhere the object is carried to the end."""
    from kosmos_env.worlds.tabletop_learned.dataset import Episodes
    from kosmos_env.worlds.tabletop_learned.objects import TASKS

    T, rows = 12, []
    for t in range(len(TASKS)):
        for i in range(3):
            rows.append((t, 1000 * t + i))
    E = len(rows)
    actions = np.zeros((E, T, 7), np.float32)
    actions[:, :, 6] = 1.0
    actions[:, 3:, 6] = 0.0
    actions[:, 4:8, 2] = 0.02  # lift
    contact = np.zeros((E, T + 1), bool)
    obj = np.tile(np.array([0.45, 0.0, 0.02], np.float32), (E, T + 1, 1))
    for e, (_, seed) in enumerate(rows):
        contact[e, 4:] = True
        if seed % 2:
            actions[e, 7, 6] = 0.4
            contact[e, 8:] = False
        for s in range(5, T + 1):
            obj[e, s, 2] = obj[e, s - 1, 2] + (actions[e, s - 1, 2] if contact[e, s] else 0.0)
    gripper = np.where(contact, 0.3, np.r_[1.0, actions[0, :, 6]][None]).astype(np.float32)
    frames = np.random.default_rng(0).integers(0, 256, (E, T + 1, 64, 64, 3), dtype=np.uint8)
    eps = Episodes(
        frames,
        actions,
        gripper,
        np.zeros((E, T), bool),
        np.array([r[0] for r in rows]),
        np.zeros(E, np.int64),
        np.array([r[1] for r in rows]),
        list(TASKS),
        ["synthetic"],
        obj,
        np.tile(np.array([0.55, 0.1, 0.01], np.float32), (E, T + 1, 1)),
        contact,
        np.zeros((E, T + 1, 64, 64), np.uint8),
    )
    eps.save(path)
    return eps


def test_clean_holds_fills_only_short_contact_gaps_under_a_closed_gripper():
    from kosmos_env.worlds.tabletop_learned.slip import clean_holds

    held = np.array([[1, 0, 1, 0, 0, 1, 0, 0, 0, 1, 1, 0, 1]], bool)
    closed = np.ones_like(held)
    closed[0, 11] = False  # the last gap is an opening, not flicker
    assert clean_holds(held, closed).astype(int).tolist() == [[1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0, 1]]


def test_grasp_offset_is_in_the_grippers_frame():
    import torch

    from kosmos_env.worlds.tabletop_learned.slip import grasp_offset

    obj, tcp = torch.tensor([[0.52, 0.03, 0.02]]), torch.tensor([[0.5, 0.0, 0.05]])
    base = grasp_offset(obj, tcp, torch.tensor([0.0]))
    turn = 0.7  # turn the scene and the wrist together about the tool point: the offset stays
    c, s = np.cos(turn), np.sin(turn)
    d = (obj - tcp)[0].numpy()
    obj_turned = tcp + torch.tensor([[c * d[0] - s * d[1], s * d[0] + c * d[1], d[2]]], dtype=torch.float32)
    assert torch.allclose(grasp_offset(obj_turned, tcp, torch.tensor([turn])), base, atol=1e-6)


def test_a_predicted_slip_drops_the_object_to_rest_and_closes_the_fingers_on_nothing():
    """The fixed rule after the hazard fires: not held, down to the resting height, measured
    gripper = command; and closed fingers cannot grasp again until they are commanded open."""
    import torch

    from kosmos_env.worlds.tabletop_learned.slip import SlipPredictor, SlipTracker

    never, always = SlipPredictor(4, threshold=0.5), SlipPredictor(4, threshold=0.5)
    with torch.no_grad():
        for p, bias in ((never, -50.0), (always, 50.0)):
            p.net[2].weight.zero_()
            p.net[2].bias.fill_(bias)
    tcp, tcp_next = torch.tensor([[0.5, 0.0, 0.12]]), torch.tensor([[0.5, 0.02, 0.12]])
    obj_before, obj = torch.tensor([[0.5, 0.0, 0.10]]), torch.tensor([[0.5, 0.02, 0.10]])
    args = dict(
        tcp=tcp,
        tcp_next=tcp_next,
        yaw=torch.zeros(1),
        cmd=torch.tensor([0.3]),
        rest_z=torch.tensor([0.02]),
        task=torch.tensor([1]),
    )
    one, grip = torch.ones(1), torch.tensor([0.27])
    tracker = SlipTracker(1)
    kept = tracker.step(never, obj_before, one, grip, obj, one, grip, **args)
    assert kept[1].item() == 1.0 and torch.equal(kept[0], obj) and kept[2].item() == pytest.approx(0.27)
    tracker = SlipTracker(1)
    o, h, g = tracker.step(always, obj_before, one, grip, obj, one, grip, **args)
    assert h.item() == 0.0 and g.item() == pytest.approx(0.3)
    assert o[0, :2].tolist() == pytest.approx([0.5, 0.02]) and o[0, 2].item() == pytest.approx(0.02)
    # next step the dynamics would grasp it again with the fingers still closed: refused
    o2, h2, g2 = tracker.step(never, o, h, g, o + 0.01, one, grip, **dict(args, cmd=torch.tensor([0.0])))
    assert h2.item() == 0.0 and torch.equal(o2, o) and g2.item() == 0.0
    # once commanded open, the next grasp is the dynamics' call again
    tracker.step(never, o, h, g, o, torch.zeros(1), torch.ones(1), **dict(args, cmd=torch.tensor([1.0])))
    assert (
        tracker.step(never, o, torch.zeros(1), g, o + 0.01, one, grip, **dict(args, cmd=torch.tensor([0.0])))[1].item()
        == 1.0
    )


def test_a_file_without_a_slip_predictor_runs_as_before_and_a_silent_one_changes_nothing(tmp_path):
    """The shipped file holds a slip predictor; the same file without its ``slip.*`` tensors loads
    without one, and a slip predictor that never fires leaves every state and frame of a scripted
    episode unchanged."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from kosmos_env.tasks import load_suite
    from kosmos_env.worlds.tabletop_learned.engine import Engine
    from kosmos_env.worlds.tabletop_learned.model import load_weights
    from kosmos_env.worlds.tabletop_learned.objects import TASKS
    from kosmos_env.worlds.tabletop_learned.world import weights_dir

    spec = load_spec(ENV_ID)
    shipped = weights_dir() / spec.world["weights"]
    assert load_weights(shipped)[0].slip is not None
    with safe_open(str(shipped), "pt") as fh:
        meta = fh.metadata()
    without = tmp_path / "no_slip.safetensors"
    save_file({k: v for k, v in load_file(str(shipped)).items() if not k.startswith("slip.")}, str(without), meta)
    model, _ = load_weights(without)
    assert model.slip is None and not any(k.startswith("slip.") for k in model.state_dict())
    sim = gymnasium.make("Kosmos-Tabletop-v1", image_size=(64, 64), gate={"enabled": False})
    obs, _ = sim.reset(seed=4242, options={"task": "carrot_on_plate"})
    params = load_suite("tabletop").tasks["carrot_on_plate"].params
    rng = np.random.default_rng(0)
    actions = np.zeros((12, 7))
    actions[:, :3] = rng.normal(0, 0.02, (12, 3))
    actions[4:, 6] = rng.uniform(0, 0.45, 8)
    actions[:4, 6] = 1.0
    runs = []
    for silent in (False, True):
        if silent:
            model.attach_slip(4, threshold=0.999999)
            with torch.no_grad():
                model.slip.net[2].bias.fill_(-50.0)
        engine = Engine(model, spec.world)
        engine.start(obs["image"][None], [TASKS.index("carrot_on_plate")], [params])
        runs.append(
            [
                engine.step(a[None], render=i + 1 == len(actions))[:2] + (engine.obj.numpy().copy(),)
                for i, a in enumerate(actions)
            ]
        )
    sim.close()
    for (f0, g0, o0), (f1, g1, o1) in zip(*runs, strict=True):
        assert np.array_equal(f0, f1) and np.array_equal(g0, g1) and np.array_equal(o0, o1)


def test_slip_stage_alone_equals_the_stage_in_the_full_run_and_keeps_every_other_tensor(tmp_path):
    """Tiny synthetic data: the full world run (with its slip stage last) and the same run without
    it give identical other tensors; ``--parts slip --objects-from`` over the full run's file
    reproduces its slip tensors exactly and keeps every other tensor bit for bit."""
    from safetensors.torch import load_file

    from kosmos_env.cli import main

    data = tmp_path / "eps.npz"
    _slip_episodes(data)
    common = [
        "train-world",
        "--data",
        str(data),
        "--holdout",
        "0.34",
        "--steps",
        "2",
        "--batch",
        "2",
        "--segmenter-steps",
        "2",
        "--dynamics-steps",
        "2",
        "--error-horizon",
        "2",
        "--channels",
        "4",
        "4",
        "4",
        "4",
        "--quiet",
    ]
    assert main([*common, "--parts", "world", "--slip-steps", "40", "--out-dir", str(tmp_path / "full")]) == 0
    assert main([*common, "--parts", "world", "--slip-steps", "0", "--out-dir", str(tmp_path / "noslip")]) == 0
    assert (
        main(
            [
                *common,
                "--parts",
                "slip",
                "--slip-steps",
                "40",
                "--objects-from",
                str(tmp_path / "full" / "world.safetensors"),
                "--out-dir",
                str(tmp_path / "alone"),
            ]
        )
        == 0
    )
    full, noslip, alone = (load_file(str(tmp_path / d / "world.safetensors")) for d in ("full", "noslip", "alone"))
    slip_keys = {k for k in full if k.startswith("slip.")}
    assert slip_keys and not any(k.startswith("slip.") for k in noslip)
    assert set(full) - slip_keys == set(noslip)
    for k in noslip:
        assert torch_equal(full[k], noslip[k]), k
    assert set(alone) == set(full)
    for k in full:
        assert torch_equal(alone[k], full[k]), k


def torch_equal(a, b) -> bool:
    import torch

    return a.shape == b.shape and bool(torch.equal(a, b))


def test_slip_stage_alone_needs_a_world_to_train_over(tmp_path, capsys):
    from kosmos_env.cli import main

    rc = main(["train-world", "--data", str(tmp_path / "none.npz"), "--parts", "slip", "--out-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--objects-from" in err[0]
