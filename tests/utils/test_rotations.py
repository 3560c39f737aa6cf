"""kosmos_env.utils.rotations against SciPy (an independent implementation) and known rotations."""

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from kosmos_env.utils import rotations as rot

RNG = np.random.default_rng(0)
RANDOM = Rotation.random(200, random_state=1)


def test_euler_to_matrix_matches_scipy_extrinsic_xyz():
    euler = RNG.uniform(-np.pi, np.pi, size=(200, 3))
    euler[:, 1] /= 2.0
    np.testing.assert_allclose(rot.euler_to_matrix(euler), Rotation.from_euler("xyz", euler).as_matrix(), atol=1e-12)


def test_matrix_to_euler_matches_scipy_and_round_trips():
    m = RANDOM.as_matrix()
    e = rot.matrix_to_euler(m)
    np.testing.assert_allclose(e, RANDOM.as_euler("xyz"), atol=1e-9)
    np.testing.assert_allclose(rot.euler_to_matrix(e), m, atol=1e-12)


def test_known_rotations():
    # yaw of +90 degrees maps x to y
    np.testing.assert_allclose(rot.euler_to_matrix([0, 0, np.pi / 2]) @ [1, 0, 0], [0, 1, 0], atol=1e-12)
    # roll of +90 degrees maps y to z
    np.testing.assert_allclose(rot.euler_to_matrix([np.pi / 2, 0, 0]) @ [0, 1, 0], [0, 0, 1], atol=1e-12)
    np.testing.assert_allclose(rot.axis_angle_to_matrix([0, 0, np.pi]), np.diag([-1.0, -1.0, 1.0]), atol=1e-12)
    np.testing.assert_allclose(rot.matrix_to_rot6d(np.eye(3)), [1, 0, 0, 0, 1, 0])


def test_gimbal_lock_round_trips():
    for pitch in (np.pi / 2, -np.pi / 2):
        m = rot.euler_to_matrix([0.3, pitch, -0.7])
        np.testing.assert_allclose(rot.euler_to_matrix(rot.matrix_to_euler(m)), m, atol=1e-9)


def test_rot6d_is_first_two_columns_and_round_trips():
    m = RANDOM.as_matrix()
    r6 = rot.matrix_to_rot6d(m)
    np.testing.assert_allclose(r6[:, :3], m[:, :, 0])
    np.testing.assert_allclose(r6[:, 3:], m[:, :, 1])
    np.testing.assert_allclose(rot.rot6d_to_matrix(r6), m, atol=1e-12)


def test_rot6d_decoding_orthonormalises_noisy_input():
    m = RANDOM.as_matrix()[:20]
    noisy = rot.matrix_to_rot6d(m) + RNG.normal(scale=1e-3, size=(20, 6))
    out = rot.rot6d_to_matrix(noisy)
    np.testing.assert_allclose(out @ np.swapaxes(out, -1, -2), np.broadcast_to(np.eye(3), out.shape), atol=1e-12)
    np.testing.assert_allclose(np.linalg.det(out), 1.0, atol=1e-12)
    assert np.abs(out - m).max() < 1e-2


def test_axis_angle_matches_scipy_and_round_trips():
    v = RANDOM.as_rotvec()
    np.testing.assert_allclose(rot.axis_angle_to_matrix(v), RANDOM.as_matrix(), atol=1e-12)
    np.testing.assert_allclose(rot.matrix_to_axis_angle(RANDOM.as_matrix()), v, atol=1e-9)
    np.testing.assert_allclose(rot.axis_angle_to_matrix(np.zeros(3)), np.eye(3))
    np.testing.assert_allclose(rot.matrix_to_axis_angle(np.eye(3)), np.zeros(3), atol=1e-15)


def test_quaternions_match_scipy_wxyz():
    q_xyzw = RANDOM.as_quat()
    q_wxyz = np.c_[q_xyzw[:, 3], q_xyzw[:, :3]]
    q_wxyz *= np.sign(q_wxyz[:, :1])
    np.testing.assert_allclose(rot.matrix_to_quat(RANDOM.as_matrix()), q_wxyz, atol=1e-12)
    np.testing.assert_allclose(rot.quat_to_matrix(q_wxyz), RANDOM.as_matrix(), atol=1e-12)
    # q and -q are the same rotation
    np.testing.assert_allclose(rot.quat_to_matrix(-q_wxyz), RANDOM.as_matrix(), atol=1e-12)


def test_project_to_so3():
    m = RANDOM.as_matrix()[:10] + RNG.normal(scale=1e-2, size=(10, 3, 3))
    p = rot.project_to_so3(m)
    np.testing.assert_allclose(np.linalg.det(p), 1.0, atol=1e-12)
    np.testing.assert_allclose(p @ np.swapaxes(p, -1, -2), np.broadcast_to(np.eye(3), p.shape), atol=1e-12)


@pytest.mark.parametrize(
    "fn,bad",
    [
        (rot.euler_to_matrix, np.zeros(4)),
        (rot.rot6d_to_matrix, np.zeros(5)),
        (rot.matrix_to_quat, np.eye(2)),
        (rot.quat_to_matrix, np.zeros(4)),
        (rot.rot6d_to_matrix, np.zeros(6)),
    ],
)
def test_bad_input_raises_value_error(fn, bad):
    with pytest.raises(ValueError):
        fn(bad)
