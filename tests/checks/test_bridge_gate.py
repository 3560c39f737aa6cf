"""The gate mode Kosmos-Bridge-v1 runs (camera model + integrated commanded pose), on real Bridge pixels.

The real can episode must pass under the shipped commands consistent with it; its frozen and
panned copies must be rejected. Also: the camera model agrees with SimplerEnv's start pose on
the real first frame, scales with the image size, and the Cosmos 3 world exposes it.
"""

from __future__ import annotations

import numpy as np
import pytest

from kosmos_env.checks.bridge_gate import commands_from_pixel_track, load_reference_commands, replay_gate
from kosmos_env.checks.bridge_reference import load_real_episode, negative
from kosmos_env.spec import load_spec
from kosmos_env.worlds.bridge_camera import (
    REAL_EPISODE_START_EE_POS,
    bridge_calibration,
    camera_block,
    lookat_camera,
    validate_camera_block,
)

SIZE = (192, 256)  # a 4:3 frame like the Bridge world's


@pytest.fixture(scope="module")
def episode():
    import cv2

    ep = load_real_episode()
    small = lambda frames: np.stack([cv2.resize(f, (SIZE[1], SIZE[0]), interpolation=cv2.INTER_AREA) for f in frames])  # noqa: E731
    return {"real": small(ep.frames), **{k: small(negative(k, ep).frames) for k in ("frozen", "panned", "shuffled")}}


@pytest.fixture(scope="module")
def setup():
    spec = load_spec("Kosmos-Bridge-v1")
    ref = load_reference_commands()
    cal = bridge_calibration(spec.world["camera"], SIZE)
    return spec, ref, cal


def _replay(setup, frames, actions=None):
    spec, ref, cal = setup
    acts = ref["actions"] if actions is None else actions
    chunk = spec.action_chunk
    return replay_gate(spec.gate, frames, acts, cal, ref["start_ee_pos"], chunk=chunk)


def test_start_pose_projects_onto_the_gripper_in_the_first_real_frame():
    # SimplerEnv's start pose for this episode, through the camera model, lands on the gripper:
    # the black fingers (dark pixels) surround the projected point in the real first frame
    cal = bridge_calibration(camera_block(), (480, 640))
    u, v = cal.project(np.asarray([REAL_EPISODE_START_EE_POS]))[0]
    assert 440 < u < 520 and 170 < v < 240
    frame = load_real_episode().frames[0].astype(float).mean(axis=2)
    window = frame[int(v) - 40 : int(v) + 40, int(u) - 40 : int(u) + 40]
    assert (window < 40).mean() > 0.2  # much of the window is the black gripper
    corner = frame[400:480, 0:80]  # far from the arm
    assert (corner < 40).mean() < (window < 40).mean()


def test_calibration_scales_with_the_image_size():
    block = camera_block()
    big, small = bridge_calibration(block, (480, 640)), bridge_calibration(block, (120, 160))
    pts = np.array([[0.3, 0.0, 0.05], [0.25, 0.1, 0.1]])
    np.testing.assert_allclose((big.project(pts) + 0.5) / 4 - 0.5, small.project(pts), atol=1e-9)
    # the look-at form used to render the tabletop through this camera is the same camera
    look = lookat_camera(block)
    assert abs(look["fovy"] - 42.1) < 0.05
    with pytest.raises(ValueError, match="intrinsics"):
        validate_camera_block(dict(block, intrinsics=[[0, 0, 0], [0, 1, 0], [0, 0, 1]]))


def test_reference_commands_follow_the_recorded_track():
    spec, ref, _ = load_spec("Kosmos-Bridge-v1"), load_reference_commands(), None
    cal = bridge_calibration(spec.world["camera"], (480, 640))
    again = commands_from_pixel_track(
        np.asarray(ref["pixel_track_px"]), cal, ref["height_m"], np.asarray(ref["gripper"])
    )
    np.testing.assert_allclose(again, ref["actions"], atol=1e-5)
    # their projection retraces the track's motion (direction of the big moves in the image)
    path = np.asarray(ref["start_ee_pos"]) + np.cumsum(ref["actions"][:, :3], axis=0)
    uv = cal.project(np.vstack([ref["start_ee_pos"], path]))
    track = np.asarray(ref["pixel_track_px"])
    d_uv, d_track = np.diff(uv, axis=0), np.diff(track, axis=0)
    big = np.linalg.norm(d_track, axis=1) > 15
    cos = (d_uv[big] * d_track[big]).sum(1) / (np.linalg.norm(d_uv[big], axis=1) * np.linalg.norm(d_track[big], axis=1))
    assert big.sum() >= 5 and cos.min() > 0.95


def test_real_episode_passes_the_bridge_gate(setup, episode):
    out = _replay(setup, episode["real"])
    assert out["passed"].all(), list(out["check"])
    assert out["demanded"].sum() >= 3  # the direction and frozen checks did run


def test_frozen_and_panned_copies_are_rejected(setup, episode):
    for kind, check in (("frozen", "frozen"), ("panned", "camera_motion")):
        out = _replay(setup, episode[kind])
        assert not out["passed"].all(), kind
        assert check in set(out["check"].tolist()), (kind, list(out["check"]))


def test_cosmos_world_exposes_calibration_and_integrated_pose():
    from kosmos_env.worlds.cosmos3 import Cosmos3World

    spec = load_spec("Kosmos-Bridge-v1")
    q = [0.0] * 10
    world_block = dict(spec.world)
    world_block["bridge"] = dict(
        world_block["bridge"], normalization={"method": "quantile", "q01": q, "q99": [1.0] * 10, "clamp": False}
    )
    spec = spec.with_overrides(world=world_block, image_size=[96, 128])
    world = Cosmos3World(spec, pipeline=object())  # no pipeline call here: only construction
    assert world.calibration is not None
    np.testing.assert_allclose(world.calibration.intrinsics[0, 0], 623.588 * 128 / 640)
    uv = world.calibration.project(np.asarray([spec.world["camera"]["start_ee_pos"]]))[0]
    assert 0 < uv[0] < 128 and 0 < uv[1] < 96


# -- workspace floor for the integrated pose -------------------------------------------------------
def test_bridge_workspace_is_the_cited_table_top_and_the_gate_uses_the_same():
    from kosmos_env.worlds.bridge_camera import BRIDGE_WORKSPACE, TABLE_TOP_Z

    spec = load_spec("Kosmos-Bridge-v1")
    assert spec.world["workspace"] == [list(row) for row in BRIDGE_WORKSPACE] == spec.gate["workspace"]
    assert spec.world["workspace"][2][0] == TABLE_TOP_Z == 0.0
    source = spec.world["workspace_source"]
    assert "ef7a4d4fdf4b69f2c2154db5b15b9ac8dfe10682" in source and "base_env.py" in source and "0.870" in source
    start = np.asarray(spec.world["camera"]["start_ee_pos"])
    ws = np.asarray(spec.world["workspace"])
    assert np.all(start > ws[:, 0]) and np.all(start < ws[:, 1])  # the start pose lies inside it


def test_integrated_pose_stops_at_the_table_and_leaves_it_at_once():
    from kosmos_env.checks.bridge_gate import integrated_positions
    from kosmos_env.worlds.bridge_camera import BRIDGE_WORKSPACE, integrate_tcp, validate_workspace

    acts = np.zeros((6, 7), np.float32)
    acts[:4, 2] = -0.05  # 20 cm down from 10.8 cm: the last two presses go into the table
    acts[4, 2] = 0.01  # then 1 cm up: from the table, not from 9 cm below it
    acts[5, 0] = 0.02
    start = REAL_EPISODE_START_EE_POS
    path = integrated_positions(acts, start, BRIDGE_WORKSPACE)
    assert path[:, 2].min() == pytest.approx(0.0)
    np.testing.assert_allclose(path[3], [start[0], start[1], 0.0], atol=1e-9)
    np.testing.assert_allclose(path[4, 2], 0.01, atol=1e-7)
    np.testing.assert_allclose(path[5, 0], start[0] + 0.02, atol=1e-7)
    unclipped = integrated_positions(acts, start)
    assert unclipped[3, 2] == pytest.approx(start[2] - 0.2, abs=1e-6)  # what the world logged before
    np.testing.assert_allclose(integrate_tcp(start, acts[:, :3], None), unclipped)
    with pytest.raises(ValueError, match="world.workspace"):
        validate_workspace([[0, 1], [0, 1], [1, 0]])


def test_cosmos_world_logs_the_pose_clipped_at_the_table():
    from kosmos_env.tasks import load_suite
    from kosmos_env.worlds.cosmos3 import Cosmos3World

    spec = load_spec("Kosmos-Bridge-v1").with_overrides(image_size=[48, 64])
    world = Cosmos3World(spec, pipeline=object())
    # the model call is beside the point here (the pose is integrated from the commands): no
    # pipeline load, and the batcher seam a batched vector env uses returns still frames
    world.load = lambda: None

    class StillVideo:
        def generate(self, pipe, kwargs):
            return np.full((spec.world["chunk_size"] + 1, 48, 64, 3), 0.5, np.float32)

    world.call_kwargs = lambda *args: {}
    world.batcher = StillVideo()
    task = load_suite(spec.tasks["suite"]).tasks[spec.tasks["default"]]
    world.reset(task, np.random.default_rng(0))
    down = np.zeros((spec.action_chunk, 7), np.float32)
    down[:, 2], down[:, 6] = -0.05, 1.0
    first = world.step(down).log["ee_pos"]  # 10.8 cm - 4 x 5 cm: the last presses hit the table
    assert first[:, 2].min() >= 0.0 and first[-1, 2] == pytest.approx(0.0)
    up = down.copy()
    up[:, 2] = 0.01
    second = world.step(up).log["ee_pos"]  # back up from the table, not from 9 cm below it
    np.testing.assert_allclose(second[:, 2], 0.01 * np.arange(1, spec.action_chunk + 1), atol=1e-6)


def test_blurred_pan_measure_catches_a_sharp_sub_pixel_pan_a_moving_patch_does_not_trigger():
    import cv2

    from kosmos_env.gate import ConsistencyGate, Segment
    from kosmos_env.gate.measurements import camera_motion

    hann = lambda shape: cv2.createHanningWindow((shape[1], shape[0]), cv2.CV_32F)  # noqa: E731

    spec = load_spec("Kosmos-Bridge-v1")
    assert spec.gate["pan_blur_px"] > 0
    rng = np.random.default_rng(3)
    # a sharp scene of flat blocks (edges, like a rendered or real table top), at full resolution
    scene = np.full((192, 256), 120, np.uint8)
    for _ in range(40):
        x, y = rng.integers(0, 236), rng.integers(0, 172)
        scene[y : y + rng.integers(6, 20), x : x + rng.integers(6, 20)] = rng.integers(20, 240)
    box = (16, 8, 32)  # the gripper's window in the 48x64 analysis image
    small = lambda img: cv2.resize(img, (64, 48), interpolation=cv2.INTER_AREA).astype(np.float32)  # noqa: E731
    a = small(scene)
    ratios = {}
    for blur in (0.0, spec.gate["pan_blur_px"]):
        gate = ConsistencyGate.from_spec(
            {k: v for k, v in spec.gate.items() if k not in ("enabled", "workspace")} | {"pan_blur_px": blur}
        )
        explained = []
        for dx, dy in ((5.0, 1.0), (-4.6, 2.2), (3.4, -3.8), (-2.6, -1.4)):  # 0.7-1.4 analysis px
            panned = cv2.warpAffine(
                scene,
                np.float32([[1, 0, dx], [0, 1, dy]]),
                (256, 192),
                flags=cv2.INTER_LINEAR,
                borderMode=cv2.BORDER_REPLICATE,
            )
            seg = Segment(0.0)
            camera_motion(gate.thresholds, hann, seg, a, small(panned), box)
            explained.append(seg.pan_explained)
        ratios[blur] = explained
        # a patch moving inside the window alone (the arm) explains nothing outside it
        moved = scene.copy()
        moved[40:120, 70:150] = np.roll(scene[40:120, 70:150], 6, axis=1)
        _, pan, _ = camera_motion(gate.thresholds, hann, Segment(0.0), a, small(moved), box)
        assert not pan
    sharp, blurred = np.array(ratios[0.0]), np.array(ratios[spec.gate["pan_blur_px"]])
    assert sharp.min() < spec.gate["pan_explained"]  # unblurred, one of these pans slips under the bar
    assert np.all(blurred > sharp)  # the resampling residual no longer counts against the pan
    assert np.all(blurred >= spec.gate["pan_explained"])
