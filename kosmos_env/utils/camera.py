"""Pinhole camera geometry shared by worlds, the gate and policies (numpy only).

:class:`CameraCalibration` is what a world with known geometry publishes; :func:`look_at_calibration`
builds one from the camera description an env spec carries (``world.camera``: ``pos``, ``lookat``,
vertical ``fovy`` in degrees, MuJoCo's convention), so a policy can use the same calibration from
the spec's data without importing any world.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np


@dataclass(frozen=True)
class CameraCalibration:
    """Pinhole camera of a world whose geometry is known (the tabletop); Bridge worlds have none.

    ``intrinsics`` is the 3×3 K matrix for the observation resolution; ``world_to_camera`` is the
    4×4 transform from the robot base frame to an OpenCV-style camera frame (x right, y down,
    z forward).
    """

    intrinsics: np.ndarray
    world_to_camera: np.ndarray

    def project(self, points: np.ndarray) -> np.ndarray:
        """Project base-frame points (N, 3) to pixel coordinates (N, 2) as (u, v)."""
        pts = np.asarray(points, dtype=np.float64).reshape(-1, 3)
        cam = (self.world_to_camera[:3, :3] @ pts.T + self.world_to_camera[:3, 3:4]).T
        uvw = (self.intrinsics @ cam.T).T
        return uvw[:, :2] / uvw[:, 2:3]

    def backproject_to_plane(self, uv: np.ndarray, z: float) -> np.ndarray:
        """Intersect the rays through pixels (N, 2) with the horizontal plane at height ``z``."""
        uv = np.asarray(uv, dtype=np.float64).reshape(-1, 2)
        k_inv = np.linalg.inv(self.intrinsics)
        rays_cam = (k_inv @ np.c_[uv, np.ones(len(uv))].T).T
        r = self.world_to_camera[:3, :3]
        t = self.world_to_camera[:3, 3]
        origin = -r.T @ t
        rays = (r.T @ rays_cam.T).T
        s = (z - origin[2]) / rays[:, 2]
        return origin + rays * s[:, None]


def camera_frame(camera: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(position, 3×3 rotation whose columns are the OpenCV camera axes in the base frame)."""
    pos, lookat = np.asarray(camera["pos"], float), np.asarray(camera["lookat"], float)
    forward = lookat - pos
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    return pos, np.stack([right, -up, forward], axis=1)


def look_at_calibration(camera: Mapping[str, Any], image_size: tuple[int, int]) -> CameraCalibration:
    """Pinhole calibration of a look-at camera (``pos``, ``lookat``, vertical ``fovy``) at ``image_size``."""
    height, width = image_size
    pos, axes = camera_frame(camera)
    f = (height / 2) / np.tan(np.deg2rad(camera["fovy"]) / 2)
    intrinsics = np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1.0]])
    world_to_camera = np.eye(4)
    world_to_camera[:3, :3] = axes.T
    world_to_camera[:3, 3] = -axes.T @ pos
    return CameraCalibration(intrinsics=intrinsics, world_to_camera=world_to_camera)
