"""TabletopWorld: the MuJoCo tabletop behind ``Kosmos-Tabletop-v1``.

Each env step moves the gripper's tool centre point (TCP) by the commanded base-frame delta,
interpolated over ``control_dt`` so contacts stay smooth, drives both fingers toward the
commanded opening, and renders one frame from the Bridge-like camera. Rendering is headless
(``MUJOCO_GL=egl`` unless the user chose another backend) with shadows off.
"""

from __future__ import annotations

import functools
import math
import os
from typing import Any, Mapping

import numpy as np
from gymnasium import spaces

os.environ.setdefault("MUJOCO_GL", "egl")  # must precede the first `import mujoco`

import mujoco  # noqa: E402

from kosmos_env.utils.rotations import (  # noqa: E402
    axis_angle_to_matrix,
    euler_to_matrix_single,
    matrix_to_axis_angle_single,
    matrix_to_euler_single,
)
from kosmos_env.tasks import TaskSpec  # noqa: E402
from kosmos_env.tasks.shapes import object_half_height, target_top  # noqa: E402
from kosmos_env.worlds.base import WorldReset, WorldStep  # noqa: E402
from kosmos_env.worlds.tabletop import TABLETOP_SETTINGS  # noqa: E402
from kosmos_env.worlds.tabletop.geometry import robot_state_space, tabletop_calibration  # noqa: E402
from kosmos_env.worlds.tabletop.scene import (  # noqa: E402
    FINGER_TRAVEL,
    TCP_OFFSET,
    build_mjcf,
)

# a held object is "released" once no finger touches it; "settled" below this speed (m/s)
_SETTLED_SPEED = 0.05


def _check_params(world: Mapping[str, Any], spec_id: str) -> None:
    """One clear line for a physically meaningless setting, before MuJoCo compiles it (a zero step
    would loop forever, a negative field of view renders nothing)."""
    from kosmos_env.errors import SpecError

    def number(path: str, value: Any, low: float, high: float = math.inf, low_open: bool = True) -> None:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        ok = ok and (value > low if low_open else value >= low) and value <= high
        if not ok:
            bound = f"{'>' if low_open else '>='} {low:g}" + (f" and <= {high:g}" if math.isfinite(high) else "")
            raise SpecError(f"spec {spec_id}: world.{path} must be a finite number {bound}, got {value!r}")

    number("physics_dt", world.get("physics_dt"), 0.0, 1.0)
    number("control_dt", world.get("control_dt"), 0.0, 10.0)
    if world["physics_dt"] > world["control_dt"]:
        raise SpecError(
            f"spec {spec_id}: world.physics_dt ({world['physics_dt']}) must not exceed world.control_dt "
            f"({world['control_dt']})"
        )
    number("camera.fovy", (world.get("camera") or {}).get("fovy"), 0.0, 179.0)
    number("max_tilt", world.get("max_tilt"), 0.0, math.pi, low_open=False)


class TabletopWorld:
    """MuJoCo tabletop implementing :class:`~kosmos_env.worlds.base.WorldModel`."""

    frames_per_action = 1
    #: the spec's ``world`` keys this world reads (checked by kosmos_env.worlds.make_world)
    world_settings = TABLETOP_SETTINGS
    #: a simulator: ``step``'s log carries the ground truth after every action (``gt_success``), which
    #: the env's "oracle" reward mode reads (a learned or generated world has no such field)
    step_ground_truth = True
    # what `kosmos-env study --sweep` may vary (kosmos_env.study.sweep): cost against fidelity
    sweep_settings = {
        "image_size": {"spec": "image_size", "help": "square frame size in pixels (rendering cost)"},
        "physics_dt": {"spec": "world.physics_dt", "help": "MuJoCo step in seconds (physics cost and accuracy)"},
    }

    def __init__(self, spec: Any):
        self.spec = spec
        self.params: Mapping[str, Any] = spec.world
        self.image_size: tuple[int, int] = tuple(spec.image_size)
        _check_params(self.params, getattr(spec, "id", "?"))
        self.calibration = tabletop_calibration(self.params["camera"], self.image_size)
        self._substeps = max(1, int(round(self.params["control_dt"] / self.params["physics_dt"])))
        self._workspace = np.asarray(self.params["workspace"], dtype=np.float64)
        # the same bounds as Python floats, for the per-step clipping on Python floats
        self._workspace_rows = [(float(lo), float(hi)) for lo, hi in self._workspace]
        self._max_tilt = float(self.params["max_tilt"])
        # one compiled model per task, built lazily and kept (switching tasks must stay cheap)
        self._scenes: dict[str, tuple[mujoco.MjModel, mujoco.MjData, mujoco.Renderer]] = {}
        self._task: TaskSpec | None = None
        self._owner_pid = os.getpid()

    # -- WorldModel protocol --------------------------------------------------------------
    def state_space(self) -> Mapping[str, spaces.Space]:
        return robot_state_space()

    def load(self) -> None:
        """Nothing to load: scenes are compiled per task on first use."""

    def reset(self, task: TaskSpec, rng: np.random.Generator) -> WorldReset:
        self._task = task
        self.model, self.data, self.renderer = self._scene(task)
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        params = task.params
        obj_xy, target_xy, yaw = self._sample_layout(params["layout"], rng)
        self._set_free_pose("object_free", [*obj_xy, object_half_height(params["object"])], yaw)
        if params["target"].get("fixed", True):
            m.body_pos[self._target_body] = [*target_xy, m.body_pos[self._target_body][2]]
        else:
            self._set_free_pose("target_free", [*target_xy, object_half_height(params["target"])], 0.0)
        self._rot = np.eye(3)
        self._tcp = np.asarray(self.params["home_tcp"], dtype=np.float64)
        self._gripper_cmd = 1.0
        self._apply_mocap(self._tcp, self._rot)
        d.qpos[self._hand_qpos : self._hand_qpos + 3] = d.mocap_pos[self._hand_mocap]
        d.qpos[self._hand_qpos + 3 : self._hand_qpos + 7] = d.mocap_quat[self._hand_mocap]
        d.qpos[self._finger_qpos] = FINGER_TRAVEL
        d.ctrl[:] = FINGER_TRAVEL
        mujoco.mj_forward(m, d)
        # let objects settle onto the table before the first frame
        mujoco.mj_step(m, d, nstep=25)
        return WorldReset(frame=self._render(), state=self._state())

    def step(self, actions: np.ndarray) -> WorldStep:
        rows = np.asarray(actions, dtype=np.float64).reshape(-1, 7)
        k = len(rows)
        frames = np.empty((k, *self.image_size, 3), dtype=np.uint8)
        ee = np.empty((k, 3), dtype=np.float32)
        cmd = np.empty(k, dtype=np.float32)
        measured = np.empty(k, dtype=np.float32)
        truth = np.empty(k, dtype=bool)
        obj_pos = np.empty((k, 3), dtype=np.float32)
        tcp_xpos = self._tcp_xpos
        for i, action in enumerate(rows):
            self._control(action)
            self._render(out=frames[i])
            ee[i] = tcp_xpos  # float64 -> float32 on assignment: tcp_position()'s cast
            cmd[i] = self._gripper_cmd
            measured[i] = self.measured_gripper()
            truth[i] = self._resting_state(stop_early=True)[0]
            obj_pos[i] = self._object_xpos
        log = {
            "ee_pos": ee,
            "gripper_cmd": cmd,
            "gripper_measured": measured,
            # simulator ground truth after each step (for horizon studies); judges of the
            # robot log must not read it
            "gt_success": truth,
            # simulator state too (the console plots the object's distance to the goal from it);
            # like gt_success, never read by judges of the robot log
            "object_pos": obj_pos,
        }
        # the state after the last action is what the log's last row already measured
        state = {
            "ee_pos": ee[-1].copy(),
            "ee_euler": matrix_to_euler_single(self._rot).astype(np.float32),
            "gripper": measured[-1:].copy(),
        }
        return WorldStep(frames=frames, state=state, log=log)

    def evaluate(self) -> dict[str, Any]:
        """Ground truth: is the object resting on/in the target, released and settled?"""
        params = self._task.params
        obj, target = params["object"], params["target"]
        success, inside, at_height, touching, settled, speed, rest_height, obj_pos, target_pos = self._resting_state()
        if success:
            reason = f"{obj['name']} rests {params['relation']} the {target['name']} and is released"
        elif not inside:
            reason = f"{obj['name']} is not over the {target['name']}"
        elif not at_height:
            reason = f"{obj['name']} is over the {target['name']} but not resting on it (height {rest_height:.3f} m)"
        elif touching:
            reason = f"{obj['name']} is over the {target['name']} but still held"
        else:
            reason = f"{obj['name']} is still moving ({speed:.2f} m/s)"
        return {
            "success": success,
            "inside": bool(inside),
            "at_height": bool(at_height),
            "released": not touching,
            "settled": settled,
            "object_pos": obj_pos.round(4).tolist(),
            "target_pos": target_pos.round(4).tolist(),
            "reason": reason,
        }

    def _resting_state(self, stop_early: bool = False):
        """What :meth:`evaluate` decides from, without its report: ``success`` first.

        With ``stop_early`` (the per-step ``gt_success`` of the log) it returns ``(False,)`` as
        soon as one condition fails, in the order ``success`` checks them; the same verdict.
        """
        params = self._task.params
        obj, target = params["object"], params["target"]
        obj_pos = self._object_xpos.copy()
        target_pos = self._target_xpos.copy()
        target_rot = self._target_xmat
        local = target_rot.T @ (obj_pos - target_pos)
        if target["shape"] == "cylinder":
            inside = float(np.hypot(local[0], local[1])) <= target["size"][0]
        else:
            margin = 0.006 if target["shape"] == "basket" else 0.0
            inside = abs(local[0]) <= target["size"][0] - margin and abs(local[1]) <= target["size"][1] - margin
        if stop_early and not inside:
            return (False,)
        # the target's surface height in the world (a stacked-on block may have moved)
        surface = (
            (target_pos[2] + target_top(target))
            if target["shape"] == "basket"
            else (target_pos[2] + object_half_height(target) if not target.get("fixed", True) else target_top(target))
        )
        rest_height = obj_pos[2] - surface
        half = object_half_height(obj)
        if params["relation"] == "in":
            at_height = -0.01 <= rest_height <= half + 0.02
        else:
            at_height = half - 0.01 <= rest_height <= half + 0.02
        if stop_early and not at_height:
            return (False,)
        touching = self._finger_contact_with_object()
        if stop_early and touching:
            return (False,)
        speed = float(np.linalg.norm(self._object_cvel_linear))
        settled = speed < _SETTLED_SPEED
        success = bool(inside and at_height and not touching and settled)
        return success, inside, at_height, touching, settled, speed, rest_height, obj_pos, target_pos

    def close(self) -> None:
        for _, _, renderer in self._scenes.values():
            renderer.close()
        self._scenes.clear()

    # -- robot state --------------------------------------------------------------------
    def tcp_position(self) -> np.ndarray:
        return self.data.site_xpos[self._tcp_site].astype(np.float32).copy()

    def measured_gripper(self) -> float:
        """Measured opening in [0, 1] (mean finger travel / full travel)."""
        qpos, (left, right) = self._qpos, self._finger_qpos_pair
        # np.mean of the two and np.clip, on Python floats: the same operations and bits (numpy's
        # sum starts from +0.0, so two -0.0 fingers sum to +0.0 there as here)
        total = 0.0 + float(qpos[left]) + float(qpos[right])
        return _clip_to_constants(total / 2 / FINGER_TRAVEL, 0.0, 1.0)

    # -- internals ----------------------------------------------------------------------
    def _scene(self, task: TaskSpec):
        if task.name not in self._scenes:
            model = mujoco.MjModel.from_xml_string(build_mjcf(task.params, self.params, self.image_size))
            data = mujoco.MjData(model)
            height, width = self.image_size
            try:
                renderer = mujoco.Renderer(model, height=height, width=width)
            except Exception as exc:  # most often: mujoco was imported before MUJOCO_GL was set
                raise RuntimeError(
                    f"MuJoCo could not create an offscreen renderer ({exc}). Headless rendering needs "
                    f"MUJOCO_GL=egl (or osmesa) set before mujoco is first imported; MUJOCO_GL is "
                    f"{os.environ.get('MUJOCO_GL')!r}. Set it in the shell, or import kosmos_env before mujoco."
                ) from exc
            self._scenes[task.name] = (model, data, renderer)
        model, data, renderer = self._scenes[task.name]
        self._object_body = model.body("object").id
        self._target_body = model.body("target").id
        self._hand_mocap = model.body("hand_target").mocapid[0]
        self._hand_qpos = model.joint("hand_free").qposadr[0]
        self._tcp_site = model.site("tcp").id
        self._finger_qpos = np.array([model.joint("finger_left").qposadr[0], model.joint("finger_right").qposadr[0]])
        self._finger_qpos_pair = tuple(int(i) for i in self._finger_qpos)
        self._finger_geoms = {model.body("finger_left").id, model.body("finger_right").id}
        # per-step lookups done once: the hand target's MjData rows (views) and the camera
        self._mocap_pos = data.mocap_pos[self._hand_mocap]
        self._mocap_quat = data.mocap_quat[self._hand_mocap]
        self._mocap_pos_bytes = memoryview(self._mocap_pos)  # copies into it skip numpy's setitem
        # the MjData rows the per-step control, log and ground truth read or write (views of
        # MjData's buffers, which live as long as it: each MjData attribute access builds a new view)
        self._qpos, self._ctrl = data.qpos, data.ctrl
        self._tcp_xpos = data.site_xpos[self._tcp_site]
        self._object_xpos, self._target_xpos = data.xpos[self._object_body], data.xpos[self._target_body]
        self._target_xmat = data.xmat[self._target_body].reshape(3, 3)
        self._object_cvel_linear = data.cvel[self._object_body][3:]
        self._camera = mujoco.MjvCamera()
        self._camera.type = mujoco.mjtCamera.mjCAMERA_FIXED
        self._camera.fixedcamid = model.camera("main").id
        return model, data, renderer

    def _sample_layout(self, layout: Mapping[str, Any], rng: np.random.Generator):
        obj_region = np.asarray(layout["object_region"], dtype=np.float64)
        target_region = np.asarray(layout["target_region"], dtype=np.float64)
        for _ in range(100):
            obj_xy = rng.uniform(obj_region[:, 0], obj_region[:, 1])
            target_xy = rng.uniform(target_region[:, 0], target_region[:, 1])
            if np.linalg.norm(obj_xy - target_xy) >= layout["min_separation"]:
                break
        else:  # regions too tight for the separation: a spec error, not bad luck
            raise ValueError(f"task layout cannot separate object and target by {layout['min_separation']} m")
        yaw = rng.uniform(-layout["object_yaw"], layout["object_yaw"])
        return obj_xy, target_xy, float(yaw)

    def _set_free_pose(self, joint: str, pos, yaw: float) -> None:
        adr = self.model.joint(joint).qposadr[0]
        self.data.qpos[adr : adr + 3] = pos
        self.data.qpos[adr + 3 : adr + 7] = [np.cos(yaw / 2), 0, 0, np.sin(yaw / 2)]

    def _apply_mocap(self, tcp: np.ndarray, rot: np.ndarray) -> None:
        self.data.mocap_pos[self._hand_mocap] = tcp + rot @ np.array([0.0, 0.0, TCP_OFFSET])
        quat = np.empty(4)
        mujoco.mju_mat2Quat(quat, rot.reshape(-1))
        self.data.mocap_quat[self._hand_mocap] = quat

    def _command(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Set the gripper command and return the step's hand target (position, rotation).

        Per-element arithmetic runs on Python floats and the rotation conversions are the
        ``*_single`` ones: the same operations in the same order as the numpy versions, so the
        same bits (tests/worlds/test_tabletop_substeps.py compares against the numpy code).
        """
        dx, dy, dz, _, _, _, gripper = action.tolist()
        target_tcp = np.array(
            [
                _clip_to_bounds(p + d, lo, hi)
                for p, d, (lo, hi) in zip(self._tcp.tolist(), (dx, dy, dz), self._workspace_rows, strict=True)
            ]
        )
        target_rot = euler_to_matrix_single(action[3:6]) @ self._rot  # numpy's matmul (BLAS), as before
        # joint limits of the wrist: tilt away from pointing down is bounded
        tilt = self._max_tilt
        roll, pitch, yaw = matrix_to_euler_single(target_rot).tolist()
        target_rot = euler_to_matrix_single(
            np.array([_clip_to_constants(roll, -tilt, tilt), _clip_to_constants(pitch, -tilt, tilt), yaw])
        )
        self._gripper_cmd = gripper
        self._ctrl[:] = self._gripper_cmd * FINGER_TRAVEL
        return target_tcp, target_rot

    def _control(self, action: np.ndarray) -> None:
        target_tcp, target_rot = self._command(action)
        positions, rots = _substep_poses(self._tcp, self._rot, target_tcp, target_rot, self._substeps)
        # the hand target's rows of MjData, looked up once per scene rather than per substep;
        # positions are copied as raw float64 bytes and each quaternion is converted by MuJoCo
        # straight into its row (the same function and input as substep_targets, no copy)
        m, d, mocap_pos, mocap_quat = self.model, self.data, self._mocap_pos_bytes, self._mocap_quat
        step, mat2quat = mujoco.mj_step, mujoco.mju_mat2Quat
        flat_positions = memoryview(positions.reshape(-1))
        for i, rot in enumerate(rots):
            mocap_pos[:] = flat_positions[3 * i : 3 * i + 3]
            mat2quat(mocap_quat, rot)
            step(m, d)
        # the hold phase: the target no longer moves, so the remaining substeps run in one call
        hold = self._substeps - len(rots)
        if hold:
            step(m, d, nstep=hold)
        self._tcp, self._rot = target_tcp, target_rot

    def _finger_contact_with_object(self) -> bool:
        d, m = self.data, self.model
        for i in range(d.ncon):
            c = d.contact[i]
            b1, b2 = m.geom_bodyid[c.geom1], m.geom_bodyid[c.geom2]
            if (b1 == self._object_body and b2 in self._finger_geoms) or (
                b2 == self._object_body and b1 in self._finger_geoms
            ):
                return True
        return False

    def _state(self) -> dict[str, np.ndarray]:
        return {
            "ee_pos": self.tcp_position(),
            "ee_euler": matrix_to_euler_single(self._rot).astype(np.float32),
            "gripper": np.array([self.measured_gripper()], dtype=np.float32),
        }

    def _render(self, out: np.ndarray | None = None) -> np.ndarray:
        if os.getpid() != self._owner_pid:
            # an EGL context does not survive fork(): rendering in the child would hang
            raise RuntimeError(
                "this tabletop world was created in another process and inherited through fork(); "
                "create it in the worker process, or use the 'spawn' start method "
                "(gymnasium.make_vec(..., vectorization_mode='async', vector_kwargs={'context': 'spawn'}))"
            )
        self.renderer.update_scene(self.data, camera=self._camera)
        # the renderer returns a new array (or fills ``out``): no copy of its own buffer to make
        return self.renderer.render(out=out)


def substep_targets(
    start_tcp: np.ndarray, start_rot: np.ndarray, target_tcp: np.ndarray, target_rot: np.ndarray, substeps: int
) -> tuple[np.ndarray, np.ndarray]:
    """Mocap (position, quaternion) for every physics substep of one control step, at once.

    The hand moves during the first 70 % of the control period and then holds the target so
    contacts settle. The orientation follows the geodesic from ``start_rot`` to ``target_rot``
    (a fraction of the relative rotation's axis-angle). Only the moving substeps and the first
    substep at the target are returned: after it the target is constant, and the caller steps
    the rest in one ``mj_step`` call. Computing them as one batch replaces a per-substep
    round trip through axis-angle conversions, which dominated a step's cost.
    """
    positions, rots = _substep_poses(start_tcp, start_rot, target_tcp, target_rot, substeps)
    quats = np.empty((len(rots), 4))
    for quat, rot in zip(quats, rots, strict=True):  # MuJoCo's own conversion, as the per-substep path used
        mujoco.mju_mat2Quat(quat, rot)
    return positions, quats


def _substep_poses(
    start_tcp: np.ndarray, start_rot: np.ndarray, target_tcp: np.ndarray, target_rot: np.ndarray, substeps: int
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`substep_targets` before the quaternion conversion: mocap positions (n, 3) and
    the hand's rotation matrices as rows of 9 (n, 9), for the world's substep loop."""
    fracs, n_moving = _substep_fractions(substeps)
    rots = np.empty((len(fracs), 3, 3))
    rel = matrix_to_axis_angle_single(target_rot @ start_rot.T)
    rots[:n_moving] = axis_angle_to_matrix(fracs[:n_moving] * rel) @ start_rot
    rots[n_moving:] = target_rot
    tcps = start_tcp + fracs * (target_tcp - start_tcp)
    # the hand origin sits TCP_OFFSET above the TCP along the hand's z axis (a rotation's 3rd column)
    positions = tcps + TCP_OFFSET * rots[:, :, 2]
    return positions, rots.reshape(-1, 9)


# np.clip has two loops whose only difference is which value a tie keeps (visible on signed
# zeros): with array bounds it is max(x, lo) then min(., hi) keeping the bound on a tie; with
# scalar bounds it replaces x only when x lies strictly outside. Each call site below uses the
# rule of the np.clip call it replaced, so even -0.0 comes out the same.
def _clip_to_bounds(x: float, lo: float, hi: float) -> float:
    """``np.clip(x, lo_array, hi_array)`` for one finite element."""
    x = x if x > lo else lo
    return x if x < hi else hi


def _clip_to_constants(x: float, lo: float, hi: float) -> float:
    """``np.clip(x, lo, hi)`` with scalar bounds, for one finite value."""
    if x < lo:
        x = lo
    if x > hi:
        x = hi
    return x


@functools.lru_cache(maxsize=8)
def _substep_fractions(substeps: int) -> tuple[np.ndarray, int]:
    """Fraction of the way to the target at each returned substep, as a column (read-only),
    and how many of them are still moving. The same for every control step of a world."""
    fracs = np.minimum(1.0, np.arange(1, substeps + 1) / (0.7 * substeps))
    n_moving = int(np.count_nonzero(fracs < 1.0))
    fracs = fracs[: min(substeps, n_moving + 1), None].copy()
    fracs.flags.writeable = False
    return fracs, n_moving
