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

A spec's ``world.camera`` block holds everything numerically (see :func:`camera_block`), so
the spec hash covers the calibration. :func:`bridge_calibration` turns it into a
:class:`~kosmos_env.worlds.base.CameraCalibration` for any image size: the intrinsics are
scaled per axis, which is exact when the frame shows the camera's whole field of view resized
(not cropped).
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kosmos_env.camera import CameraCalibration

#: Logitech C920 at 640x480, as SimplerEnv configures it for every WidowX setup
C920_INTRINSICS = ((623.588, 0.0, 319.501), (0.0, 623.588, 239.545), (0.0, 0.0, 1.0))
#: (height, width) the intrinsics above belong to
NATIVE_SIZE = (480, 640)
#: SimplerEnv's initial tool-centre-point position for the shipped real episode (base_link, m)
REAL_EPISODE_START_EE_POS = (0.298068, -0.114657, 0.10782)

#: camera pose per setup: position in base_link, and either a SAPIEN quaternion (w, x, y, z)
#: or a look-at direction (SAPIEN's look_at: x along the direction, no roll)
SETUPS: dict[str, dict[str, Any]] = {
    "bridge_dataset": {"position": (0.0, -0.16, 0.336), "quaternion_wxyz": (0.909182, -0.0819809, 0.347277, 0.214629)},
    "real_eval_table": {"position": (0.0, -0.16, 0.36), "look_direction": (1.0, 0.553, -1.085)},
    "sink": {"position": (-0.003, -0.21, 0.39), "quaternion_wxyz": (-0.907313, 0.0782, -0.36434, -0.194741)},
}

_SOURCE = ("SimplerEnv (simpler-env/ManiSkill2_real2sim), mani_skill2_real2sim/agents/configs/widowx/defaults.py: "
           "3rd_view_camera relative to base_link; start_ee_pos from its real-to-sim debugging recipe for "
           "data/debug/bridge_real_1.mp4")


def quaternion_to_matrix(q_wxyz) -> np.ndarray:
    """Rotation matrix of a (w, x, y, z) quaternion (normalised first)."""
    q = np.asarray(q_wxyz, dtype=np.float64)
    norm = float(np.linalg.norm(q))
    if q.shape != (4,) or not np.isfinite(norm) or norm < 1e-9:
        raise ValueError(f"a quaternion must be 4 finite numbers, not all zero; got {q_wxyz!r}")
    w, x, y, z = q / norm
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])


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
    block.update({
        "convention": "sapien",
        "intrinsics": [list(row) for row in C920_INTRINSICS],
        "native_size": list(NATIVE_SIZE),
        "start_ee_pos": list(start_ee_pos),
        "source": _SOURCE,
    })
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
        if value.shape != (n,) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)
                                          for v in value):
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
    scaled = np.array([
        [k[0, 0] * sx, k[0, 1] * sx, (k[0, 2] + 0.5) * sx - 0.5],
        [0.0, k[1, 1] * sy, (k[1, 2] + 0.5) * sy - 0.5],
        [0.0, 0.0, 1.0],
    ])
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
    return {"pos": pos.round(6).tolist(), "lookat": (pos + distance * forward).round(6).tolist(), "fovy": round(fovy, 4)}
