"""Run the learned tabletop forward: object state, gripper and frames, for a batch of episodes.

One implementation serves the env (:mod:`.world`, a batch of one) and the held-out evaluation
(:mod:`.train`, many episodes in lockstep), so what is measured is what the env runs.

Per action: the commanded pose is integrated (:mod:`.kinematics`), the object dynamics step the
object state and predict the measured gripper (:mod:`.objects`), the slip predictor, where the
weights hold one, may end a hold under closed fingers (:mod:`.slip`), and four fixed rules of scene
geometry, imposed rather than learned (sizes from the public task suite and the public scene's
fingers), correct what the learned switches cannot guarantee: an object let go of drops straight
down; a free object over the target is kept on the target's top; a free object lying at rest
stays exactly where it is unless the fingers can reach it; closed fingers sweeping through a
free object push it ahead of them. None of them changes the networks or their training (the
dynamics are trained on their own, :mod:`.train`); each method's docstring gives the recorded
evidence. Each stage is a spec field (``world.rules``: which of the four rules run, default all;
``world.learned_dynamics``: ``"learned"`` (default), ``"rules"`` (the object dynamics and the slip
predictor replaced by the hand-written 'rules-only kinematics' baseline,
:meth:`Engine._kinematic_rules`) or ``"none"`` (nothing moves the object: renderer only)), so
what each part contributes can be measured (``bench/learned_world_ablation.py``). The renderer
(:mod:`.model`) draws a frame from
the current state over the episode's first frame (never from its own previous output); it is
called once every ``actions_per_call`` actions (and whenever a frame is due, e.g. at the end of
the episode); actions in between repeat the last generated frame.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch

from kosmos_env.spec import LEARNED_TABLETOP_DYNAMICS, LEARNED_TABLETOP_RULES
from kosmos_env.tasks.shapes import object_half_height
from kosmos_env.worlds.tabletop.geometry import tabletop_calibration
from kosmos_env.worlds.tabletop.scene import FINGER_TRAVEL
from kosmos_env.worlds.tabletop_learned.kinematics import HeatmapRenderer, PoseIntegrator
from kosmos_env.worlds.tabletop_learned.model import MAX_ACTIONS_PER_CALL, condition_vector
from kosmos_env.worlds.tabletop_learned.objects import (
    REACH_XY,
    REACH_Z,
    locate,
    rest_heights,
    shift_layers,
    sprite_alpha,
)
from kosmos_env.worlds.tabletop_learned.slip import SlipTracker


def to_tensor(frames: np.ndarray) -> torch.Tensor:
    """uint8 (B, H, W, 3) → float (B, 3, H, W) in [0, 1]."""
    return torch.from_numpy(np.ascontiguousarray(frames)).float().div_(255.0).movedim(-1, -3)


def to_uint8(frames: torch.Tensor) -> np.ndarray:
    return (frames.movedim(-3, -1).numpy() * 255.0).round().clip(0, 255).astype(np.uint8)


#: the public scene's fingers (kosmos_env.worlds.tabletop.scene): boxes of half size
#: 0.012 x 0.003 x 0.025 m centred 0.015 m above the tool point, inner faces up to FINGER_TRAVEL
#: from the tool axis. Horizontal reach of a finger corner from the tool axis, and how far the
#: fingers extend below and above the tool point (m)
FINGER_REACH_XY = float(np.hypot(0.012, FINGER_TRAVEL + 0.006))
FINGER_HALF_X = 0.012
FINGER_BELOW_TCP = 0.010
FINGER_ABOVE_TCP = 0.040
#: an object lies at rest when its centre is this close to its resting height (on the table or on
#: the target's support surface) (m)
REST_HEIGHT_TOL = 0.003
#: a predicted opening below this is closed fingers (gap under 1 cm either side: no object fits)
PUSH_CLOSED_OPENING = 0.25
#: slack on the fingers' reach for the arm lagging its command (recorded: under 0.01 m) (m)
REST_REACH_MARGIN = 0.01


class Engine:
    """Batched learned-tabletop state. ``start`` with first frames, then ``step`` with actions."""

    def __init__(self, model, world: Mapping[str, Any], actions_per_call: int = 1, size: tuple[int, int] = (64, 64)):
        if not 1 <= int(actions_per_call) <= MAX_ACTIONS_PER_CALL:
            raise ValueError(f"actions_per_call must be in 1..{MAX_ACTIONS_PER_CALL}, got {actions_per_call}")
        self.model = model
        self.world = world
        self.actions_per_call = int(actions_per_call)
        self.calibration = tabletop_calibration(world["camera"], size)
        self.heatmap = HeatmapRenderer(world["camera"], size)
        self.home = np.asarray(world["home_tcp"], dtype=np.float32)
        # which stages run (spec fields, validated there; checked again here for direct use)
        self.rules = frozenset(world.get("rules", LEARNED_TABLETOP_RULES))
        self.learned_dynamics = world.get("learned_dynamics", "learned")
        if not self.rules <= set(LEARNED_TABLETOP_RULES) or self.learned_dynamics not in LEARNED_TABLETOP_DYNAMICS:
            raise ValueError(
                f"world.rules must be a subset of {list(LEARNED_TABLETOP_RULES)} and "
                f"world.learned_dynamics one of {list(LEARNED_TABLETOP_DYNAMICS)}; got "
                f"{sorted(self.rules)!r}, {self.learned_dynamics!r}"
            )

    @torch.no_grad()
    def start(self, frames0: np.ndarray, task_index: Sequence[int], task_params: Sequence[Mapping[str, Any]]) -> None:
        """Find object and target in the first frames (B, H, W, 3) and reset every state."""
        b = len(frames0)
        self.task = torch.as_tensor(np.asarray(task_index), dtype=torch.long)
        self.first = to_tensor(frames0)
        self.cur = self.first
        probs = torch.sigmoid(self.model.segmenter(self.first, self.task)).numpy()
        obj, target_xy, rest = [], [], []
        for i in range(b):
            obj_z, _ = rest_heights(task_params[i])
            target_plane = object_half_height(task_params[i]["target"])
            t, _ = locate(self.calibration, probs[i, 1], target_plane, self.home[:2])
            o, _ = locate(self.calibration, probs[i, 0], obj_z, t[:2])
            obj.append(o)
            target_xy.append(t[:2])
            rest.append(obj_z)
        self.obj = torch.as_tensor(np.stack(obj), dtype=torch.float32)
        self._supports = [_support(p) for p in task_params]
        self._object_radius = np.array([_horizontal_radius(p["object"]) for p in task_params])
        self._object_min_half_width = np.array([_min_half_width(p["object"]) for p in task_params])
        self._object_half_height = np.array([object_half_height(p["object"]) for p in task_params])
        # the rules-only baseline's measured opening on a held object: the inner finger faces
        # (at opening * FINGER_TRAVEL from the tool axis) stop on its smallest half width
        self._held_opening = np.clip(self._object_min_half_width / FINGER_TRAVEL, 0.0, 1.0)
        self.target_xy = torch.as_tensor(np.stack(target_xy), dtype=torch.float32)
        self.rest_z = torch.as_tensor(rest, dtype=torch.float32)
        alpha = torch.from_numpy(sprite_alpha(probs[:, 0])[:, None])
        self.sprite0 = torch.cat([self.first * alpha, alpha], dim=1)  # premultiplied RGB, alpha
        self.uv0 = self._project(self.obj)
        self.held = torch.zeros(b)
        self.gripper = torch.ones(b)
        self.command = torch.ones(b)  # the gripper starts commanded open
        self.integrators = [PoseIntegrator(self.world) for _ in range(b)]
        self.slip = SlipTracker(b)
        # poses now, 1 and 2 steps ago (per action, whatever the actions per call): the renderer
        # learns the arm's lag behind its command from them
        self._history = [self._poses()] * 3
        self._heat_first = self._heat(self._history[-1])
        # each lane's heatmap of each pose in _history, drawn once and kept while the pose is in the
        # history (a pose is drawn as "now", then again as 1 and 2 steps ago): None until drawn
        self._heat_hist = [list(self._heat_first.unbind(0)) for _ in range(3)]
        self._pending = 0
        self.rowwise = False

    def _poses(self):
        return (
            np.stack([p.pos for p in self.integrators]),
            np.stack([p.rot for p in self.integrators]),
            np.stack([p.euler for p in self.integrators]),
        )

    def _heat(self, poses) -> torch.Tensor:
        pos, rot, _ = poses
        return torch.from_numpy(np.stack([self.heatmap(p, r) for p, r in zip(pos, rot, strict=True)]))

    def _project(self, points: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(self.calibration.project(points.numpy().astype(np.float64)), dtype=torch.float32)

    def sprite_at(self, obj: torch.Tensor) -> torch.Tensor:
        """The object's sprite (B, 4, H, W) moved to centre ``obj``."""
        return shift_layers(self.sprite0, self._project(obj) - self.uv0)

    @torch.no_grad()
    def step(self, actions: np.ndarray, render: bool | None = None) -> tuple[np.ndarray, np.ndarray, bool]:
        """Apply one action per episode (B, 7). Returns (frames (B, H, W, 3) uint8, measured gripper (B,),
        whether the renderer ran). ``render`` forces (True) or skips (False) a model call; ``None``
        calls it once ``actions_per_call`` actions have accumulated."""
        self._advance(np.asarray(actions, dtype=np.float64).reshape(len(self.integrators), 7))
        self._pending += 1
        due = self._pending >= self.actions_per_call if render is None else render
        if due:
            self._render()
        return to_uint8(self.cur), self.gripper.numpy().copy(), bool(due)

    def _advance(self, actions: np.ndarray) -> None:
        """Everything of one action but the frame: pose, object state, gripper, fixed rules, history."""
        obj_before, held_before, grip_before = self.obj, self.held, self.gripper
        tcp = torch.as_tensor(np.stack([p.pos for p in self.integrators]), dtype=torch.float32)
        yaw = torch.as_tensor(np.array([p.euler[2] for p in self.integrators]), dtype=torch.float32)
        for p, a in zip(self.integrators, actions, strict=True):
            p.step(a)
        tcp_next = torch.as_tensor(np.stack([p.pos for p in self.integrators]), dtype=torch.float32)
        cmd = torch.as_tensor(actions[:, 6], dtype=torch.float32)
        if self.learned_dynamics == "learned":
            rows = {"rowwise": True} if self.rowwise else {}  # (a batch of lanes: see step_lanes)
            self.obj, self.held, _, _, self.gripper = self.model.dynamics.step(
                self.obj,
                tcp,
                tcp_next,
                cmd,
                self.gripper,
                self.held,
                self.rest_z,
                self.target_xy,
                self.task,
                hard=True,
                **rows,
            )
            if getattr(self.model, "slip", None) is not None:  # a held object may leave closed fingers (.slip)
                self.obj, self.held, self.gripper = self.slip.step(
                    self.model.slip,
                    obj_before,
                    held_before,
                    grip_before,
                    self.obj,
                    self.held,
                    self.gripper,
                    tcp,
                    tcp_next,
                    yaw,
                    cmd,
                    self.rest_z,
                    self.task,
                    **rows,
                )
        elif self.learned_dynamics == "rules":
            self._kinematic_rules(tcp, tcp_next, cmd)
        else:  # "none": renderer only. Nothing is ever grasped, the fingers reach every command
            self.held = torch.zeros_like(self.held)
            self.gripper = cmd.clone()
        self.command = cmd
        if self.learned_dynamics != "none":  # with "none" the object never moves, whatever the rules
            if "drop_released" in self.rules:
                self._drop_released_objects(obj_before, held_before)
            if "rest_on_supports" in self.rules:
                self._rest_on_supports()
            if "keep_resting" in self.rules:
                self._keep_resting_objects(obj_before, held_before, tcp, tcp_next)
            if "push_closed_fingers" in self.rules:
                self._push_with_closed_fingers(obj_before, tcp, tcp_next)
        self._history = self._history[1:] + [self._poses()]
        self._heat_hist = self._heat_hist[1:] + [[None] * len(self.integrators)]

    def _kinematic_rules(self, tcp: torch.Tensor, tcp_next: torch.Tensor, cmd: torch.Tensor) -> None:
        """The 'rules-only kinematics' baseline (``world.learned_dynamics = "rules"``): in place of
        the learned object dynamics and the slip predictor, four hand-written rules, no network.

        1. Grasp: fingers that were open (measured opening >= 0.5) and are now commanded closed
           (< 0.5) grasp the object when its centre is within reach of the tool point after the
           action (the learned dynamics' own reach gate, ``REACH_XY``/``REACH_Z``).
        2. Hold: a held object stays held while the command stays closed and moves rigidly with the
           tool point (by the tool point's commanded displacement); no slip.
        3. Release: commanding the gripper open (>= 0.5) lets go; the object falls straight down to
           its resting height on the table at once (the ``rest_on_supports`` rule, when on, then
           puts it on the target's top where it is over the target).
        4. Gripper: the measured opening is the command, except on a held object, where the fingers
           stop on the object's smallest half width (``_held_opening``).

        Nothing else moves the object (pushes are the ``push_closed_fingers`` rule's).
        """
        closed = cmd < 0.5
        was_held = self.held > 0.5
        gap = tcp_next - self.obj
        within_reach = (gap[:, :2].norm(dim=1) < REACH_XY) & (gap[:, 2].abs() < REACH_Z)
        closing = self.gripper >= 0.5
        held = closed & (was_held | (closing & within_reach))
        obj = torch.where(held[:, None], self.obj + (tcp_next - tcp), self.obj)
        released = was_held & ~held
        obj = torch.where(released[:, None], torch.cat([obj[:, :2], self.rest_z[:, None]], dim=1), obj)
        opening = torch.as_tensor(self._held_opening, dtype=torch.float32)
        self.obj = obj
        self.held = held.float()
        self.gripper = torch.where(held, opening, cmd)

    def _rest_on_supports(self) -> None:
        """A free object over the target cannot sink into it: its centre stays at or above the
        target's top plus its own half height (the learned dynamics keep it above the table)."""
        obj = self.obj.numpy().copy()
        for i, (_, _, rest_z) in enumerate(self._supports):
            if self.held[i] > 0.5:
                continue
            if obj[i, 2] < rest_z and self._over_support(i, obj[i]):
                obj[i, 2] = rest_z
        self.obj = torch.from_numpy(obj)

    def _drop_released_objects(self, obj_before: torch.Tensor, held_before: torch.Tensor) -> None:
        """An object let go of on this action drops straight down from where the fingers held it.

        Learned: when a grasp ends, and how far the object falls. Imposed: on the action the grasp
        ends, the object keeps its horizontal position (the fingers open around it; nothing pushes it
        sideways). Recorded simulator data: the object's horizontal displacement on the release
        step has a median of 0.05-0.11 cm per task, and 178 of 189 objects released with their
        centre over the target's footprint end the episode on the target; the learned
        displacement there had medians of 0.6-1.6 cm on the validation layouts, and in 7 of its 8
        false failures after a release it carried an object released over the footprint off it.
        Whether the object then rests on the target's top is decided by :meth:`_rest_on_supports`
        (its centre over the footprint: a rigid body whose centre of mass is over its support
        stays on it).
        """
        released = (held_before > 0.5) & (self.held <= 0.5)
        if bool(released.any()):
            xy = torch.where(released[:, None], obj_before[:, :2], self.obj[:, :2])
            self.obj = torch.cat([xy, self.obj[:, 2:]], dim=1)

    def _keep_resting_objects(
        self, obj_before: torch.Tensor, held_before: torch.Tensor, tcp: torch.Tensor, tcp_next: torch.Tensor
    ) -> None:
        """A free object lying at rest stays exactly where it is unless the fingers can touch it.

        Learned: whether a free object moves (falling after a release, being pushed) and by how
        much. Imposed: an object that was neither held before nor after this action, and lay at
        rest on the table or on the target's support surface, is put back where it was when no
        finger can reach it during the action. Only the fingers collide in the simulator, and an
        object lying still with nothing touching it does not start moving (recorded simulator
        data: 2 of 13034 such steps moved more than 5 mm; the rolling of a released capsule
        continues a motion that started while it fell, and this rule leaves falls alone). The
        learned "moves" switch has no such guarantee: it can fire on a released object at rest,
        which then creeps or is knocked off the target by a tool passing above it.

        Reach, from the public scene: each finger is a box 0.024 x 0.006 x 0.05 m whose outer face
        is at most ``FINGER_TRAVEL + 0.006`` from the tool axis and whose bottom is 0.01 m below the
        tool point; the object reaches its horizontal radius (from the task suite's sizes) around
        its centre and half its height above it. ``REST_REACH_MARGIN`` covers the arm's lag behind
        its command. The tool's path over the action is the segment between the two poses.
        """
        free = (held_before <= 0.5) & (self.held <= 0.5)
        if not bool(free.any()):
            return
        obj = obj_before.numpy()
        on_table = np.abs(obj[:, 2] - self.rest_z.numpy()) <= REST_HEIGHT_TOL
        on_support = np.array(
            [
                self._over_support(i, obj[i]) and abs(obj[i, 2] - self._supports[i][2]) <= REST_HEIGHT_TOL
                for i in range(len(obj))
            ]
        )
        a, b = tcp.numpy().astype(np.float64), tcp_next.numpy().astype(np.float64)
        ab = b[:, :2] - a[:, :2]
        u = np.clip(((obj[:, :2] - a[:, :2]) * ab).sum(1) / np.maximum((ab * ab).sum(1), 1e-12), 0.0, 1.0)
        dist_xy = np.linalg.norm(a[:, :2] + u[:, None] * ab - obj[:, :2], axis=1)
        reach_xy = FINGER_REACH_XY + self._object_radius + REST_REACH_MARGIN
        low_z = np.minimum(a[:, 2], b[:, 2]) - FINGER_BELOW_TCP
        high_z = np.maximum(a[:, 2], b[:, 2]) + FINGER_ABOVE_TCP
        reach_z = (low_z <= obj[:, 2] + self._object_half_height + REST_REACH_MARGIN) & (
            high_z >= obj[:, 2] - self._object_half_height - REST_REACH_MARGIN
        )
        touchable = (dist_xy <= reach_xy) & reach_z
        keep = free.numpy() & (on_table | on_support) & ~touchable
        if keep.any():
            self.obj = torch.where(torch.from_numpy(keep)[:, None], obj_before, self.obj)

    def _push_with_closed_fingers(self, obj_before: torch.Tensor, tcp: torch.Tensor, tcp_next: torch.Tensor) -> None:
        """Closed fingers sweeping through a free object at its height push it ahead of them.

        Imposed, because the learned dynamics do not push: the recorded episodes hold few pushes,
        and on the validation layouts the closed gripper of the knock-away policy swept through
        objects that the simulator moved 5.6 cm (median, first 8 steps) while the learned object
        stayed put. The closed fingers (predicted opening below ``PUSH_CLOSED_OPENING``: no object
        fits between them) are a box around the tool axis (``FINGER_HALF_X`` along the gripper's
        x, the fingers' outer faces along its y); the object is a disc of its smallest horizontal
        half width (task-suite sizes: it is pushed only where the fingers certainly hit it). When
        the tool's horizontal path over the action runs into the object with their heights
        overlapping, the object ends just ahead of the fingers along the path, its sideways offset
        kept (no spin or slide is modelled); its height is the learned one.
        """
        obj = self.obj.numpy().copy()
        before = obj_before.numpy()
        a, b = tcp.numpy().astype(np.float64), tcp_next.numpy().astype(np.float64)
        grip = self.gripper.numpy()
        pushed = False
        for i in range(len(obj)):
            if self.held[i] > 0.5 or grip[i] >= PUSH_CLOSED_OPENING:
                continue
            move = b[i, :2] - a[i, :2]
            length = float(np.hypot(*move))
            half_h = self._object_half_height[i]
            low, high = min(a[i, 2], b[i, 2]) - FINGER_BELOW_TCP, max(a[i, 2], b[i, 2]) + FINGER_ABOVE_TCP
            if length < 1e-4 or low > before[i, 2] + half_h or high < before[i, 2] - half_h:
                continue
            u = move / length
            n = np.array([-u[1], u[0]])
            rot = self.integrators[i].rot
            ex, ey = rot[:2, 0], rot[:2, 1]
            finger_y = grip[i] * FINGER_TRAVEL + 0.006

            def finger_extent(v):
                return abs(v @ ex) * FINGER_HALF_X + abs(v @ ey) * finger_y

            rel = before[i, :2] - a[i, :2]
            along, side = float(rel @ u), float(rel @ n)
            width = self._object_min_half_width[i]
            ahead = finger_extent(u) + width
            if abs(side) < finger_extent(n) + width and -ahead < along < length + ahead:
                obj[i, :2] = a[i, :2] + u * max(along, length + ahead) + n * side
                pushed = True
        if pushed:
            self.obj = torch.from_numpy(obj)

    def _over_support(self, i: int, xyz: np.ndarray) -> bool:
        shape, half_xy, _ = self._supports[i]
        d = xyz[:2] - self.target_xy[i].numpy()
        return bool(np.hypot(*d) <= half_xy[0]) if shape == "cylinder" else bool((np.abs(d) <= half_xy).all())

    def _render(self, rows: np.ndarray | None = None, renderer: Any = None) -> None:
        """Draw the frame of every lane (``rows`` None) or of the lanes ``rows`` only (a batch of
        episodes where only some are due), with ``renderer`` in place of the model's when given."""
        all_rows = rows is None or len(rows) == len(self.integrators)
        rows = np.arange(len(self.integrators)) if rows is None else np.asarray(rows)
        sel = (lambda t: t) if all_rows else (lambda t: t[torch.from_numpy(rows)])
        (pos2, _, _), (pos1, _, _), (pos, _, euler) = self._history
        cond = condition_vector(
            pos[rows],
            euler[rows],
            pos1[rows],
            pos2[rows],
            self.gripper.numpy()[rows],
            self.command.numpy()[rows],
            self.home,
        )
        heat = torch.stack(
            [sel(self._heat_first), self._heat_rows(2, rows), self._heat_rows(1, rows), self._heat_rows(0, rows)], dim=1
        )
        sprite = shift_layers(sel(self.sprite0), self._project(sel(self.obj)) - sel(self.uv0))
        frame, _, _ = (renderer or self.model.renderer)(
            sel(self.first), sel(self.sprite0)[:, 3], heat, sprite, torch.from_numpy(cond)
        )
        if all_rows:
            self.cur = frame
        else:
            cur = self.cur.clone()
            cur[torch.from_numpy(rows)] = frame
            self.cur = cur
        self._pending = 0

    def _heat_rows(self, slot: int, rows: np.ndarray) -> torch.Tensor:
        """Heatmaps (len(rows), H, W) of the pose ``slot`` of ``_history`` (0 = 2 steps ago), each drawn once."""
        pos, rot, _ = self._history[slot]
        cache = self._heat_hist[slot]
        for i in rows:
            if cache[i] is None:
                cache[i] = torch.from_numpy(self.heatmap(pos[i], rot[i]))
        return torch.stack([cache[i] for i in rows])

    # -- many one-episode engines stepped as one batch (the batched vector env) ----------------
    #: per-lane state fixed by ``start`` (the same objects until the lane starts again), and the
    #: per-lane state every action changes
    _EPISODE_TENSORS = ("task", "first", "target_xy", "rest_z", "sprite0", "uv0", "_heat_first")
    _EPISODE_ARRAYS = ("_object_radius", "_object_min_half_width", "_object_half_height", "_held_opening")
    _STEP_TENSORS = ("cur", "obj", "held", "gripper", "command")
    _SLIP_TENSORS = ("offset0", "since", "empty")

    @classmethod
    @torch.no_grad()
    def step_lanes(
        cls,
        engines: Sequence["Engine"],
        actions: np.ndarray,
        render: Sequence[bool | None],
        renderer: Any = None,
        cache: dict | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Apply one action to each of ``engines`` (each holding one episode, as the env's world keeps
        it) in one batched pass, as if each had been stepped alone: ``actions`` (N, 7), ``render``
        each engine's own ``render`` argument. Returns (frames (N, H, W, 3) uint8, measured gripper
        (N,), whether each lane's renderer ran), and leaves each engine's state as its own ``step``
        would have.

        The networks of the object state (dynamics, slip) run one row at a time, so every lane's
        state is bit-identical to a batch of one (BLAS picks other kernels for one row than for
        many, which changes the last bits, and a hard switch could then flip). The renderer runs
        the due lanes as one batch (``renderer``: the batched copy to use, e.g. channels-last):
        its convolutions sum in another order than at batch one (oneDNN at every layer instead of
        the reference path's im2col on the small layers), so a frame may differ from the lone
        engine's by about 1e-6 before rounding, i.e. by one grey level on a few pixels. Nothing
        reads a frame back (the renderer draws from the state, never from its last frame), so the
        difference never grows and never reaches the state. ``cache`` (a dict the caller keeps)
        holds the stacked per-episode tensors between calls while no lane has restarted.
        """
        batch = cls._stack(engines, cache)
        batch._advance(np.asarray(actions, dtype=np.float64).reshape(len(engines), 7))
        due = np.array(
            [
                e._pending + 1 >= batch.actions_per_call if r is None else bool(r)
                for e, r in zip(engines, render, strict=True)
            ],
            dtype=bool,
        )
        if due.any():
            batch._render(np.flatnonzero(due), renderer)
        frames = to_uint8(batch.cur)
        gripper = batch.gripper.numpy().copy()
        batch._unstack(engines, due)
        return frames, gripper, due

    @classmethod
    def _stack(cls, engines: Sequence["Engine"], cache: dict | None) -> "Engine":
        first = engines[0]
        batch = cls.__new__(cls)
        for name in (
            "model",
            "world",
            "actions_per_call",
            "calibration",
            "heatmap",
            "home",
            "rules",
            "learned_dynamics",
        ):
            setattr(batch, name, getattr(first, name))
        key = tuple(e.first for e in engines)
        hit = (
            cache is not None
            and len(cache.get("key", ())) == len(key)
            and all(a is b for a, b in zip(cache["key"], key, strict=True))
        )
        if not hit:
            episode = {name: torch.cat([getattr(e, name) for e in engines]) for name in cls._EPISODE_TENSORS}
            episode.update({name: np.concatenate([getattr(e, name) for e in engines]) for name in cls._EPISODE_ARRAYS})
            episode["_supports"] = [s for e in engines for s in e._supports]
            episode["integrators"] = [p for e in engines for p in e.integrators]  # stepped in place: shared
            if cache is not None:
                cache.clear()
                cache.update(episode, key=key)  # holds the lanes' tensors, so no id is reused meanwhile
        else:
            episode = cache
        for name in (*cls._EPISODE_TENSORS, *cls._EPISODE_ARRAYS, "_supports", "integrators"):
            setattr(batch, name, episode[name])
        for name in cls._STEP_TENSORS:
            setattr(batch, name, torch.cat([getattr(e, name) for e in engines]))
        batch.slip = SlipTracker(0)
        for name in cls._SLIP_TENSORS:
            setattr(batch.slip, name, torch.cat([getattr(e.slip, name) for e in engines]))
        batch._history = [
            tuple(np.concatenate([e._history[k][j] for e in engines]) for j in range(3)) for k in range(3)
        ]
        batch._heat_hist = [[h for e in engines for h in e._heat_hist[k]] for k in range(3)]
        batch._pending = 0
        batch.rowwise = True
        return batch

    def _unstack(self, engines: Sequence["Engine"], rendered: np.ndarray) -> None:
        for i, e in enumerate(engines):
            row = slice(i, i + 1)
            for name in self._STEP_TENSORS:
                setattr(e, name, getattr(self, name)[row].clone())
            for name in self._SLIP_TENSORS:
                setattr(e.slip, name, getattr(self.slip, name)[row].clone())
            e._history = [tuple(a[row].copy() for a in entry) for entry in self._history]
            e._heat_hist = [[slot[i]] for slot in self._heat_hist]
            e._pending = 0 if rendered[i] else e._pending + 1

    def ee_pos(self) -> np.ndarray:
        return np.stack([p.pos for p in self.integrators]).astype(np.float32)

    def ee_euler(self) -> np.ndarray:
        return np.stack([p.euler for p in self.integrators]).astype(np.float32)


def _support(task_params: Mapping[str, Any]) -> tuple[str, np.ndarray, float]:
    """(target shape, footprint half extents (x, y) or (radius, radius), object centre height
    resting on the target), from the public task suite."""
    from kosmos_env.tasks.shapes import object_half_height, target_top

    target = task_params["target"]
    size = np.asarray(target["size"], dtype=np.float64)
    half_xy = np.array([size[0], size[0]]) if target["shape"] == "cylinder" else size[:2]
    return target["shape"], half_xy, float(target_top(target) + object_half_height(task_params["object"]))


def _horizontal_radius(spec: Mapping[str, Any]) -> float:
    """How far an object lying flat reaches horizontally from its centre (m), from its task-suite
    size: a box its half diagonal, a capsule its half length plus radius, a cylinder its radius."""
    size = np.asarray(spec["size"], dtype=np.float64)
    if spec["shape"] == "box":
        return float(np.hypot(size[0], size[1]))
    if spec["shape"] == "capsule":
        return float(size[0] + size[1])
    return float(size[0])


def _min_half_width(spec: Mapping[str, Any]) -> float:
    """An object's smallest horizontal half width (m) from its task-suite size: a box its
    smaller half side, a capsule or cylinder its radius."""
    size = np.asarray(spec["size"], dtype=np.float64)
    return float(min(size[0], size[1])) if spec["shape"] == "box" else float(size[0])
