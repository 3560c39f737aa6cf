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
  ``n = 2 (x - q01) / max(q99 - q01, 1e-8) - 1`` on all ten dimensions (method ``"quantile"``,
  what NVIDIA's reader uses; inverse ``x = (n + 1) (q99 - q01) / 2 + q01``).

Sources (read Nov 2026): diffusers 0.42.1 ``pipeline_cosmos3_omni.py`` (``bridge_orig_lerobot``
is domain 7, raw width 10 = 9-D pose + 1-D gripper); NVIDIA/cosmos
``cookbooks/cosmos3/generator/action/README.md`` ("Action Definition": 9-D pose *deltas*, 3-D
translation + 6-D rotation, plus 1-D open/close grasp state) and ``run_id_with_diffusers.ipynb``
(Bridge: reader ``BridgeOrigLeRobotDataset``, chunk 16, tier 480; ``flow_shift`` 10, 30 steps,
guidance 1.0); NVIDIA cosmos-framework ``data/generator/action/utils/pose_utils.py`` (``rot6d`` =
columns, ``backward_framewise``), ``action_processing.py`` (quantile affine normalisation) and
``BridgeOrigLeRobotDataset`` (5 fps, chunk 16, gripper ``action[:, 6]``, the three frame
constants above).

Action statistics (``world.bridge.normalization`` of ``Kosmos-Bridge-v1``): NVIDIA's public
cosmos-framework release of 2026-08-21 (commit 5eee9ed574255f017b192161bfbb5a10253d65cf),
``cosmos_framework/data/generator/action/normalizer_stats/bridge_orig_lerobot_stats.json``
(SPDX OpenMDW-1.1), the ``q01``/``q99`` its Bridge reader
``BridgeOrigLeRobotDataset(action_normalization="quantile")`` normalises with. The values are
copied into the spec (so they enter its hash); :func:`read_action_stats` reads such a file and
checks it. Methods:

- ``"quantile"`` (default, the release's): the formula above on all ten dimensions.
- ``"quantile_rot"`` (kept selectable for comparison): translation and gripper as above, the six
  rotation dimensions passed through un-normalised (identity statistics). Before the spec was
  re-frozen these two names were the other way round; no result was ever produced with them.
- ``"none"``: raw values.

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
- ``normalization``: ``method``, the ten ``q01`` / ``q99`` values and their ``source`` (above). A
  spec whose statistics are ``null`` is refused with the fix named (:func:`require_action_stats`).
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
        raise ValueError(f"action must be a numpy array of shape {_expected_shape(chunk)}, got {type(action).__name__}")
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
BRIDGE_NORMALIZATIONS = ("quantile", "quantile_rot", "none")
# the cosmos-framework domain whose statistics the Bridge world uses
BRIDGE_STATS_DOMAIN = "bridge_orig_lerobot"
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
    from kosmos_env.utils.rotations import euler_to_matrix, matrix_to_euler

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
    from kosmos_env.utils.rotations import matrix_to_rot6d

    if gripper not in BRIDGE_GRIPPER_MODES:
        raise ValueError(f"gripper must be one of {BRIDGE_GRIPPER_MODES}, got {gripper!r}")
    rows = np.asarray(actions, dtype=np.float64).reshape(-1, ACTION_DIM)
    positions, rotations = integrate_env_actions(rows, position, state_rotation, rotation_delta)
    poses = [bridge_cosmos_pose(p, r) for p, r in zip(positions, rotations, strict=True)]
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
    from kosmos_env.utils.rotations import matrix_to_euler, project_to_so3, rot6d_to_matrix

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


def _quantile_bounds(method: str, q01, q99) -> tuple[np.ndarray, np.ndarray] | None:
    """(q01, q99) as arrays for ``method`` (rotation dims set to [-1, 1] for "quantile_rot"); None for "none"."""
    if method not in BRIDGE_NORMALIZATIONS:
        raise ValueError(f"normalization method must be one of {BRIDGE_NORMALIZATIONS}, got {method!r}")
    if method == "none":
        return None
    if q01 is None or q99 is None:
        raise ValueError(f"normalization {method!r} needs q01 and q99 (10 numbers each); got q01={q01!r}, q99={q99!r}")
    lo = np.array(q01, dtype=np.float64)
    hi = np.array(q99, dtype=np.float64)
    if lo.shape != (BRIDGE_ACTION_DIM,) or hi.shape != (BRIDGE_ACTION_DIM,):
        raise ValueError(f"q01 and q99 must each hold {BRIDGE_ACTION_DIM} numbers, got {lo.shape} and {hi.shape}")
    if method == "quantile_rot":  # rotation dims keep identity stats: they pass through unchanged
        lo[3:9], hi[3:9] = -1.0, 1.0
    return lo, hi


def normalize_bridge10(raw: np.ndarray, method: str, q01=None, q99=None, clamp: bool = False) -> np.ndarray:
    """Raw 10-D Bridge actions → the model's space: ``2 (x - q01) / max(q99 - q01, 1e-8) - 1`` (the release's formula)."""
    bounds = _quantile_bounds(method, q01, q99)
    x = np.asarray(raw, dtype=np.float64)
    if bounds is None:
        out = x.copy()
    else:
        lo, hi = bounds
        out = 2.0 * (x - lo) / np.maximum(hi - lo, 1e-8) - 1.0
    return np.clip(out, -1.0, 1.0) if clamp else out


def denormalize_bridge10(normalized: np.ndarray, method: str, q01=None, q99=None) -> np.ndarray:
    """Inverse of :func:`normalize_bridge10` (without the clamp): ``0.5 (n + 1) (q99 - q01) + q01``."""
    bounds = _quantile_bounds(method, q01, q99)
    n = np.asarray(normalized, dtype=np.float64)
    if bounds is None:
        return n.copy()
    lo, hi = bounds
    return 0.5 * (n + 1.0) * (hi - lo) + lo


def hold_bridge10(gripper_value: float) -> np.ndarray:
    """A raw 10-D action that keeps the arm still: zero translation, identity rotation, same gripper."""
    row = np.zeros(BRIDGE_ACTION_DIM)
    row[3], row[7] = 1.0, 1.0  # rot6d of the identity: columns e_x, e_y
    row[9] = gripper_value
    return row


class ActionStatsError(ValueError):
    """Action statistics are missing or malformed (the message names the fix)."""


def check_action_stats(q01, q99, where: str = "statistics") -> tuple[list[float], list[float]]:
    """Validate ten q01 and ten q99 numbers (finite, q01 <= q99); returns them as float lists."""
    for name, values in (("q01", q01), ("q99", q99)):
        if values is None:
            raise ActionStatsError(f"{where}: {name} is null")
        if (
            not isinstance(values, (list, tuple))
            or len(values) != BRIDGE_ACTION_DIM
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v) for v in values)
        ):
            raise ActionStatsError(
                f"{where}: {name} must be a list of {BRIDGE_ACTION_DIM} finite numbers, got {values!r}"
            )
    lo, hi = [float(v) for v in q01], [float(v) for v in q99]
    bad = [i for i in range(BRIDGE_ACTION_DIM) if lo[i] > hi[i]]
    if bad:
        raise ActionStatsError(f"{where}: q01 > q99 in dimension(s) {bad}")
    return lo, hi


def read_action_stats(path, domain: str = BRIDGE_STATS_DOMAIN) -> dict:
    """Read one domain's ``q01``/``q99`` from a statistics JSON file; a clear error when it cannot.

    Accepts the layout ``{"<domain>": {"q01": [...], "q99": [...]}, "source": ..., "method": ...}``
    (also a file holding ``q01``/``q99`` at the top level). Returns ``{"q01", "q99", "source"}``.
    """
    import json
    import os

    fix = (
        "get NVIDIA's cosmos-framework statistics (normalizer_stats/bridge_orig_lerobot_stats.json) or a "
        'file with {"' + domain + '": {"q01": [10 numbers], "q99": [10 numbers]}}'
    )
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ActionStatsError(f"action statistics file {path} not found: {fix}")
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ActionStatsError(f"action statistics file {path} is not valid JSON ({exc}): {fix}") from None
    if not isinstance(data, dict):
        raise ActionStatsError(f"action statistics file {path} must hold a JSON object: {fix}")
    block = data.get(domain, data)
    if not isinstance(block, dict) or "q01" not in block or "q99" not in block:
        raise ActionStatsError(f"action statistics file {path} has no q01/q99 for domain {domain!r}: {fix}")
    q01, q99 = check_action_stats(block["q01"], block["q99"], where=f"{path} [{domain}]")
    return {"q01": q01, "q99": q99, "source": str(data.get("source", ""))}


def require_action_stats(normalization, spec_id: str = "the spec") -> None:
    """Refuse a Bridge normalisation whose statistics are null or malformed, naming the fix."""
    method = normalization.get("method")
    if method == "none":
        return
    try:
        check_action_stats(
            normalization.get("q01"), normalization.get("q99"), where=f"{spec_id}: world.bridge.normalization"
        )
    except ActionStatsError as exc:
        raise ActionStatsError(
            f"{exc}. Normalisation {method!r} needs the Bridge action statistics (10 numbers each for q01 and q99). "
            f"Use the registered Kosmos-Bridge-v1 spec, which carries NVIDIA's cosmos-framework values, or pass them "
            f"with the override world={{'bridge': {{..., 'normalization': {{'method': {method!r}, "
            f"**kosmos_env.actions.read_action_stats('bridge_orig_lerobot_stats.json'), 'clamp': False}}}}}} "
            f"(this changes the spec hash)."
        ) from None
