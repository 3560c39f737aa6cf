"""The Bridge (WidowX 250) third-person camera as a pinhole model, and where the gripper starts.

A generated Bridge world has no simulator to ask where the gripper is, but its camera is
fixed per scene and known: SimplerEnv's WidowX configuration gives the camera relative to the
robot's ``base_link`` (640x480, intrinsics of a Logitech C920) for the setups below. With the
camera and the gripper's start pose, the commanded end-effector motion can be integrated and
projected into the image, which is what the action-consistency gate's direction check needs.

Setups (positions in metres in ``base_link``; quaternions (w, x, y, z) in SAPIEN's camera
convention, x forward, y left, z up):

- ``bridge_dataset``: the camera of the Bridge dataset (toy kitchen, the shipped real episode),
  p = [0.00, -0.16, 0.336], q = [0.909182, -0.0819809, 0.347277, 0.214629];
- ``real_eval_table``: the real-evaluation table (SimplerEnv's empty-table photograph),
  p = [0.0, -0.16, 0.36], oriented to look along [1, 0.553, -1.085] with the robot base
  placed at init_xy = [0.147, 0.028];
- ``sink``: the toy-sink setup, p = [-0.003, -0.21, 0.39],
  q = [-0.907313, 0.0782, -0.36434, -0.194741].

Start pose: SimplerEnv's debugging recipe for the shipped real episode (``bridge_real_1.mp4``)
initialises the simulated robot's tool centre point at [0.298068, -0.114657, 0.10782] in
``base_link``; projected through the ``bridge_dataset`` camera it lands between the gripper's
fingers in the episode's first frame. It is the default ``start_ee_pos`` of the Bridge world;
a task may give its own (``initial_ee_pos`` in its parameters).

Workspace (where the integrated pose may go): the pose a Bridge world integrates from the
commands is what was commanded, and nothing stops a command sequence from driving it through
the table, where the real arm (and any faithful world model) stops. SimplerEnv places the robot
for the ``bridge_dataset`` setup with its base at height 0.870
(``mani_skill2_real2sim/envs/custom_scenes/base_env.py``, ``_initialize_agent``:
``robot_init_height = 0.870``) on a scene whose table top is at ``scene_table_height = 0.87``
(same file, ``__init__``; the Bridge put-on tasks drop their objects onto it from there), at commit
ef7a4d4fdf4b69f2c2154db5b15b9ac8dfe10682 of simpler-env/ManiSkill2_real2sim. The table top is
therefore at z = 0.0 in ``base_link``: the floor of :data:`BRIDGE_WORKSPACE`. Its other bounds
are the box around the arm's reach from the WidowX 250 6DOF URDF in the same repository
(``assets/descriptions/widowx_description/wx250s.urdf``: shoulder axis 0.111 m above
``base_link``; shoulder to ``ee_gripper_link`` at most 0.255 + 0.250 + 0.159 = 0.664 m), so only
the floor binds in practice. The world clips its integrated pose to it after every action
(:func:`integrate_tcp`), and the gate clips the commanded move the same way (its ``workspace``
equals ``world.workspace``).

A spec's ``world.camera`` block holds everything numerically (see :func:`camera_block`), so
the spec hash covers the calibration. :func:`bridge_calibration` turns it into a
:class:`~kosmos_env.worlds.base.CameraCalibration` for any image size: the intrinsics are
scaled per axis, which is exact when the frame shows the camera's whole field of view resized
(not cropped).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kosmos_env.utils.camera import CameraCalibration

#: Logitech C920 at 640x480, as SimplerEnv configures it for every WidowX setup
C920_INTRINSICS = ((623.588, 0.0, 319.501), (0.0, 623.588, 239.545), (0.0, 0.0, 1.0))
#: (height, width) the intrinsics above belong to
NATIVE_SIZE = (480, 640)
#: SimplerEnv's initial tool-centre-point position for the shipped real episode (base_link, m)
REAL_EPISODE_START_EE_POS = (0.298068, -0.114657, 0.10782)

#: table top in base_link for the bridge_dataset setup (SimplerEnv: robot base at 0.870 on a table at 0.87)
TABLE_TOP_Z = 0.0
#: shoulder-axis height and the longest shoulder-to-TCP distance of the WidowX 250 6DOF (wx250s.urdf)
_SHOULDER_Z, _REACH = 0.111, 0.664
#: [[xmin, xmax], [ymin, ymax], [zmin, zmax]] in base_link the integrated TCP is clipped to
BRIDGE_WORKSPACE = ((-_REACH, _REACH), (-_REACH, _REACH), (TABLE_TOP_Z, round(_SHOULDER_Z + _REACH, 3)))
WORKSPACE_SOURCE = (
    "floor = table top in base_link: SimplerEnv (simpler-env/ManiSkill2_real2sim @ ef7a4d4fdf4b69f2c2154db5b15b9ac8dfe10682), "
    "mani_skill2_real2sim/envs/custom_scenes/base_env.py puts the WidowX base (bridge_dataset camera setup) at "
    "robot_init_height 0.870 on a table at scene_table_height 0.87; the other bounds box the arm's reach from "
    "assets/descriptions/widowx_description/wx250s.urdf (shoulder 0.111 m up, shoulder to ee_gripper_link <= 0.664 m)"
)

#: camera pose per setup: position in base_link, and either a SAPIEN quaternion (w, x, y, z)
#: or a look-at direction (SAPIEN's look_at: x along the direction, no roll)
SETUPS: dict[str, dict[str, Any]] = {
    "bridge_dataset": {"position": (0.0, -0.16, 0.336), "quaternion_wxyz": (0.909182, -0.0819809, 0.347277, 0.214629)},
    "real_eval_table": {"position": (0.0, -0.16, 0.36), "look_direction": (1.0, 0.553, -1.085)},
    "sink": {"position": (-0.003, -0.21, 0.39), "quaternion_wxyz": (-0.907313, 0.0782, -0.36434, -0.194741)},
}

_SOURCE = (
    "SimplerEnv (simpler-env/ManiSkill2_real2sim), mani_skill2_real2sim/agents/configs/widowx/defaults.py: "
    "3rd_view_camera relative to base_link; start_ee_pos from its real-to-sim debugging recipe for "
    "data/debug/bridge_real_1.mp4"
)


def quaternion_to_matrix(q_wxyz) -> np.ndarray:
    """Rotation matrix of a (w, x, y, z) quaternion (normalised first)."""
    q = np.asarray(q_wxyz, dtype=np.float64)
    norm = float(np.linalg.norm(q))
    if q.shape != (4,) or not np.isfinite(norm) or norm < 1e-9:
        raise ValueError(f"a quaternion must be 4 finite numbers, not all zero; got {q_wxyz!r}")
    w, x, y, z = q / norm
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def look_direction_matrix(direction) -> np.ndarray:
    """SAPIEN's look_at orientation: x along ``direction``, y left (horizontal), z up."""
    forward = np.asarray(direction, dtype=np.float64)
    forward = forward / np.linalg.norm(forward)
    left = np.cross([0.0, 0.0, 1.0], forward)
    left /= np.linalg.norm(left)
    up = np.cross(forward, left)
    return np.stack([forward, left, up], axis=1)


def sapien_to_opencv(rotation: np.ndarray) -> np.ndarray:
    """Columns (forward, left, up) of a SAPIEN camera -> OpenCV's (right, down, forward)."""
    r = np.asarray(rotation, dtype=np.float64)
    return np.stack([-r[:, 1], -r[:, 2], r[:, 0]], axis=1)


def camera_block(setup: str = "bridge_dataset", start_ee_pos=REAL_EPISODE_START_EE_POS) -> dict[str, Any]:
    """The spec's ``world.camera`` block for a setup: every number written out."""
    if setup not in SETUPS:
        raise ValueError(f"unknown Bridge camera setup {setup!r}; choose one of {sorted(SETUPS)}")
    pose = SETUPS[setup]
    block: dict[str, Any] = {"setup": setup, "position": list(pose["position"])}
    if "quaternion_wxyz" in pose:
        block["quaternion_wxyz"] = list(pose["quaternion_wxyz"])
    else:
        block["look_direction"] = list(pose["look_direction"])
    block.update(
        {
            "convention": "sapien",
            "intrinsics": [list(row) for row in C920_INTRINSICS],
            "native_size": list(NATIVE_SIZE),
            "start_ee_pos": list(start_ee_pos),
            "source": _SOURCE,
        }
    )
    return block


def validate_camera_block(block: Mapping[str, Any]) -> None:
    """Raise ValueError naming the first bad field of a ``world.camera`` block."""
    if not isinstance(block, Mapping):
        raise ValueError("world.camera must be an object")
    if block.get("convention") != "sapien":
        raise ValueError("world.camera.convention must be 'sapien' (x forward, y left, z up)")
    if ("quaternion_wxyz" in block) == ("look_direction" in block):
        raise ValueError("world.camera needs exactly one of 'quaternion_wxyz' and 'look_direction'")
    for key, n in (("position", 3), ("quaternion_wxyz", 4), ("look_direction", 3), ("start_ee_pos", 3)):
        if key in ("quaternion_wxyz", "look_direction") and key not in block:
            continue
        value = np.asarray(block.get(key), dtype=object)
        if value.shape != (n,) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v) for v in value
        ):
            raise ValueError(f"world.camera.{key} must be a list of {n} finite numbers, got {block.get(key)!r}")
    k = np.asarray(block.get("intrinsics"), dtype=object)
    if k.shape != (3, 3) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in k.ravel()):
        raise ValueError("world.camera.intrinsics must be a 3x3 list of numbers")
    k = k.astype(np.float64)
    if not (k[0, 0] > 0 and k[1, 1] > 0 and k[2, 2] == 1 and k[2, 0] == 0 and k[2, 1] == 0):
        raise ValueError("world.camera.intrinsics must be [[fx, s, cx], [0, fy, cy], [0, 0, 1]] with fx, fy > 0")
    size = block.get("native_size")
    if not (isinstance(size, list) and len(size) == 2 and all(isinstance(v, int) and v > 0 for v in size)):
        raise ValueError("world.camera.native_size must be [height, width] positive integers")


def camera_pose(block: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(position, 3x3 matrix whose columns are the OpenCV camera axes in base_link)."""
    if "quaternion_wxyz" in block:
        sapien = quaternion_to_matrix(block["quaternion_wxyz"])
    else:
        sapien = look_direction_matrix(block["look_direction"])
    return np.asarray(block["position"], dtype=np.float64), sapien_to_opencv(sapien)


def bridge_calibration(block: Mapping[str, Any], image_size) -> CameraCalibration:
    """Calibration of the camera in ``block`` for frames of ``image_size`` (height, width).

    Pixel centres map as ``u' = (u + 0.5) * s - 0.5`` with ``s`` the per-axis resize factor.
    """
    validate_camera_block(block)
    height, width = int(image_size[0]), int(image_size[1])
    native_h, native_w = block["native_size"]
    sx, sy = width / native_w, height / native_h
    k = np.asarray(block["intrinsics"], dtype=np.float64)
    scaled = np.array(
        [
            [k[0, 0] * sx, k[0, 1] * sx, (k[0, 2] + 0.5) * sx - 0.5],
            [0.0, k[1, 1] * sy, (k[1, 2] + 0.5) * sy - 0.5],
            [0.0, 0.0, 1.0],
        ]
    )
    pos, axes = camera_pose(block)
    world_to_camera = np.eye(4)
    world_to_camera[:3, :3] = axes.T
    world_to_camera[:3, 3] = -axes.T @ pos
    return CameraCalibration(intrinsics=scaled, world_to_camera=world_to_camera)


def start_ee_pos(block: Mapping[str, Any], task_params: Mapping[str, Any] | None = None) -> np.ndarray:
    """Where the commanded motion is integrated from: the task's ``initial_ee_pos`` if it gives one."""
    value = (task_params or {}).get("initial_ee_pos", block["start_ee_pos"])
    pos = np.asarray(value, dtype=np.float64)
    if pos.shape != (3,) or not np.all(np.isfinite(pos)):
        raise ValueError(f"initial_ee_pos must be 3 finite numbers, got {value!r}")
    return pos


def lookat_camera(block: Mapping[str, Any], distance: float = 0.5) -> dict[str, Any]:
    """The same camera as a tabletop ``camera`` entry (pos, lookat, vertical fov in degrees).

    Exact for cameras without roll (all setups above) and a centred principal point (the C920's
    is within half a pixel of the centre); used to render the MuJoCo tabletop through the Bridge
    camera.
    """
    pos, axes = camera_pose(block)
    forward = axes[:, 2]
    k = np.asarray(block["intrinsics"], dtype=np.float64)
    fovy = float(np.degrees(2 * np.arctan(block["native_size"][0] / 2 / k[1, 1])))
    return {
        "pos": pos.round(6).tolist(),
        "lookat": (pos + distance * forward).round(6).tolist(),
        "fovy": round(fovy, 4),
    }


def validate_workspace(workspace: Any, where: str = "world.workspace") -> np.ndarray:
    """The workspace as a (3, 2) array of [min, max] rows; ValueError naming ``where`` if malformed."""
    try:
        ws = np.asarray(workspace, dtype=np.float64)
    except (TypeError, ValueError):
        ws = np.zeros(0)
    if ws.shape != (3, 2) or not np.all(np.isfinite(ws)) or np.any(ws[:, 0] >= ws[:, 1]):
        raise ValueError(
            f"{where} must be [[xmin, xmax], [ymin, ymax], [zmin, zmax]] with min < max, got {workspace!r}"
        )
    return ws


def integrate_tcp(start, translations, workspace=None) -> np.ndarray:
    """TCP after each commanded translation (k, 3), from ``start``, clipped to ``workspace`` after every
    action (as a robot stops at the table); returns (k, 3). ``workspace=None`` integrates unclipped."""
    pos = np.asarray(start, dtype=np.float64).copy()
    steps = np.asarray(translations, dtype=np.float64).reshape(-1, 3)
    if workspace is None:
        return pos + np.cumsum(steps, axis=0)
    ws = validate_workspace(workspace)
    out = np.empty_like(steps)
    for i, step in enumerate(steps):
        pos = np.clip(pos + step, ws[:, 0], ws[:, 1])
        out[i] = pos
    return out
