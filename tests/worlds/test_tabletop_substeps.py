"""The tabletop's batched substep targets follow the per-substep geodesic interpolation exactly, and
the trimmed world step gives the same bits as the step before trimming (frames, log, physics)."""

from __future__ import annotations

import gymnasium
import mujoco
import numpy as np
import pytest

from kosmos_env.policies.scripted import ScriptedPolicy
from kosmos_env.utils.rotations import axis_angle_to_matrix, euler_to_matrix, matrix_to_axis_angle, matrix_to_euler
from kosmos_env.worlds.base import WorldStep
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
            np.testing.assert_array_equal(ref_pos[n - 1 :], np.broadcast_to(ref_pos[-1], ref_pos[n - 1 :].shape))
            np.testing.assert_array_equal(ref_quat[n - 1 :], np.broadcast_to(ref_quat[-1], ref_quat[n - 1 :].shape))
    # an identity rotation stays exact (no NaN from a zero axis)
    pos, quat = substep_targets(np.zeros(3), np.eye(3), np.ones(3) * 0.1, np.eye(3), 50)
    np.testing.assert_allclose(quat, np.tile([1.0, 0, 0, 0], (len(quat), 1)), atol=1e-15)


class ReferenceWorld(TabletopWorld):
    """The tabletop with the per-substep control loop it had before batching."""

    def _control(self, action):
        target_tcp, target_rot = self._command(action)  # the step's target, as the world computes it
        pos, quat = reference_targets(self._tcp, self._rot, target_tcp, target_rot, self._substeps)
        for p, q in zip(pos, quat, strict=True):
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


def batched_targets_before_trimming(start_tcp, start_rot, target_tcp, target_rot, substeps):
    """``substep_targets`` as first batched (fractions recomputed per call, one quaternion per
    reshaped row): the trimmed version must give the same bits, not just close values."""
    fracs = np.minimum(1.0, np.arange(1, substeps + 1) / (0.7 * substeps))
    n_moving = int(np.count_nonzero(fracs < 1.0))
    fracs = fracs[: min(substeps, n_moving + 1)]
    moving = fracs[:n_moving]
    rots = np.empty((len(fracs), 3, 3))
    rel = matrix_to_axis_angle(target_rot @ start_rot.T)
    rots[:n_moving] = axis_angle_to_matrix(moving[:, None] * rel) @ start_rot
    rots[n_moving:] = target_rot
    positions = start_tcp + fracs[:, None] * (target_tcp - start_tcp) + TCP_OFFSET * rots[:, :, 2]
    quats = np.empty((len(fracs), 4))
    for quat, rot in zip(quats, rots, strict=True):
        mujoco.mju_mat2Quat(quat, rot.reshape(-1))
    return positions, quats


def test_trimmed_targets_are_bitwise_the_batched_targets():
    rng = np.random.default_rng(3)
    for substeps in (1, 2, 7, 50):
        for _ in range(25):
            args = (
                rng.uniform(0, 0.3, 3),
                euler_to_matrix(rng.uniform(-0.6, 0.6, 3)),
                rng.uniform(0, 0.3, 3),
                euler_to_matrix(rng.uniform(-0.6, 0.6, 3)),
            )
            for got, want in zip(
                substep_targets(*args, substeps), batched_targets_before_trimming(*args, substeps), strict=True
            ):
                np.testing.assert_array_equal(got, want)


class UntrimmedStepWorld(TabletopWorld):
    """The world step before its per-step work was trimmed: the command computed with the
    batched numpy rotation functions and np.clip, mocap rows looked up per substep, the camera
    by name, a copied frame, evaluate() for the logged truth, the state recomputed."""

    def _command(self, action):
        lo, hi = self._workspace[:, 0], self._workspace[:, 1]
        target_tcp = np.clip(self._tcp + action[:3], lo, hi)
        target_rot = euler_to_matrix(action[3:6]) @ self._rot
        euler = matrix_to_euler(target_rot)
        euler[:2] = np.clip(euler[:2], -self._max_tilt, self._max_tilt)
        target_rot = euler_to_matrix(euler)
        self._gripper_cmd = float(action[6])
        self.data.ctrl[:] = self._gripper_cmd * FINGER_TRAVEL
        return target_tcp, target_rot

    def measured_gripper(self):
        q = self.data.qpos[self._finger_qpos]
        return float(np.clip(q.mean() / FINGER_TRAVEL, 0.0, 1.0))

    def _state(self):
        return {
            "ee_pos": self.tcp_position(),
            "ee_euler": matrix_to_euler(self._rot).astype(np.float32),
            "gripper": np.array([self.measured_gripper()], dtype=np.float32),
        }

    def _control(self, action):
        target_tcp, target_rot = self._command(action)  # the step's target, as the world computes it
        positions, quats = batched_targets_before_trimming(self._tcp, self._rot, target_tcp, target_rot, self._substeps)
        for pos, quat in zip(positions, quats, strict=True):
            self.data.mocap_pos[self._hand_mocap] = pos
            self.data.mocap_quat[self._hand_mocap] = quat
            mujoco.mj_step(self.model, self.data)
        hold = self._substeps - len(positions)
        if hold:
            mujoco.mj_step(self.model, self.data, nstep=hold)
        self._tcp, self._rot = target_tcp, target_rot

    def _render(self, out=None):
        self.renderer.update_scene(self.data, camera="main")
        return self.renderer.render().copy()

    def step(self, actions):
        frames, ee, cmd, measured, truth, objects = [], [], [], [], [], []
        for action in np.asarray(actions, dtype=np.float64).reshape(-1, 7):
            self._control(action)
            frames.append(self._render())
            ee.append(self.tcp_position())
            cmd.append(self._gripper_cmd)
            measured.append(self.measured_gripper())
            report = self.evaluate()
            truth.append(report["success"])
            objects.append(self._object_xpos.copy())
        log = {
            "ee_pos": np.asarray(ee, dtype=np.float32),
            "gripper_cmd": np.asarray(cmd, dtype=np.float32),
            "gripper_measured": np.asarray(measured, dtype=np.float32),
            "gt_success": np.asarray(truth, dtype=bool),
            "object_pos": np.asarray(objects, dtype=np.float32),
        }
        return WorldStep(frames=np.stack(frames), state=self._state(), log=log)


def assert_same_step(got, want, world, reference):
    np.testing.assert_array_equal(got.frames, want.frames)
    assert got.log.keys() == want.log.keys()
    for key in want.log:
        np.testing.assert_array_equal(got.log[key], want.log[key])
        assert got.log[key].dtype == want.log[key].dtype
        assert got.log[key].tobytes() == want.log[key].tobytes()  # also the sign of zeros
    for key in want.state:
        assert got.state[key].dtype == want.state[key].dtype
        assert got.state[key].tobytes() == want.state[key].tobytes()
    for field in ("qpos", "qvel", "xpos", "xquat", "mocap_pos", "mocap_quat", "qacc_warmstart"):
        assert getattr(world.data, field).tobytes() == getattr(reference.data, field).tobytes(), field


def test_trimmed_world_step_is_bitwise_the_untrimmed_step_under_random_actions():
    """Random actions over the whole action box: large rotations, the wrist's tilt limit and
    the workspace walls, which a scripted episode seldom reaches."""
    env = gymnasium.make("Kosmos-Tabletop-v1", task="stack_green_on_yellow", image_size=(64, 64))
    world = env.unwrapped.world
    reference = UntrimmedStepWorld(world.spec)
    task_spec = env.unwrapped._resolve_task("stack_green_on_yellow")
    world.reset(task_spec, np.random.default_rng(3))
    reference.reset(task_spec, np.random.default_rng(3))
    rng = np.random.default_rng(4)
    low, high = env.action_space.low, env.action_space.high
    tilted = walled = 0
    for i in range(40):
        action = rng.uniform(low, high) * (1.0, 0.3)[i % 2]
        if i % 5 == 0:
            action[:3] = 3 * high[:3] * np.sign(action[:3])  # straight into a wall
        got, want = world.step(action), reference.step(action)
        assert_same_step(got, want, world, reference)
        tilted += bool(np.isclose(np.abs(got.state["ee_euler"][:2]), world._max_tilt, atol=1e-6).any())
        walled += bool(
            np.isclose(world._tcp, world._workspace[:, 0]).any() or np.isclose(world._tcp, world._workspace[:, 1]).any()
        )
    assert tilted and walled  # the clipping branches were exercised
    reference.close()
    env.close()


@pytest.mark.parametrize("task", ["carrot_on_plate", "eggplant_in_basket"])
def test_trimmed_world_step_is_bitwise_the_untrimmed_step(task):
    """Same frames, robot log, state and body poses, bit for bit, along a scripted episode (the
    scripted policy reads the frames, so one changed pixel would also change its actions)."""
    env = gymnasium.make("Kosmos-Tabletop-v1", task=task, image_size=(64, 64))
    world = env.unwrapped.world
    reference = UntrimmedStepWorld(world.spec)
    task_spec = env.unwrapped._resolve_task(task)
    start, ref_start = (
        world.reset(task_spec, np.random.default_rng(7)),
        reference.reset(task_spec, np.random.default_rng(7)),
    )
    np.testing.assert_array_equal(start.frame, ref_start.frame)
    policy, ref_policy = ScriptedPolicy(skill=1.0), ScriptedPolicy(skill=1.0)
    obs = {"image": start.frame, "instruction": task_spec.instruction, **start.state}
    ref_obs = {"image": ref_start.frame, "instruction": task_spec.instruction, **ref_start.state}
    policy.reset(task_spec.instruction, seed=7)
    ref_policy.reset(task_spec.instruction, seed=7)
    successes = []
    for _ in range(env.unwrapped.kosmos_spec.horizon):
        action, ref_action = policy.act(obs), ref_policy.act(ref_obs)
        np.testing.assert_array_equal(action, ref_action)
        got, want = world.step(action), reference.step(ref_action)
        assert_same_step(got, want, world, reference)
        successes.append(bool(got.log["gt_success"][-1]))
        obs = {"image": got.frames[-1], "instruction": task_spec.instruction, **got.state}
        ref_obs = {"image": want.frames[-1], "instruction": task_spec.instruction, **want.state}
    assert world.evaluate() == reference.evaluate()
    assert any(successes)  # the episode reached the goal: the comparison covered grasp, carry and release
    reference.close()
    env.close()
