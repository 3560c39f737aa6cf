"""What a tabletop robot shows a policy besides pixels: camera geometry and robot-state spaces.

Computable without MuJoCo (policies, the gate and the learned world use it)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
from gymnasium import spaces

from kosmos_env.utils.camera import CameraCalibration, look_at_calibration


def tabletop_calibration(camera: Mapping[str, Any], image_size: tuple[int, int]) -> CameraCalibration:
    """Pinhole calibration of the tabletop camera at ``image_size`` (MuJoCo's fovy is vertical)."""
    return look_at_calibration(camera, image_size)


def robot_state_space() -> dict[str, spaces.Space]:
    """Observation extras of a tabletop robot: TCP position (m), roll/pitch/yaw, measured opening."""
    return {
        "ee_pos": spaces.Box(-2.0, 2.0, (3,), dtype=np.float32),
        "ee_euler": spaces.Box(-np.pi, np.pi, (3,), dtype=np.float32),
        "gripper": spaces.Box(0.0, 1.0, (1,), dtype=np.float32),
    }
