"""The gate mode Kosmos-Bridge-v1 runs (camera model + integrated commanded pose), on real Bridge pixels.

The real can episode must pass under the shipped commands consistent with it; its frozen and
panned copies must be rejected. Also: the camera model agrees with SimplerEnv's start pose on
the real first frame, scales with the image size, and the Cosmos 3 world exposes it.
"""
from __future__ import annotations

import numpy as np
import pytest

from kosmos_env.bridge_gate import commands_from_pixel_track, load_reference_commands, replay_gate
from kosmos_env.bridge_reference import load_real_episode, negative
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
    window = frame[int(v) - 40: int(v) + 40, int(u) - 40: int(u) + 40]
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
    again = commands_from_pixel_track(np.asarray(ref["pixel_track_px"]), cal, ref["height_m"], np.asarray(ref["gripper"]))
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
    world_block["bridge"] = dict(world_block["bridge"], normalization={"method": "quantile", "q01": q, "q99": [1.0] * 10,
                                                                       "clamp": False})
    spec = spec.with_overrides(world=world_block, image_size=[96, 128])
    world = Cosmos3World(spec, pipeline=object())  # no pipeline call here: only construction
    assert world.calibration is not None
    np.testing.assert_allclose(world.calibration.intrinsics[0, 0], 623.588 * 128 / 640)
    uv = world.calibration.project(np.asarray([spec.world["camera"]["start_ee_pos"]]))[0]
    assert 0 < uv[0] < 128 and 0 < uv[1] < 96
