"""Gripper, rotation and scaling conversions, checked against values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kosmos_env.policies.conventions import (
    SIMPLER_WIDOWX,
    ActionConvention,
    axis_angle_to_euler,
    euler_to_axis_angle,
    euler_to_matrix,
    gripper_from_env,
    gripper_to_env,
    matrix_to_euler,
    normalize_bounds,
    unnormalize_bounds,
)


def test_gripper_directions_and_ranges():
    # SimplerEnv WidowX: +1 open, -1 close -> env 1 open, 0 closed; 0 is half open
    np.testing.assert_allclose(gripper_to_env([1.0, -1.0, 0.0, 0.5], "signed_open"), [1.0, 0.0, 0.5, 0.75])
    np.testing.assert_allclose(gripper_from_env([1.0, 0.0, 0.25], "signed_open"), [1.0, -1.0, -0.5])
    # closedness (1 = closed) is the mirror image
    np.testing.assert_allclose(gripper_to_env([1.0, 0.0, 0.2], "unit_closed"), [0.0, 1.0, 0.8])
    # overshoot is clipped to the convention's range before converting
    np.testing.assert_allclose(gripper_to_env([1.3, -0.2], "unit_open"), [1.0, 0.0])
    np.testing.assert_allclose(gripper_to_env([-1.7], "signed_open"), [0.0])
    # SimplerEnv binarises at 0.5 (of the [0, 1] value)
    np.testing.assert_allclose(gripper_to_env([0.49, 0.5, 0.93], "unit_open", threshold=0.5), [0.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="unknown gripper convention"):
        gripper_to_env([0.0], "inverted")


def test_euler_matrix_is_static_xyz():
    # pure yaw of 90 degrees maps x to y (hand-computed Rz(90))
    np.testing.assert_allclose(euler_to_matrix([0, 0, math.pi / 2]), [[0, -1, 0], [1, 0, 0], [0, 0, 1]], atol=1e-12)
    # roll then pitch about *fixed* axes: R = Ry(p) Rx(r); with r = p = 90 deg, hand-multiplied
    ry = np.array([[0, 0, 1], [0, 1, 0], [-1, 0, 0]])
    rx = np.array([[1, 0, 0], [0, 0, -1], [0, 1, 0]])
    np.testing.assert_allclose(euler_to_matrix([math.pi / 2, math.pi / 2, 0]), ry @ rx, atol=1e-12)
    e = np.array([0.1, -0.2, 0.3])
    np.testing.assert_allclose(matrix_to_euler(euler_to_matrix(e)), e, atol=1e-12)


def test_euler_to_axis_angle_matches_hand_values():
    # single-axis rotations: the axis-angle vector is the Euler vector
    np.testing.assert_allclose(euler_to_axis_angle([0.3, 0, 0]), [0.3, 0, 0], atol=1e-12)
    np.testing.assert_allclose(euler_to_axis_angle([0, -0.2, 0]), [0, -0.2, 0], atol=1e-12)
    # roll = pitch = 90 deg (static axes): R = Ry Rx is a 120 deg rotation about (1, 1, -1)/sqrt(3)
    # (trace of R is 0 -> cos = -1/2; axis from the skew part: (1, 1, -1)/2 / sin(120))
    expected = np.array([1.0, 1.0, -1.0]) / math.sqrt(3) * (2 * math.pi / 3)
    np.testing.assert_allclose(euler_to_axis_angle([math.pi / 2, math.pi / 2, 0]), expected, atol=1e-12)
    # a 180 deg rotation about z
    np.testing.assert_allclose(np.abs(euler_to_axis_angle([0, 0, math.pi])), [0, 0, math.pi], atol=1e-9)
    # round trip for a small Bridge-sized delta
    e = np.array([0.05, -0.08, 0.12])
    np.testing.assert_allclose(axis_angle_to_euler(euler_to_axis_angle(e)), e, atol=1e-12)


def test_euler_to_axis_angle_agrees_with_scipy_extrinsic_xyz():
    rotation = pytest.importorskip("scipy.spatial.transform").Rotation
    rng = np.random.default_rng(0)
    for e in rng.uniform(-1.2, 1.2, size=(20, 3)):
        np.testing.assert_allclose(euler_to_axis_angle(e), rotation.from_euler("xyz", e).as_rotvec(), atol=1e-10)


def test_unnormalize_formula_with_mask():
    low, high = np.array([-0.02, -1.0, 0.0]), np.array([0.04, 3.0, 1.0])
    mask = np.array([True, True, False])
    n = np.array([-1.0, 0.5, 0.3])
    # a = 0.5 (n + 1)(q99 - q01) + q01 by hand: dim0 = -0.02; dim1 = 0.75 * 4 - 1 = 2.0; dim2 passes
    np.testing.assert_allclose(unnormalize_bounds(n, low, high, mask), [-0.02, 2.0, 0.3])
    np.testing.assert_allclose(normalize_bounds([-0.02, 2.0, 0.3], low, high, mask), n)
    with pytest.raises(ValueError, match="shape"):
        unnormalize_bounds(n, low[:2], high, mask)


def test_simpler_widowx_convention_round_trip_and_scaling():
    env_action = np.array([0.01, -0.02, 0.03, 0.1, -0.05, 0.2, 0.0], np.float32)
    wire = SIMPLER_WIDOWX.from_env(env_action)
    assert wire[6] == -1.0  # closed -> -1
    np.testing.assert_allclose(wire[3:6], euler_to_axis_angle(env_action[3:6]), atol=1e-6)
    np.testing.assert_allclose(SIMPLER_WIDOWX.to_env(wire), env_action, atol=1e-6)

    scaled = ActionConvention(translation_scale=20.0, rotation_scale=20.0)  # Cosmos-Predict style ×20
    out = scaled.to_env(np.array([[0.2, -0.4, 0.6, 1.0, 0.0, -2.0, 1.0]], np.float32))
    np.testing.assert_allclose(out, [[0.01, -0.02, 0.03, 0.05, 0.0, -0.1, 1.0]], atol=1e-7)
    assert out.dtype == np.float32 and out.shape == (1, 7)
    assert "axis-angle" in SIMPLER_WIDOWX.describe() and "+1=open" in SIMPLER_WIDOWX.describe()
    with pytest.raises(ValueError, match="rotation"):
        ActionConvention(rotation="quaternion")
