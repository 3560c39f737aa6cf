"""Camera geometry of the tabletop, computable without MuJoCo (policies and the gate use it)."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kosmos_env.worlds.base import CameraCalibration
from kosmos_env.worlds.tabletop.scene import camera_frame


def tabletop_calibration(camera: Mapping[str, Any], image_size: tuple[int, int]) -> CameraCalibration:
    """Pinhole calibration of the tabletop camera at ``image_size`` (MuJoCo's fovy is vertical)."""
    height, width = image_size
    pos, axes = camera_frame(camera)
    f = (height / 2) / np.tan(np.deg2rad(camera["fovy"]) / 2)
    intrinsics = np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1.0]])
    world_to_camera = np.eye(4)
    world_to_camera[:3, :3] = axes.T
    world_to_camera[:3, 3] = -axes.T @ pos
    return CameraCalibration(intrinsics=intrinsics, world_to_camera=world_to_camera)
