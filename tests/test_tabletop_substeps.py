"""The tabletop's batched substep targets follow the per-substep geodesic interpolation exactly."""
from __future__ import annotations

import gymnasium
import mujoco
import numpy as np

from kosmos_env.rotations import axis_angle_to_matrix, euler_to_matrix, matrix_to_axis_angle, matrix_to_euler
from kosmos_env.worlds.tabletop.scene import FINGER_TRAVEL, TCP_OFFSET
from kosmos_env.worlds.tabletop.world import TabletopWorld, substep_targets


def reference_targets(start_tcp, start_rot, target_tcp, target_rot, substeps):
    """One substep at a time, as the world computed them before batching (the specification)."""
    positions, quats = [], []
    for i in range(1, substeps + 1):
        frac = min(1.0, i / (0.7 * substeps))
        if frac >= 1.0:
            rot = target_rot
        else:
            rot = axis_angle_to_matrix(frac * matrix_to_axis_angle(target_rot @ start_rot.T)) @ start_rot
        positions.append(start_tcp + frac * (target_tcp - start_tcp) + rot @ np.array([0.0, 0.0, TCP_OFFSET]))
        quat = np.empty(4)
        mujoco.mju_mat2Quat(quat, rot.reshape(-1))
        quats.append(quat)
    return np.array(positions), np.array(quats)


def test_batched_targets_equal_per_substep_targets():
    rng = np.random.default_rng(0)
    for substeps in (1, 2, 7, 50):
        for _ in range(20):
            start_rot = euler_to_matrix(rng.uniform(-0.6, 0.6, 3))
            target_rot = euler_to_matrix(rng.uniform(-0.6, 0.6, 3))
            start_tcp, target_tcp = rng.uniform(0, 0.3, 3), rng.uniform(0, 0.3, 3)
            pos, quat = substep_targets(start_tcp, start_rot, target_tcp, target_rot, substeps)
            ref_pos, ref_quat = reference_targets(start_tcp, start_rot, target_tcp, target_rot, substeps)
            # batched returns the moving substeps plus the first one at the target; the rest hold it
            n = len(pos)
            assert 1 <= n <= substeps
            np.testing.assert_allclose(pos, ref_pos[:n], atol=1e-12)
            np.testing.assert_allclose(quat, ref_quat[:n], atol=1e-12)
            np.testing.assert_array_equal(ref_pos[n - 1:], np.broadcast_to(ref_pos[-1], ref_pos[n - 1:].shape))
            np.testing.assert_array_equal(ref_quat[n - 1:], np.broadcast_to(ref_quat[-1], ref_quat[n - 1:].shape))
    # an identity rotation stays exact (no NaN from a zero axis)
    pos, quat = substep_targets(np.zeros(3), np.eye(3), np.ones(3) * 0.1, np.eye(3), 50)
    np.testing.assert_allclose(quat, np.tile([1.0, 0, 0, 0], (len(quat), 1)), atol=1e-15)


class ReferenceWorld(TabletopWorld):
    """The tabletop with the per-substep control loop it had before batching."""

    def _control(self, action):
        lo, hi = self._workspace[:, 0], self._workspace[:, 1]
        target_tcp = np.clip(self._tcp + action[:3], lo, hi)
        target_rot = euler_to_matrix(action[3:6]) @ self._rot
        euler = matrix_to_euler(target_rot)
        euler[:2] = np.clip(euler[:2], -self._max_tilt, self._max_tilt)
        target_rot = euler_to_matrix(euler)
        self._gripper_cmd = float(action[6])
        self.data.ctrl[:] = self._gripper_cmd * FINGER_TRAVEL
        pos, quat = reference_targets(self._tcp, self._rot, target_tcp, target_rot, self._substeps)
        for p, q in zip(pos, quat):
            self.data.mocap_pos[self._hand_mocap] = p
            self.data.mocap_quat[self._hand_mocap] = q
            mujoco.mj_step(self.model, self.data)
        self._tcp, self._rot = target_tcp, target_rot


def test_world_trajectory_matches_per_substep_control():
    env = gymnasium.make("Kosmos-Tabletop-v1", task="carrot_on_plate", image_size=(64, 64))
    world = env.unwrapped.world
    reference = ReferenceWorld(world.spec)
    rng = np.random.default_rng(1)
    env.reset(seed=2)
    task = env.unwrapped._task
    world.reset(task, np.random.default_rng(5))
    reference.reset(task, np.random.default_rng(5))
    low, high = env.action_space.low, env.action_space.high
    for _ in range(8):
        action = rng.uniform(low, high).astype(np.float64)
        a, b = world.step(action), reference.step(action)
        np.testing.assert_allclose(a.state["ee_pos"], b.state["ee_pos"], atol=1e-5)
        np.testing.assert_allclose(a.state["ee_euler"], b.state["ee_euler"], atol=1e-5)
        assert np.abs(a.frames.astype(int) - b.frames.astype(int)).max() <= 2
    reference.close()
    env.close()
