"""Run the learned tabletop forward: object state, gripper and frames, for a batch of episodes.

One implementation serves the env (:mod:`.world`, a batch of one) and the held-out evaluation
(:mod:`.train`, many episodes in lockstep), so what is measured is what the env runs.

Per action: the commanded pose is integrated (:mod:`.kinematics`), the object dynamics step the
object state and predict the measured gripper (:mod:`.objects`), the slip predictor, where the
weights hold one, may end a hold under closed fingers (:mod:`.slip`), and a free object over the
target is kept on the target's top (the one piece of scene geometry imposed rather than
learned; sizes from the public task suite). The renderer (:mod:`.model`) draws a frame from
the current state over the episode's first frame (never from its own previous output); it is
called once every ``actions_per_call`` actions (and whenever a frame is due, e.g. at the end of
the episode); actions in between repeat the last generated frame.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch

from kosmos_env.worlds.tabletop.geometry import tabletop_calibration
from kosmos_env.worlds.tabletop_learned.kinematics import HeatmapRenderer, PoseIntegrator
from kosmos_env.worlds.tabletop_learned.model import MAX_ACTIONS_PER_CALL, condition_vector
from kosmos_env.worlds.tabletop_learned.objects import locate, rest_heights, shift_layers, sprite_alpha
from kosmos_env.worlds.tabletop_learned.slip import SlipTracker


def to_tensor(frames: np.ndarray) -> torch.Tensor:
    """uint8 (B, H, W, 3) → float (B, 3, H, W) in [0, 1]."""
    return torch.from_numpy(np.ascontiguousarray(frames)).float().div_(255.0).movedim(-1, -3)


def to_uint8(frames: torch.Tensor) -> np.ndarray:
    return (frames.movedim(-3, -1).numpy() * 255.0).round().clip(0, 255).astype(np.uint8)


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
            from kosmos_env.tasks.shapes import object_half_height

            obj_z, _ = rest_heights(task_params[i])
            target_plane = object_half_height(task_params[i]["target"])
            t, _ = locate(self.calibration, probs[i, 1], target_plane, self.home[:2])
            o, _ = locate(self.calibration, probs[i, 0], obj_z, t[:2])
            obj.append(o)
            target_xy.append(t[:2])
            rest.append(obj_z)
        self.obj = torch.as_tensor(np.stack(obj), dtype=torch.float32)
        self._supports = [_support(p) for p in task_params]
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
        self._pending = 0

    def _poses(self):
        return (np.stack([p.pos for p in self.integrators]), np.stack([p.rot for p in self.integrators]),
                np.stack([p.euler for p in self.integrators]))

    def _heat(self, poses) -> torch.Tensor:
        pos, rot, _ = poses
        return torch.from_numpy(np.stack([self.heatmap(p, r) for p, r in zip(pos, rot)]))

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
        actions = np.asarray(actions, dtype=np.float64).reshape(len(self.integrators), 7)
        tcp = torch.as_tensor(np.stack([p.pos for p in self.integrators]), dtype=torch.float32)
        yaw = torch.as_tensor(np.array([p.euler[2] for p in self.integrators]), dtype=torch.float32)
        for p, a in zip(self.integrators, actions):
            p.step(a)
        tcp_next = torch.as_tensor(np.stack([p.pos for p in self.integrators]), dtype=torch.float32)
        cmd = torch.as_tensor(actions[:, 6], dtype=torch.float32)
        before = (self.obj, self.held, self.gripper)
        self.obj, self.held, _, _, self.gripper = self.model.dynamics.step(
            self.obj, tcp, tcp_next, cmd, self.gripper, self.held, self.rest_z, self.target_xy, self.task, hard=True)
        if getattr(self.model, "slip", None) is not None:  # a held object may leave closed fingers (.slip)
            self.obj, self.held, self.gripper = self.slip.step(self.model.slip, *before, self.obj, self.held,
                                                               self.gripper, tcp, tcp_next, yaw, cmd, self.rest_z, self.task)
        self.command = cmd
        self._rest_on_supports()
        self._history = self._history[1:] + [self._poses()]
        self._pending += 1
        due = self._pending >= self.actions_per_call if render is None else render
        if due:
            self._render()
        return to_uint8(self.cur), self.gripper.numpy().copy(), bool(due)

    def _rest_on_supports(self) -> None:
        """A free object over the target cannot sink into it: its centre stays at or above the
        target's top plus its own half height (the learned dynamics keep it above the table)."""
        obj = self.obj.numpy().copy()
        for i, (shape, half_xy, rest_z) in enumerate(self._supports):
            if self.held[i] > 0.5:
                continue
            d = obj[i, :2] - self.target_xy[i].numpy()
            over = np.hypot(*d) <= half_xy[0] if shape == "cylinder" else bool((np.abs(d) <= half_xy).all())
            if over and obj[i, 2] < rest_z:
                obj[i, 2] = rest_z
        self.obj = torch.from_numpy(obj)

    def _render(self) -> None:
        (pos2, rot2, _), (pos1, rot1, _), (pos, rot, euler) = self._history
        cond = condition_vector(pos, euler, pos1, pos2, self.gripper.numpy(), self.command.numpy(), self.home)
        heat = torch.stack([self._heat_first, self._heat((pos, rot, euler)), self._heat((pos1, rot1, None)),
                            self._heat((pos2, rot2, None))], dim=1)
        frame, _, _ = self.model.renderer(self.first, self.sprite0[:, 3], heat, self.sprite_at(self.obj),
                                       torch.from_numpy(cond))
        self.cur = frame
        self._pending = 0

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
