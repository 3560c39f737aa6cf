"""LearnedTabletopWorld: the learned tabletop behind ``Kosmos-TabletopLearned-v1``.

``reset`` lays out the scene with the simulator (same seed, same layout as
``Kosmos-Tabletop-v1``) and keeps only its first frame, the way a video world model is given
an initial photograph. From then on the simulator is not consulted: every frame is predicted by
the next-frame network from the last two frames and the action, the end-effector pose is
integrated from the actions, and the measured gripper is predicted. The world has no state to
evaluate, so :meth:`evaluate` returns ``None``; judge it with the robot-log judge (on the
predicted gripper log) or the vision judge on generated frames.

The network runs at 64×64 only; the spec fixes ``image_size`` to it and any other size is
refused with a clear error.
"""
from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import numpy as np
from gymnasium import spaces

from kosmos_env.worlds.base import MissingWeightsError, WorldReset, WorldStep
from kosmos_env.worlds.tabletop.geometry import robot_state_space, tabletop_calibration
from kosmos_env.worlds.tabletop_learned.kinematics import MODEL_SIZE, HeatmapRenderer, PoseIntegrator

_OWN_KEYS = ("type", "reference", "weights", "weights_sha256")


def weights_dir() -> Path:
    return Path(str(resources.files("kosmos_env.worlds.tabletop_learned") / "weights"))


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class LearnedTabletopWorld:
    """Learned next-frame model implementing :class:`~kosmos_env.worlds.base.WorldModel`.

    ``weights_path`` (a ``world_kwargs`` option) points at another weights file; its sha256
    must still match the spec's ``world.weights_sha256`` unless that field is ``null``.
    """

    frames_per_action = 1

    def __init__(self, spec: Any, weights_path: str | None = None):
        if tuple(spec.image_size) != MODEL_SIZE:
            raise ValueError(
                f"{spec.id} runs its learned model at {MODEL_SIZE[0]}x{MODEL_SIZE[1]} only; got image_size "
                f"{tuple(spec.image_size)}. Make it with image_size=(64, 64) (the default) or use Kosmos-Tabletop-v1 "
                f"for other resolutions.")
        self.spec = spec
        self.params: Mapping[str, Any] = spec.world
        self.image_size = MODEL_SIZE
        self.calibration = tabletop_calibration(self.params["camera"], MODEL_SIZE)
        self.weights_path = Path(weights_path) if weights_path else weights_dir() / self.params["weights"]
        self._integrator = PoseIntegrator(self.params)
        self._heatmap = HeatmapRenderer(self.params["camera"], MODEL_SIZE)
        self._home = np.asarray(self.params["home_tcp"], dtype=np.float32)
        self._model = None
        self._sim = None

    # -- WorldModel protocol --------------------------------------------------------------
    def state_space(self) -> Mapping[str, spaces.Space]:
        return robot_state_space()

    def load(self) -> None:
        if self._model is not None:
            return
        if not self.weights_path.is_file():
            raise MissingWeightsError(
                f"learned tabletop weights not found at {self.weights_path}; they ship with the package "
                f"(reinstall it) or can be retrained with `kosmos-env train-world --out-dir DIR` and passed "
                f"as world_kwargs={{'weights_path': 'DIR/world.safetensors'}}")
        expected = self.params.get("weights_sha256")
        if expected:
            actual = file_sha256(self.weights_path)
            if actual != expected:
                raise ValueError(
                    f"weights {self.weights_path} have sha256 {actual}, but {self.spec.id} is bound to {expected}. "
                    f"Different weights are a different world: override the spec's world.weights_sha256 "
                    f"(which changes the spec hash) to use them.")
        from kosmos_env.worlds.tabletop_learned.model import load_weights

        self._model, self.weights_info = load_weights(self.weights_path)

    def reset(self, task: Any, rng: np.random.Generator) -> WorldReset:
        self.load()
        start = self._simulator().reset(task, rng)
        self._integrator.reset()
        import torch

        self._cur = torch.from_numpy(start.frame).float().div(255.0).permute(2, 0, 1)[None]
        self._prev = self._cur
        self._gripper = float(start.state["gripper"][0])
        return WorldReset(frame=start.frame, state=self._state())

    def step(self, actions: np.ndarray) -> WorldStep:
        import torch

        from kosmos_env.worlds.tabletop_learned.model import condition_vector

        frames, ee, cmd, measured = [], [], [], []
        for action in np.asarray(actions, dtype=np.float64).reshape(-1, 7):
            pos, rot, euler = self._integrator.pos.copy(), self._integrator.rot.copy(), self._integrator.euler
            self._integrator.step(action)
            nxt_pos, nxt_rot = self._integrator.pos, self._integrator.rot
            cond = condition_vector(action, pos, euler, nxt_pos, np.float32(self._gripper), self._home)
            with torch.no_grad():
                frame, gripper, _ = self._model(
                    self._prev, self._cur,
                    torch.from_numpy(self._heatmap(pos, rot))[None], torch.from_numpy(self._heatmap(nxt_pos, nxt_rot))[None],
                    torch.from_numpy(cond)[None])
            self._prev, self._cur = self._cur, frame
            self._gripper = float(np.clip(gripper.item(), 0.0, 1.0))
            frames.append((frame[0].permute(1, 2, 0).numpy() * 255.0).round().clip(0, 255).astype(np.uint8))
            ee.append(nxt_pos.astype(np.float32))
            cmd.append(float(action[6]))
            measured.append(self._gripper)
        log = {
            "ee_pos": np.asarray(ee, dtype=np.float32),
            "gripper_cmd": np.asarray(cmd, dtype=np.float32),
            "gripper_measured": np.asarray(measured, dtype=np.float32),
        }
        return WorldStep(frames=np.stack(frames), state=self._state(), log=log)

    def evaluate(self) -> None:
        """No simulator state: a learned world cannot be asked for ground truth."""
        return None

    def close(self) -> None:
        if self._sim is not None:
            self._sim.close()
            self._sim = None

    # -- internals ----------------------------------------------------------------------
    def _simulator(self):
        """The MuJoCo tabletop, used only to lay out and render the first frame of an episode."""
        if self._sim is None:
            from kosmos_env.spec import load_spec
            from kosmos_env.worlds.tabletop.world import TabletopWorld

            sim_world = {k: v for k, v in self.params.items() if k not in _OWN_KEYS}
            sim_world["type"] = "tabletop"
            sim_spec = load_spec(self.params["reference"]).with_overrides(world=sim_world, image_size=list(MODEL_SIZE))
            self._sim = TabletopWorld(sim_spec)
        return self._sim

    def _state(self) -> dict[str, np.ndarray]:
        return {
            "ee_pos": self._integrator.pos.astype(np.float32),
            "ee_euler": self._integrator.euler.astype(np.float32),
            "gripper": np.array([self._gripper], dtype=np.float32),
        }
