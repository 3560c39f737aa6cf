"""Rotation helpers (numpy only): Euler angles, matrices, 6-D rotations, axis-angle, quaternions.

Conventions (stated once, used everywhere in Kosmos-Env):

- **Euler** angles are ``(roll, pitch, yaw)`` about the *fixed* (extrinsic) x, y, z axes, applied
  in that order, so ``R = Rz(yaw) @ Ry(pitch) @ Rx(roll)``. This is SciPy's ``"xyz"``
  (lower-case) convention, transforms3d's ``"sxyz"``, and what Bridge / WidowX states and
  SimplerEnv's ``euler2axangle`` use.
- **6-D rotation** (Zhou et al., 2019) is the first two *columns* of the matrix, concatenated:
  ``[R[:, 0], R[:, 1]]``. Decoding Gram-Schmidt-orthonormalises them and takes the cross
  product for the third column. This is the column-based layout of NVIDIA cosmos-framework's
  ``convert_rotation(..., output_format="rot6d")``.
- **Axis-angle** is the rotation vector ``theta * axis`` (radians).
- **Quaternions** are ``(w, x, y, z)`` with ``w >= 0`` on output.

Every function accepts a single value or a batch with leading dimensions (``(..., 3)``,
``(..., 3, 3)``, ...) and returns float64 unless the input is float32. The ``*_single``
variants take exactly one float64 rotation and return the same bits as the batched functions
with a fraction of their overhead (for per-step control loops; see their docstring).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "euler_to_matrix",
    "matrix_to_euler",
    "matrix_to_rot6d",
    "rot6d_to_matrix",
    "axis_angle_to_matrix",
    "matrix_to_axis_angle",
    "quat_to_matrix",
    "matrix_to_quat",
    "project_to_so3",
    "euler_to_matrix_single",
    "matrix_to_euler_single",
    "matrix_to_axis_angle_single",
]


def _as_float(x: np.ndarray) -> np.ndarray:
    arr = np.asarray(x)
    return arr.astype(np.float64) if arr.dtype != np.float32 else arr


def _check_last(arr: np.ndarray, n: int, name: str) -> None:
    if arr.ndim < 1 or arr.shape[-1] != n:
        raise ValueError(f"{name} must have shape (..., {n}), got {arr.shape}")


def _check_matrix(arr: np.ndarray) -> None:
    if arr.ndim < 2 or arr.shape[-2:] != (3, 3):
        raise ValueError(f"rotation matrices must have shape (..., 3, 3), got {arr.shape}")


def euler_to_matrix(euler: np.ndarray) -> np.ndarray:
    """``(roll, pitch, yaw)`` (extrinsic xyz, radians) → rotation matrix ``Rz @ Ry @ Rx``."""
    e = _as_float(euler)
    _check_last(e, 3, "euler angles")
    r, p, y = e[..., 0], e[..., 1], e[..., 2]
    cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    m = np.empty(e.shape[:-1] + (3, 3), dtype=e.dtype)
    m[..., 0, 0] = cy * cp
    m[..., 0, 1] = cy * sp * sr - sy * cr
    m[..., 0, 2] = cy * sp * cr + sy * sr
    m[..., 1, 0] = sy * cp
    m[..., 1, 1] = sy * sp * sr + cy * cr
    m[..., 1, 2] = sy * sp * cr - cy * sr
    m[..., 2, 0] = -sp
    m[..., 2, 1] = cp * sr
    m[..., 2, 2] = cp * cr
    return m


def matrix_to_euler(matrix: np.ndarray) -> np.ndarray:
    """Rotation matrix → ``(roll, pitch, yaw)`` (extrinsic xyz); pitch in [-pi/2, pi/2].

    At gimbal lock (``|pitch| = pi/2``) roll is set to 0 and yaw absorbs the rest, as SciPy does.
    """
    m = _as_float(matrix)
    _check_matrix(m)
    sp = np.clip(-m[..., 2, 0], -1.0, 1.0)
    pitch = np.arcsin(sp)
    cp = np.sqrt(m[..., 2, 1] ** 2 + m[..., 2, 2] ** 2)
    locked = cp < 1e-9
    roll = np.where(locked, 0.0, np.arctan2(m[..., 2, 1], m[..., 2, 2]))
    yaw_free = np.arctan2(m[..., 1, 0], m[..., 0, 0])
    # gimbal lock: R = Rz(yaw) Ry(+-pi/2); read yaw from the remaining 2x2 block
    yaw_locked = np.arctan2(-m[..., 0, 1], m[..., 1, 1])
    yaw = np.where(locked, yaw_locked, yaw_free)
    return np.stack([roll, pitch, yaw], axis=-1).astype(m.dtype)


def matrix_to_rot6d(matrix: np.ndarray) -> np.ndarray:
    """Rotation matrix → 6-D rotation ``[first column, second column]``."""
    m = _as_float(matrix)
    _check_matrix(m)
    return np.concatenate([m[..., :, 0], m[..., :, 1]], axis=-1)


def rot6d_to_matrix(rot6d: np.ndarray) -> np.ndarray:
    """6-D rotation → rotation matrix (Gram-Schmidt on the two columns, third = cross product)."""
    v = _as_float(rot6d)
    _check_last(v, 6, "6-D rotations")
    a, b = v[..., :3], v[..., 3:]
    na = np.linalg.norm(a, axis=-1, keepdims=True)
    if np.any(na < 1e-12):
        raise ValueError("6-D rotation has a zero first column")
    c0 = a / na
    b = b - np.sum(c0 * b, axis=-1, keepdims=True) * c0
    nb = np.linalg.norm(b, axis=-1, keepdims=True)
    if np.any(nb < 1e-12):
        raise ValueError("6-D rotation columns are parallel")
    c1 = b / nb
    c2 = np.cross(c0, c1)
    return np.stack([c0, c1, c2], axis=-1)


# the cross-product matrix [v]x of (v0, v1, v2) as a gather from (v0, v1, v2, +0.0) times +-1 (an
# exact sign flip, the same bits as negating): rows (0, -v2, v1), (v2, 0, -v0), (-v1, v0, 0)
_CROSS_INDEX = np.array([3, 2, 1, 2, 3, 0, 1, 0, 3])
_CROSS_SIGN = {dt: np.array([1, -1, 1, 1, 1, -1, -1, 1, 1], dtype=dt) for dt in (np.float32, np.float64)}
_EYE3 = {dt: np.eye(3, dtype=dt) for dt in (np.float32, np.float64)}
for _constant in (*_CROSS_SIGN.values(), *_EYE3.values(), _CROSS_INDEX):
    _constant.flags.writeable = False


def axis_angle_to_matrix(rotvec: np.ndarray) -> np.ndarray:
    """Rotation vector ``theta * axis`` → rotation matrix (Rodrigues)."""
    v = _as_float(rotvec)
    _check_last(v, 3, "rotation vectors")
    theta = np.linalg.norm(v, axis=-1)[..., None, None]
    padded = np.zeros(v.shape[:-1] + (4,), dtype=v.dtype)
    padded[..., :3] = v
    k = (padded[..., _CROSS_INDEX] * _CROSS_SIGN[v.dtype.type]).reshape(v.shape[:-1] + (3, 3))
    small = theta < 1e-8
    if small.any():
        safe = np.where(small, 1.0, theta)
        a = np.where(small, 1.0 - theta**2 / 6.0, np.sin(safe) / safe)
        b = np.where(small, 0.5 - theta**2 / 24.0, (1.0 - np.cos(safe)) / safe**2)
    else:  # no small angle: np.where would pick every element of these, so skip the other branch
        a = np.sin(theta) / theta
        b = (1.0 - np.cos(theta)) / theta**2
    return _EYE3[v.dtype.type] + a * k + b * (k @ k)


def matrix_to_axis_angle(matrix: np.ndarray) -> np.ndarray:
    """Rotation matrix → rotation vector (angle in [0, pi]); via the quaternion for stability."""
    q = matrix_to_quat(matrix)
    w, xyz = q[..., :1], q[..., 1:]
    s = np.linalg.norm(xyz, axis=-1, keepdims=True)
    angle = 2.0 * np.arctan2(s, w)
    small = s < 1e-12
    scale = np.where(small, 2.0 / np.where(w == 0, 1.0, w), angle / np.where(small, 1.0, s))
    return xyz * scale


def quat_to_matrix(quat: np.ndarray) -> np.ndarray:
    """Quaternion ``(w, x, y, z)`` (normalised here) → rotation matrix."""
    q = _as_float(quat)
    _check_last(q, 4, "quaternions")
    n = np.linalg.norm(q, axis=-1, keepdims=True)
    if np.any(n < 1e-12):
        raise ValueError("zero-norm quaternion")
    w, x, y, z = np.moveaxis(q / n, -1, 0)
    m = np.empty(q.shape[:-1] + (3, 3), dtype=q.dtype)
    m[..., 0, 0] = 1 - 2 * (y * y + z * z)
    m[..., 0, 1] = 2 * (x * y - z * w)
    m[..., 0, 2] = 2 * (x * z + y * w)
    m[..., 1, 0] = 2 * (x * y + z * w)
    m[..., 1, 1] = 1 - 2 * (x * x + z * z)
    m[..., 1, 2] = 2 * (y * z - x * w)
    m[..., 2, 0] = 2 * (x * z - y * w)
    m[..., 2, 1] = 2 * (y * z + x * w)
    m[..., 2, 2] = 1 - 2 * (x * x + y * y)
    return m


def matrix_to_quat(matrix: np.ndarray) -> np.ndarray:
    """Rotation matrix → quaternion ``(w, x, y, z)`` with ``w >= 0`` (Shepperd's method)."""
    m = _as_float(matrix)
    _check_matrix(m)
    flat = m.reshape(-1, 3, 3)
    out = np.empty((flat.shape[0], 4), dtype=m.dtype)
    for i, r in enumerate(flat):
        tr = r[0, 0] + r[1, 1] + r[2, 2]
        if tr > 0:
            s = 2.0 * np.sqrt(tr + 1.0)
            q = [0.25 * s, (r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s]
        elif r[0, 0] > r[1, 1] and r[0, 0] > r[2, 2]:
            s = 2.0 * np.sqrt(1.0 + r[0, 0] - r[1, 1] - r[2, 2])
            q = [(r[2, 1] - r[1, 2]) / s, 0.25 * s, (r[0, 1] + r[1, 0]) / s, (r[0, 2] + r[2, 0]) / s]
        elif r[1, 1] > r[2, 2]:
            s = 2.0 * np.sqrt(1.0 + r[1, 1] - r[0, 0] - r[2, 2])
            q = [(r[0, 2] - r[2, 0]) / s, (r[0, 1] + r[1, 0]) / s, 0.25 * s, (r[1, 2] + r[2, 1]) / s]
        else:
            s = 2.0 * np.sqrt(1.0 + r[2, 2] - r[0, 0] - r[1, 1])
            q = [(r[1, 0] - r[0, 1]) / s, (r[0, 2] + r[2, 0]) / s, (r[1, 2] + r[2, 1]) / s, 0.25 * s]
        q = np.asarray(q, dtype=m.dtype)
        q /= np.linalg.norm(q)
        out[i] = -q if q[0] < 0 else q
    return out.reshape(m.shape[:-2] + (4,))


def project_to_so3(matrix: np.ndarray) -> np.ndarray:
    """Nearest proper rotation to an approximate matrix (SVD, determinant forced to +1)."""
    m = _as_float(matrix)
    _check_matrix(m)
    u, _, vt = np.linalg.svd(m)
    d = np.sign(np.linalg.det(u @ vt))
    u = u.copy()
    u[..., :, 2] *= d[..., None]
    return u @ vt


# -- one rotation at a time, bit for bit the batched functions above --------------------------
#
# The batched functions spend most of a single rotation's time on numpy call overhead (tiny
# arrays, np.where over both branches, np.stack). These do the same arithmetic on Python floats
# in the same order: + - * / and sqrt are correctly rounded IEEE operations in numpy and in
# Python alike, so the results are the same bits. What is not exactly rounded stays numpy:
# sin, cos, arcsin and arctan2 are called through numpy on one value, which runs the same ufunc
# inner loop as the batched code's 0-d calls (libm, or SVML on AVX-512 CPUs, whichever numpy
# picks for a one-element call); the quaternion norm stays np.linalg.norm (a BLAS dot product,
# whose kernel differs between CPUs). Only float64 input is accepted: float32 would be computed
# in float32 by the batched functions.


def _one_matrix(matrix: np.ndarray) -> list[float]:
    m = np.asarray(matrix)
    if m.shape != (3, 3) or m.dtype != np.float64:
        raise ValueError(f"expected one float64 (3, 3) rotation matrix, got {m.shape} {m.dtype}")
    return m.ravel().tolist()


def euler_to_matrix_single(euler: np.ndarray) -> np.ndarray:
    """:func:`euler_to_matrix` of one float64 ``(roll, pitch, yaw)``: the same (3, 3) bits."""
    e = np.asarray(euler)
    if e.shape != (3,) or e.dtype != np.float64:
        raise ValueError(f"expected one float64 (3,) euler vector, got {e.shape} {e.dtype}")
    r, p, y = e.tolist()
    cos, sin = np.cos, np.sin
    cr, sr, cp, sp, cy, sy = (float(cos(r)), float(sin(r)), float(cos(p)), float(sin(p)), float(cos(y)), float(sin(y)))
    return np.array(
        [
            [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
            [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
            [-sp, cp * sr, cp * cr],
        ]
    )


def matrix_to_euler_single(matrix: np.ndarray) -> np.ndarray:
    """:func:`matrix_to_euler` of one float64 rotation matrix: the same (3,) bits."""
    m00, m01, _, m10, m11, _, m20, m21, m22 = _one_matrix(matrix)
    # np.clip(x, -1.0, 1.0) with scalar bounds: numpy's loop replaces x only when it lies outside
    sp = -m20
    if sp < -1.0:
        sp = -1.0
    if sp > 1.0:
        sp = 1.0
    pitch = float(np.arcsin(sp))
    cp = math.sqrt(m21 * m21 + m22 * m22)
    if cp < 1e-9:  # gimbal lock, as in matrix_to_euler
        roll, yaw = 0.0, float(np.arctan2(-m01, m11))
    else:
        roll, yaw = float(np.arctan2(m21, m22)), float(np.arctan2(m10, m00))
    return np.array([roll, pitch, yaw])


def _matrix_to_quat_single(matrix: np.ndarray) -> np.ndarray:
    """:func:`matrix_to_quat` of one float64 rotation matrix: the same (4,) bits."""
    r00, r01, r02, r10, r11, r12, r20, r21, r22 = _one_matrix(matrix)
    tr = r00 + r11 + r22
    if tr > 0:
        s = 2.0 * math.sqrt(tr + 1.0)
        q = [0.25 * s, (r21 - r12) / s, (r02 - r20) / s, (r10 - r01) / s]
    elif r00 > r11 and r00 > r22:
        s = 2.0 * math.sqrt(1.0 + r00 - r11 - r22)
        q = [(r21 - r12) / s, 0.25 * s, (r01 + r10) / s, (r02 + r20) / s]
    elif r11 > r22:
        s = 2.0 * math.sqrt(1.0 + r11 - r00 - r22)
        q = [(r02 - r20) / s, (r01 + r10) / s, 0.25 * s, (r12 + r21) / s]
    else:
        s = 2.0 * math.sqrt(1.0 + r22 - r00 - r11)
        q = [(r10 - r01) / s, (r02 + r20) / s, (r12 + r21) / s, 0.25 * s]
    quat = np.array(q)
    quat /= np.linalg.norm(quat)  # the batched function's own norm call (BLAS)
    return -quat if quat[0] < 0 else quat


def matrix_to_axis_angle_single(matrix: np.ndarray) -> np.ndarray:
    """:func:`matrix_to_axis_angle` of one float64 rotation matrix: the same (3,) bits."""
    q = _matrix_to_quat_single(matrix)
    w, xyz = q[:1], q[1:]
    s = np.linalg.norm(xyz, axis=-1, keepdims=True)  # the batched function's own reduction
    s0, w0 = float(s[0]), float(w[0])
    if s0 < 1e-12:
        scale = 2.0 / (1.0 if w0 == 0 else w0)
    else:
        scale = (2.0 * float(np.arctan2(s0, w0))) / s0
    x, y, z = xyz.tolist()
    return np.array([x * scale, y * scale, z * scale])
