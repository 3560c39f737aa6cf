"""The 7-D action contract of every Kosmos env, and its validation.

One control step is ``[dx, dy, dz, droll, dpitch, dyaw, gripper]`` (float32): translation in
metres and roll/pitch/yaw differences in radians in the robot base frame, as Bridge data
defines them, and the gripper in [0, 1] with 1 = open, 0 = closed. This is what Bridge-trained
VLAs (OpenVLA, Octo, MiniVLA) emit after un-normalisation.

Validation never clips silently: a wrong shape, a NaN or an out-of-range value raises
``ValueError`` naming the field, unless the env spec sets ``clip_actions``. Dtypes: as with a
Gymnasium ``Box``, an array-like that holds real numbers is accepted and cast to float32 (a
float64 or float16 array, a Python list or tuple of numbers); an integer, boolean, complex,
string or object *array* raises ``ValueError`` (an integer array as an action is almost always a
discrete action or an index passed by mistake).

Bridge / Cosmos 3
-----------------

What the 10 numbers of a Cosmos 3 Bridge action mean, and where that comes from.

Layout ``[t(3), r6(6), g(1)]`` per transition ``o_i -a_i-> o_{i+1}`` (k actions, k+1 frames):

- ``t``: translation of the end-effector from pose i to pose i+1, expressed **in the frame of
  pose i** (``backward_framewise``: ``delta_T = T_i^{-1} @ T_{i+1}``), metres.
- ``r6``: the rotation ``R_i^T R_{i+1}`` of the same delta, as a column-based 6-D rotation (first
  two columns of the matrix).
- ``g``: the gripper as Bridge's ``action[6]`` (bridge_orig convention: 1 = open, 0 = closed),
  passed through.
- The end-effector frame is not Bridge's raw state frame: cosmos-framework turns a Bridge state
  ``(xyz, euler_xyz)`` into ``R = R_state @ DEFAULT_ROTATION``, moves the point from
  ``ee_gripper_link`` to ``gripper_link`` (``T @ TCP_TO_FLANGE``, -0.093575 m along x of that
  frame), then re-axes the rotation to OpenCV convention (``R @ BRIDGE_TO_OPENCV``).
- The model consumes the 10 numbers **quantile-normalised** with Bridge's own statistics:
  ``(x - (q99 + q01) / 2) / ((q99 - q01) / 2)`` per dimension ("quantile_rot": all ten dims;
  "quantile": the six rotation dims keep identity stats).

Sources (read Nov 2026): diffusers 0.42.1 ``pipeline_cosmos3_omni.py`` (``bridge_orig_lerobot``
is domain 7, raw width 10 = 9-D pose + 1-D gripper); NVIDIA/cosmos
``cookbooks/cosmos3/generator/action/README.md`` ("Action Definition": 9-D pose *deltas*, 3-D
translation + 6-D rotation, plus 1-D open/close grasp state) and ``run_id_with_diffusers.ipynb``
(Bridge: reader ``BridgeOrigLeRobotDataset``, chunk 16, tier 480; actions come back
normalised and are decoded with ``denormalize_action(method="quantile")`` then
``pose_rel_to_abs(rotation_format="rot6d", pose_convention="backward_framewise")``;
``flow_shift`` 10, 30 steps, guidance 1.0); NVIDIA cosmos-framework
``data/generator/action/utils/pose_utils.py`` (``rot6d`` = columns, ``backward_framewise``) and
``action_processing.py`` (quantile affine normalisation); cosmos-framework's
``BridgeOrigLeRobotDataset`` ("matching Cosmos Action v1.2 defaults": 5 fps, chunk 16,
``backward_framewise`` rot6d, ``quantile_rot`` normalisation with stats
``bridge_orig_lerobot_normalization.json``/``global_raw``, gripper ``action[:, 6]``, the three
frame constants above).

Not established here, so they are explicit spec fields (``world.bridge`` in the env spec):

- ``rotation_delta``: how the env's ``(droll, dpitch, dyaw)`` turns one orientation into the
  next. Default ``"extrinsic_base"``: ``R_{i+1} = Rz(dyaw) Ry(dpitch) Rx(droll) @ R_i`` (the base
  frame composition SimplerEnv's WidowX controller applies); ``"euler_add"`` adds the angles to
  the state's Euler angles instead.
- ``initial_ee_euler``: the end-effector orientation (Bridge state Euler angles) at the first
  frame. A video world has no robot state, yet the 10-D action depends on the current
  orientation, so the world integrates the *commanded* pose from this start (dead reckoning;
  only the orientation matters, translation cancels). Default ``[0, 0, 0]``; a task may set its
  own.
- ``normalization``: ``method`` and the ten ``q01`` / ``q99`` values. NVIDIA's stats file was not
  reachable from here; the registered spec leaves them ``null`` and the world refuses to run a
  real checkpoint until they are supplied (which changes the spec hash, as it should).
- ``gripper``: ``"identity"`` (default, bridge_orig convention) or ``"invert"``.
"""
from __future__ import annotations

import numpy as np

ACTION_FIELDS = ("dx", "dy", "dz", "droll", "dpitch", "dyaw", "gripper")
ACTION_DIM = len(ACTION_FIELDS)


def validate_action(
    action: object,
    low: np.ndarray,
    high: np.ndarray,
    chunk: int = 1,
    clip: bool = False,
) -> np.ndarray:
    """Check ``action`` against the contract and return it as a (chunk, 7) float32 array.

    Lists/tuples of numbers and floating-point arrays of any precision are cast to float32
    (bounds are checked after the cast); other array dtypes raise ``ValueError``.

    With ``chunk == 1`` the action has shape (7,); with ``chunk > 1`` it has shape (chunk, 7).
    """
    if isinstance(action, (list, tuple)):
        action = np.asarray(action, dtype=np.float32)
    if not isinstance(action, np.ndarray):
        raise ValueError(
            f"action must be a numpy array of shape {_expected_shape(chunk)}, got {type(action).__name__}"
        )
    if action.dtype.kind != "f":
        raise ValueError(f"action dtype must be floating point (float32), got {action.dtype}")
    expected = _expected_shape(chunk)
    if action.shape != expected:
        raise ValueError(
            f"action shape must be {expected} ({', '.join(ACTION_FIELDS)}"
            f"{' per step' if chunk > 1 else ''}), got {action.shape}"
        )
    rows = action.reshape(chunk, ACTION_DIM).astype(np.float32)
    bad = ~np.isfinite(rows)
    if bad.any():
        step, dim = np.argwhere(bad)[0]
        raise ValueError(f"action field {_where(dim, step, chunk)} is {rows[step, dim]} (not finite)")
    if clip:
        return np.clip(rows, low, high).astype(np.float32)
    below = rows < low
    above = rows > high
    if below.any() or above.any():
        step, dim = np.argwhere(below | above)[0]
        raise ValueError(
            f"action field {_where(dim, step, chunk)} = {rows[step, dim]:.6g} is outside "
            f"[{low[dim]:.6g}, {high[dim]:.6g}] (the env spec's action bounds; nothing is clipped "
            f"unless the spec sets clip_actions)"
        )
    return rows


def _expected_shape(chunk: int) -> tuple[int, ...]:
    return (ACTION_DIM,) if chunk == 1 else (chunk, ACTION_DIM)


def _where(dim: int, step: int, chunk: int) -> str:
    name = f"'{ACTION_FIELDS[dim]}' (index {dim})"
    return f"{name} of chunk step {step}" if chunk > 1 else name


# =============================================================================================
# Bridge (Cosmos 3, domain "bridge_orig_lerobot"): the env's 7-D action -> the model's 10-D action
# =============================================================================================
# The meaning of the 10 numbers and the sources are in the module docstring.


# Raw Bridge state -> WidowX kinematics frame: R_fk = R_state @ BRIDGE_DEFAULT_ROTATION.
BRIDGE_DEFAULT_ROTATION = np.array([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 0.0]])
# Kinematics frame -> the OpenCV-style axes Cosmos action training uses (rotation only).
BRIDGE_TO_OPENCV = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])
# ee_gripper_link -> gripper_link, a pure translation in the kinematics frame (metres).
BRIDGE_TCP_TO_FLANGE = np.array([-0.093575, 0.0, 0.0])

BRIDGE_ACTION_DIM = 10
BRIDGE_ROTATION_DELTAS = ("extrinsic_base", "euler_add")
BRIDGE_NORMALIZATIONS = ("quantile_rot", "quantile", "none")
BRIDGE_GRIPPER_MODES = ("identity", "invert")


def bridge_cosmos_pose(position: np.ndarray, state_rotation: np.ndarray) -> np.ndarray:
    """A Bridge state pose (``ee_gripper_link`` position, state rotation) as Cosmos' 4×4 pose."""
    r_fk = np.asarray(state_rotation, dtype=np.float64) @ BRIDGE_DEFAULT_ROTATION
    pose = np.eye(4)
    pose[:3, 3] = np.asarray(position, dtype=np.float64) + r_fk @ BRIDGE_TCP_TO_FLANGE
    pose[:3, :3] = r_fk @ BRIDGE_TO_OPENCV
    return pose


def integrate_env_actions(
    actions: np.ndarray,
    position: np.ndarray,
    state_rotation: np.ndarray,
    rotation_delta: str = "extrinsic_base",
) -> tuple[np.ndarray, np.ndarray]:
    """Commanded Bridge state poses after each of ``actions`` (k, 7), starting from the given pose.

    Returns ``positions`` (k+1, 3) and ``rotations`` (k+1, 3, 3), the start included.
    """
    from kosmos_env.rotations import euler_to_matrix, matrix_to_euler

    if rotation_delta not in BRIDGE_ROTATION_DELTAS:
        raise ValueError(f"rotation_delta must be one of {BRIDGE_ROTATION_DELTAS}, got {rotation_delta!r}")
    rows = np.asarray(actions, dtype=np.float64).reshape(-1, ACTION_DIM)
    positions = [np.asarray(position, dtype=np.float64)]
    rotations = [np.asarray(state_rotation, dtype=np.float64)]
    for row in rows:
        positions.append(positions[-1] + row[:3])
        if rotation_delta == "extrinsic_base":
            rotations.append(euler_to_matrix(row[3:6]) @ rotations[-1])
        else:
            rotations.append(euler_to_matrix(matrix_to_euler(rotations[-1]) + row[3:6]))
    return np.stack(positions), np.stack(rotations)


def env_to_bridge10(
    actions: np.ndarray,
    position: np.ndarray,
    state_rotation: np.ndarray,
    rotation_delta: str = "extrinsic_base",
    gripper: str = "identity",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Env actions (k, 7) → raw (un-normalised) Cosmos Bridge actions (k, 10).

    Also returns the commanded end pose (position (3,), state rotation (3, 3)), so a caller can
    chain chunks.
    """
    from kosmos_env.rotations import matrix_to_rot6d

    if gripper not in BRIDGE_GRIPPER_MODES:
        raise ValueError(f"gripper must be one of {BRIDGE_GRIPPER_MODES}, got {gripper!r}")
    rows = np.asarray(actions, dtype=np.float64).reshape(-1, ACTION_DIM)
    positions, rotations = integrate_env_actions(rows, position, state_rotation, rotation_delta)
    poses = [bridge_cosmos_pose(p, r) for p, r in zip(positions, rotations)]
    out = np.empty((len(rows), BRIDGE_ACTION_DIM))
    for i in range(len(rows)):
        delta = np.linalg.inv(poses[i]) @ poses[i + 1]
        out[i, :3] = delta[:3, 3]
        out[i, 3:9] = matrix_to_rot6d(delta[:3, :3])
    g = rows[:, 6]
    out[:, 9] = g if gripper == "identity" else 1.0 - g
    return out, positions[-1], rotations[-1]


def bridge10_to_env(
    bridge10: np.ndarray,
    position: np.ndarray,
    state_rotation: np.ndarray,
    rotation_delta: str = "extrinsic_base",
    gripper: str = "identity",
) -> np.ndarray:
    """Inverse of :func:`env_to_bridge10`: raw Cosmos Bridge actions (k, 10) → env actions (k, 7).

    Useful to read inverse-dynamics output in the env's terms (the consistency gate) and to test
    the forward conversion.
    """
    from kosmos_env.rotations import matrix_to_euler, project_to_so3, rot6d_to_matrix

    rows = np.asarray(bridge10, dtype=np.float64).reshape(-1, BRIDGE_ACTION_DIM)
    pose = bridge_cosmos_pose(position, state_rotation)
    state_rot = np.asarray(state_rotation, dtype=np.float64)
    state_pos = np.asarray(position, dtype=np.float64)
    out = np.empty((len(rows), ACTION_DIM))
    for i, row in enumerate(rows):
        delta = np.eye(4)
        delta[:3, 3] = row[:3]
        delta[:3, :3] = project_to_so3(rot6d_to_matrix(row[3:9]))
        pose = pose @ delta
        new_rot = pose[:3, :3] @ BRIDGE_TO_OPENCV.T @ BRIDGE_DEFAULT_ROTATION.T
        new_pos = pose[:3, 3] - (new_rot @ BRIDGE_DEFAULT_ROTATION) @ BRIDGE_TCP_TO_FLANGE
        out[i, :3] = new_pos - state_pos
        if rotation_delta == "extrinsic_base":
            out[i, 3:6] = matrix_to_euler(new_rot @ state_rot.T)
        elif rotation_delta == "euler_add":
            d = matrix_to_euler(new_rot) - matrix_to_euler(state_rot)
            out[i, 3:6] = (d + np.pi) % (2 * np.pi) - np.pi
        else:
            raise ValueError(f"rotation_delta must be one of {BRIDGE_ROTATION_DELTAS}, got {rotation_delta!r}")
        out[i, 6] = row[9] if gripper == "identity" else 1.0 - row[9]
        state_pos, state_rot = new_pos, new_rot
    return out


def _quantile_affine(method: str, q01, q99) -> tuple[np.ndarray, np.ndarray]:
    if method not in BRIDGE_NORMALIZATIONS:
        raise ValueError(f"normalization method must be one of {BRIDGE_NORMALIZATIONS}, got {method!r}")
    if method == "none":
        return np.zeros(BRIDGE_ACTION_DIM), np.ones(BRIDGE_ACTION_DIM)
    if q01 is None or q99 is None:
        raise ValueError(f"normalization {method!r} needs q01 and q99 (10 numbers each); got q01={q01!r}, q99={q99!r}")
    lo = np.asarray(q01, dtype=np.float64)
    hi = np.asarray(q99, dtype=np.float64)
    if lo.shape != (BRIDGE_ACTION_DIM,) or hi.shape != (BRIDGE_ACTION_DIM,):
        raise ValueError(f"q01 and q99 must each hold {BRIDGE_ACTION_DIM} numbers, got {lo.shape} and {hi.shape}")
    if method == "quantile":  # rotation dims keep identity stats
        lo, hi = lo.copy(), hi.copy()
        lo[3:9], hi[3:9] = -1.0, 1.0
    offset = (hi + lo) / 2.0
    scale = np.maximum(hi - lo, 1e-8) / 2.0
    return offset, scale


def normalize_bridge10(raw: np.ndarray, method: str, q01=None, q99=None, clamp: bool = False) -> np.ndarray:
    """Raw 10-D Bridge actions → the model's normalised space (cosmos-framework's quantile affine map)."""
    offset, scale = _quantile_affine(method, q01, q99)
    out = (np.asarray(raw, dtype=np.float64) - offset) / scale
    return np.clip(out, -1.0, 1.0) if clamp else out


def denormalize_bridge10(normalized: np.ndarray, method: str, q01=None, q99=None) -> np.ndarray:
    """Inverse of :func:`normalize_bridge10` (without the clamp)."""
    offset, scale = _quantile_affine(method, q01, q99)
    return np.asarray(normalized, dtype=np.float64) * scale + offset


def hold_bridge10(gripper_value: float) -> np.ndarray:
    """A raw 10-D action that keeps the arm still: zero translation, identity rotation, same gripper."""
    row = np.zeros(BRIDGE_ACTION_DIM)
    row[3], row[7] = 1.0, 1.0  # rot6d of the identity: columns e_x, e_y
    row[9] = gripper_value
    return row
