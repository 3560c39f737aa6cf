"""The single-rotation helpers give the batched rotation functions' exact bits (the tabletop's
per-step control runs on them, and its trajectories must not change by one ulp)."""

from __future__ import annotations

import numpy as np
import pytest

from kosmos_env.utils.rotations import (
    axis_angle_to_matrix,
    euler_to_matrix,
    euler_to_matrix_single,
    matrix_to_axis_angle,
    matrix_to_axis_angle_single,
    matrix_to_euler,
    matrix_to_euler_single,
)


def same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    return got.shape == want.shape and got.dtype == want.dtype and got.tobytes() == want.tobytes()


def edge_matrices(rng) -> list[np.ndarray]:
    """Identity, half-turns (every quaternion branch), gimbal lock, tiny and near-pi angles."""
    out = [np.eye(3), np.diag([1.0, -1, -1]), np.diag([-1.0, 1, -1]), np.diag([-1.0, -1, 1])]
    for sign in (1, -1):
        out.append(euler_to_matrix(np.array([0.3, sign * np.pi / 2, -0.2])))
    for _ in range(20):
        axis = rng.normal(size=3)
        out.append(axis_angle_to_matrix(axis / np.linalg.norm(axis) * rng.choice([1e-13, 1e-9, 1e-5, np.pi - 1e-6])))
    return out


def test_single_helpers_are_bitwise_the_batched_functions():
    rng = np.random.default_rng(11)
    matrices = edge_matrices(rng)
    for i in range(3000):
        scale = (1e-9, 0.05, 0.6, 3.2)[i % 4]
        euler = rng.uniform(-scale, scale, 3)
        got = euler_to_matrix_single(euler)
        assert same_bits(got, euler_to_matrix(euler)), euler
        # products of rotations, as the world's control builds them (not exactly orthonormal)
        matrices.append(got @ euler_to_matrix(rng.uniform(-3.2, 3.2, 3)))
    for m in matrices:
        assert same_bits(matrix_to_euler_single(m), matrix_to_euler(m)), m
        assert same_bits(matrix_to_axis_angle_single(m), matrix_to_axis_angle(m)), m


def test_single_helpers_check_their_input():
    with pytest.raises(ValueError, match="float64"):
        euler_to_matrix_single(np.zeros(3, dtype=np.float32))
    with pytest.raises(ValueError, match=r"\(3, 3\)"):
        matrix_to_euler_single(np.eye(4))
    with pytest.raises(ValueError, match=r"\(3, 3\)"):
        matrix_to_axis_angle_single(np.eye(3)[None])


def _axis_angle_to_matrix_reference(v: np.ndarray) -> np.ndarray:
    """axis_angle_to_matrix as it was written first: the cross-product matrix filled slice by
    slice with negations, both branches of every np.where computed."""
    theta = np.linalg.norm(v, axis=-1)[..., None, None]
    k = np.zeros(v.shape[:-1] + (3, 3), dtype=v.dtype)
    k[..., 0, 1], k[..., 0, 2] = -v[..., 2], v[..., 1]
    k[..., 1, 0], k[..., 1, 2] = v[..., 2], -v[..., 0]
    k[..., 2, 0], k[..., 2, 1] = -v[..., 1], v[..., 0]
    small = theta < 1e-8
    safe = np.where(small, 1.0, theta)
    a = np.where(small, 1.0 - theta**2 / 6.0, np.sin(safe) / safe)
    b = np.where(small, 0.5 - theta**2 / 24.0, (1.0 - np.cos(safe)) / safe**2)
    eye = np.broadcast_to(np.eye(3, dtype=v.dtype), k.shape)
    return eye + a * k + b * (k @ k)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_axis_angle_to_matrix_keeps_its_bits(dtype):
    """The gathered cross-product matrix (a sign flip by multiplying with -1) and the skipped
    np.where branch give the bits of the slice-by-slice, both-branches version."""
    rng = np.random.default_rng(7)
    scales = np.array([0.0, 1e-12, 1e-9, 1e-7, 1e-3, 0.3, 1.0, 3.0, 10.0])
    v = (rng.normal(size=(9, 400, 3)) * scales[:, None, None]).reshape(-1, 3).astype(dtype)
    v[::50] = -0.0  # signed zeros in and out of the cross-product matrix
    v[1::50, 1] = -0.0
    batches = [v, v[:1], v[5], v.reshape(60, 60, 3), v[::3], v[2002:2049]]  # the last: no small angle
    for batch in batches:
        assert same_bits(axis_angle_to_matrix(batch), _axis_angle_to_matrix_reference(batch))
    assert not (np.linalg.norm(v[2002:2049], axis=-1) < 1e-8).any() and (np.linalg.norm(v, axis=-1) < 1e-8).any()
