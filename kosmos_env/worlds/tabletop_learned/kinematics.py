"""The robot's commanded pose integrated from actions, and its keypoints drawn as heatmaps.

The learned world has no simulator state. The end-effector pose is not learned: it is the
integral of the commanded deltas, clipped to the workspace and the wrist's tilt limit exactly
as the simulator clips its commanded pose. Projected through the tabletop's published camera
calibration, the pose becomes a few keypoints along the gripper (tool point, wrist column,
cross bar) drawn as Gaussian heatmaps: a compact, object-centric description of where the
robot is now and where the action sends it, which the network turns into pixels.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kosmos_env.worlds.tabletop.geometry import tabletop_calibration

#: model resolution (the network is trained at 64×64 only)
MODEL_SIZE = (64, 64)
HEATMAP_SIGMA = 1.5  # pixels


def euler_to_matrix(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """Extrinsic x-y-z, the tabletop's convention (Rz·Ry·Rx)."""
    cr, sr, cp, sp, cy, sy = np.cos(roll), np.sin(roll), np.cos(pitch), np.sin(pitch), np.cos(yaw), np.sin(yaw)
    rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    return rz @ ry @ rx


def matrix_to_euler(r: np.ndarray) -> np.ndarray:
    pitch = np.arcsin(np.clip(-r[2, 0], -1.0, 1.0))
    return np.array([np.arctan2(r[2, 1], r[2, 2]), pitch, np.arctan2(r[1, 0], r[0, 0])])


class PoseIntegrator:
    """Commanded end-effector pose, stepped by actions like the tabletop's mocap target."""

    def __init__(self, world: Mapping[str, Any]):
        self.home = np.asarray(world["home_tcp"], dtype=np.float64)
        self.workspace = np.asarray(world["workspace"], dtype=np.float64)
        self.max_tilt = float(world["max_tilt"])
        self.reset()

    def reset(self) -> None:
        self.pos = self.home.copy()
        self.rot = np.eye(3)

    def step(self, action: np.ndarray) -> None:
        action = np.asarray(action, dtype=np.float64)
        self.pos = np.clip(self.pos + action[:3], self.workspace[:, 0], self.workspace[:, 1])
        rot = euler_to_matrix(*action[3:6]) @ self.rot
        euler = matrix_to_euler(rot)
        euler[:2] = np.clip(euler[:2], -self.max_tilt, self.max_tilt)
        self.rot = euler_to_matrix(*euler)

    @property
    def euler(self) -> np.ndarray:
        return matrix_to_euler(self.rot)


def integrate(world: Mapping[str, Any], actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Poses before every action and after the last: positions (N+1, 3) and rotations (N+1, 3, 3)."""
    pi = PoseIntegrator(world)
    pos, rot = [pi.pos.copy()], [pi.rot.copy()]
    for a in np.asarray(actions).reshape(-1, 7):
        pi.step(a)
        pos.append(pi.pos.copy())
        rot.append(pi.rot.copy())
    return np.stack(pos), np.stack(rot)


def keypoints(pos: np.ndarray, rot: np.ndarray) -> np.ndarray:
    """Base-frame keypoints of the gripper (K, 3): tool point, wrist column, cross bar ends."""
    z, y = rot[:, 2], rot[:, 1]
    pts = [pos + z * s for s in (0.0, 0.025, 0.05, 0.08, 0.11, 0.14)]
    hand = pos + z * 0.05
    pts += [hand + y * s for s in (-0.045, -0.022, 0.022, 0.045)]
    return np.stack(pts)


class HeatmapRenderer:
    """Draws gripper keypoints as a max-of-Gaussians heatmap at the model resolution."""

    def __init__(self, camera: Mapping[str, Any], size: tuple[int, int] = MODEL_SIZE, sigma: float = HEATMAP_SIGMA):
        self.calibration = tabletop_calibration(camera, size)
        self.size = size
        h, w = size
        self._v, self._u = np.mgrid[0:h, 0:w].astype(np.float32) + 0.5
        self._inv2s2 = 1.0 / (2.0 * sigma**2)

    def __call__(self, pos: np.ndarray, rot: np.ndarray) -> np.ndarray:
        """(H, W) float32 in [0, 1]."""
        uv = self.calibration.project(keypoints(pos, rot)).astype(np.float32)
        d2 = (self._u[None] - uv[:, 0, None, None]) ** 2 + (self._v[None] - uv[:, 1, None, None]) ** 2
        return np.exp(-d2 * self._inv2s2).max(axis=0)
