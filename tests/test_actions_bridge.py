"""The env's 7-D action -> Cosmos 3's 10-D Bridge action (kosmos_env.actions, Bridge section).

The reference below rebuilds cosmos-framework's Bridge recipe independently with SciPy:
absolute poses from Bridge states (xyz, extrinsic-xyz Euler), ``R @ DEFAULT_ROTATION``,
``T @ TCP_TO_FLANGE``, ``R @ BRIDGE_TO_OPENCV``, then ``inv(T_i) @ T_{i+1}`` and the first two
rotation columns.
"""

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from kosmos_env import actions as A

D = np.array([[0, 0, 1], [0, 1, 0], [-1, 0, 0]], float)
B = np.array([[0, 0, 1], [-1, 0, 0], [0, -1, 0]], float)
TCP = np.eye(4)
TCP[0, 3] = -0.093575


def reference_bridge10(states_xyz, states_euler, gripper):
    poses = []
    for xyz, e in zip(states_xyz, states_euler, strict=True):
        t = np.eye(4)
        t[:3, :3] = Rotation.from_euler("xyz", e).as_matrix() @ D
        t[:3, 3] = xyz
        t = t @ TCP
        t[:3, :3] = t[:3, :3] @ B
        poses.append(t)
    rows = []
    for i in range(len(poses) - 1):
        d = np.linalg.inv(poses[i]) @ poses[i + 1]
        rows.append(np.r_[d[:3, 3], d[:3, 0], d[:3, 1], gripper[i]])
    return np.array(rows)


def random_actions(n, seed=0):
    rng = np.random.default_rng(seed)
    a = np.c_[rng.uniform(-0.03, 0.03, (n, 3)), rng.uniform(-0.2, 0.2, (n, 3)), rng.uniform(0, 1, (n, 1))]
    return a.astype(np.float32)


@pytest.mark.parametrize("start_euler", [[0.0, 0.0, 0.0], [0.3, -0.4, 1.2]])
def test_matches_independent_reference_extrinsic_base(start_euler):
    acts = random_actions(6)
    start_rot = Rotation.from_euler("xyz", start_euler)
    xyz = [np.array([0.3, 0.05, 0.12])]
    rots = [start_rot]
    for a in acts.astype(np.float64):
        xyz.append(xyz[-1] + a[:3])
        rots.append(Rotation.from_euler("xyz", a[3:6]) * rots[-1])  # base-frame composition
    eulers = [r.as_euler("xyz") for r in rots]
    expected = reference_bridge10(xyz, eulers, acts[:, 6])
    got, end_pos, end_rot = A.env_to_bridge10(acts, xyz[0], start_rot.as_matrix())
    np.testing.assert_allclose(got, expected, atol=1e-9)
    np.testing.assert_allclose(end_pos, xyz[-1], atol=1e-12)
    np.testing.assert_allclose(end_rot, rots[-1].as_matrix(), atol=1e-12)


def test_matches_reference_euler_add():
    acts = random_actions(5, seed=1)
    start = np.array([0.1, 0.2, -0.3])
    eulers = [start]
    for a in acts.astype(np.float64):
        eulers.append(eulers[-1] + a[3:6])
    xyz = [np.zeros(3)]
    for a in acts.astype(np.float64):
        xyz.append(xyz[-1] + a[:3])
    expected = reference_bridge10(xyz, eulers, acts[:, 6])
    got, _, _ = A.env_to_bridge10(acts, np.zeros(3), Rotation.from_euler("xyz", start).as_matrix(), "euler_add")
    np.testing.assert_allclose(got, expected, atol=1e-9)


def test_zero_motion_is_the_hold_action():
    act = np.array([[0, 0, 0, 0, 0, 0, 0.7]], np.float32)
    got, _, _ = A.env_to_bridge10(act, np.zeros(3), Rotation.from_euler("xyz", [0.2, 0.1, 0.5]).as_matrix())
    np.testing.assert_allclose(got[0], A.hold_bridge10(np.float32(0.7)), atol=1e-12)


def test_known_translation_with_gripper_pointing_down():
    # state rotation I (WidowX neutral pose, gripper pointing down): the Cosmos end-effector frame
    # is D @ B, whose z axis (the approach axis) is base -z and whose y axis is base -x. So moving
    # +x (forward) in the base frame is -y in the end-effector frame, and +z (up) is -z there.
    got, _, _ = A.env_to_bridge10(
        np.array([[0.01, 0, 0, 0, 0, 0, 1], [0, 0, 0.02, 0, 0, 0, 1]], np.float32), np.zeros(3), np.eye(3)
    )
    np.testing.assert_allclose(got[0, :3], [0.0, -0.01, 0.0], atol=1e-7)
    np.testing.assert_allclose(got[1, :3], [0.0, 0.0, -0.02], atol=1e-7)
    np.testing.assert_allclose(got[:, 3:9], [[1, 0, 0, 0, 1, 0]] * 2, atol=1e-12)


@pytest.mark.parametrize("mode", ["extrinsic_base", "euler_add"])
@pytest.mark.parametrize("gripper", ["identity", "invert"])
def test_round_trip_env_bridge_env(mode, gripper):
    acts = random_actions(8, seed=3)
    start = Rotation.from_euler("xyz", [0.1, -0.2, 0.4]).as_matrix()
    b10, _, _ = A.env_to_bridge10(acts, np.zeros(3), start, mode, gripper)
    back = A.bridge10_to_env(b10, np.zeros(3), start, mode, gripper)
    np.testing.assert_allclose(back, acts, atol=1e-6)


def test_gripper_direction():
    act = np.array([[0, 0, 0, 0, 0, 0, 1.0]], np.float32)
    assert A.env_to_bridge10(act, np.zeros(3), np.eye(3))[0][0, 9] == 1.0
    assert A.env_to_bridge10(act, np.zeros(3), np.eye(3), gripper="invert")[0][0, 9] == 0.0


def test_quantile_normalisation_values_and_inverse():
    q01 = np.linspace(-1, 0, 10)
    q99 = q01 + np.linspace(0.5, 2.0, 10)
    # q01 -> -1, q99 -> +1, midpoint -> 0 on every dim
    np.testing.assert_allclose(A.normalize_bridge10(q01, "quantile", q01, q99), -np.ones(10))
    np.testing.assert_allclose(A.normalize_bridge10(q99, "quantile", q01, q99), np.ones(10))
    x = np.random.default_rng(0).normal(size=(5, 10))
    np.testing.assert_allclose(
        A.denormalize_bridge10(A.normalize_bridge10(x, "quantile", q01, q99), "quantile", q01, q99), x, atol=1e-12
    )
    # "quantile_rot" leaves the six rotation dims untouched
    n = A.normalize_bridge10(x, "quantile_rot", q01, q99)
    np.testing.assert_allclose(n[:, 3:9], x[:, 3:9])
    assert not np.allclose(n[:, :3], x[:, :3])
    assert np.abs(A.normalize_bridge10(10 * x, "quantile", q01, q99, clamp=True)).max() <= 1.0
    np.testing.assert_allclose(A.normalize_bridge10(x, "none"), x)


def test_normalisation_needs_stats():
    with pytest.raises(ValueError, match="q01 and q99"):
        A.normalize_bridge10(np.zeros(10), "quantile")
    with pytest.raises(ValueError, match="10 numbers"):
        A.normalize_bridge10(np.zeros(10), "quantile", [0] * 9, [1] * 9)
    with pytest.raises(ValueError, match="normalization method"):
        A.normalize_bridge10(np.zeros(10), "zscore", [0] * 10, [1] * 10)


def test_bad_conventions_raise():
    with pytest.raises(ValueError, match="rotation_delta"):
        A.env_to_bridge10(np.zeros((1, 7)), np.zeros(3), np.eye(3), rotation_delta="intrinsic")
    with pytest.raises(ValueError, match="gripper"):
        A.env_to_bridge10(np.zeros((1, 7)), np.zeros(3), np.eye(3), gripper="flip")


def test_quantile_is_the_release_formula_literally():
    """n = 2 (x - q01) / max(q99 - q01, 1e-8) - 1 on all ten dims, inverse 0.5 (n + 1)(q99 - q01) + q01."""
    q01 = np.array([-0.04, -0.03, -0.04, 0.97, -0.16, -0.08, -0.16, 0.97, -0.08, 0.0])
    q99 = np.array([0.04, 0.03, 0.03, 1.0, 0.16, 0.08, 0.16, 1.0, 0.1, 1.0])
    x = np.random.default_rng(1).uniform(-0.1, 1.0, size=(6, 10))
    n = A.normalize_bridge10(x, "quantile", q01, q99)
    np.testing.assert_allclose(n, 2 * (x - q01) / np.maximum(q99 - q01, 1e-8) - 1, rtol=0, atol=1e-12)
    np.testing.assert_allclose(A.denormalize_bridge10(n, "quantile", q01, q99), 0.5 * (n + 1) * (q99 - q01) + q01)
    # a degenerate dimension (q01 == q99) is divided by 1e-8, not by zero
    flat = q99.copy()
    flat[0] = q01[0]
    assert np.isfinite(A.normalize_bridge10(x, "quantile", q01, flat)).all()
