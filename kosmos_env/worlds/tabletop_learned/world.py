"""LearnedTabletopWorld: the learned tabletop behind ``Kosmos-TabletopLearned-v1``.

``reset`` lays out the scene with the simulator (same seed, same layout as
``Kosmos-Tabletop-v1``) and keeps only its first frame, the way a video world model is given
an initial photograph. From then on the simulator is not consulted: the learned segmenter finds
the object and the target in that frame, the learned object dynamics step the object state and
predict the measured gripper with every action (a learned slip predictor, where the weights hold
one, may end a hold under closed fingers: :mod:`.slip`), and the renderer draws every frame from that
state (integrated pose, predicted gripper, the object's sprite placed where the object now is)
over the first frame, never from its own previous output, so frames do not blur as the
episode goes on (:mod:`.engine`). The end-effector pose is integrated from the actions. The world has no state
to evaluate, so :meth:`evaluate` returns ``None``; judge it with the robot-log judge (on the
predicted gripper log) or the vision judge on generated frames.

Cost against fidelity: ``world.actions_per_call`` (1–4) sets how many actions one renderer
call covers (frames between calls repeat the last generated one); the spec's ``world.sweep``
lists the values a study may sweep. Which stages run is set by ``world.rules`` (the engine's
four fixed rules) and ``world.learned_dynamics`` (``learned`` | ``rules`` | ``none``), validated by the
spec (:func:`kosmos_env.spec._normalise_learned_tabletop`) and honoured by the engine (:mod:`.engine`),
lone or batched. The network runs at 64×64 only; the spec fixes
``image_size`` to it and any other size is refused with a clear error.
"""

from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Mapping

import numpy as np
from gymnasium import spaces

from kosmos_env.hashing import sha256_file
from kosmos_env.worlds.base import MissingWeightsError, WorldReset, WorldStep
from kosmos_env.worlds.tabletop import TABLETOP_SETTINGS
from kosmos_env.worlds.tabletop.geometry import robot_state_space, tabletop_calibration
from kosmos_env.worlds.tabletop_learned.kinematics import MODEL_SIZE

_OWN_KEYS = ("type", "reference", "weights", "weights_sha256", "actions_per_call", "sweep", "rules", "learned_dynamics")
#: the world settings a study may sweep (cost against fidelity), and the values each may take
SWEEPABLE = {"actions_per_call": (1, 2, 3, 4)}
# Version of this world's run-time code (the engine's fixed rules, the slip rule); the spec hash
# takes it from kosmos_env.spec.WORLD_VERSIONS (kept equal by a test). Bump both when a change
# can alter a frame, a gripper reading or an object's path with the same weights.
WORLD_VERSION = "2"


def weights_dir() -> Path:
    return Path(str(resources.files("kosmos_env.worlds.tabletop_learned") / "weights"))


class LearnedTabletopWorld:
    """Learned next-frame model implementing :class:`~kosmos_env.worlds.base.WorldModel`.

    ``weights_path`` (a ``world_kwargs`` option) points at another weights file; its sha256
    must still match the spec's ``world.weights_sha256`` unless that field is ``null``.
    """

    frames_per_action = 1
    #: the spec's ``world`` keys this world reads (checked by kosmos_env.worlds.make_world): its own,
    #: and the tabletop's, which its simulator (the first frame's layout) is built with
    world_settings = TABLETOP_SETTINGS | frozenset(_OWN_KEYS) - {"type"}
    # what `kosmos-env study --sweep` may vary (kosmos_env.study.sweep); the values a spec may
    # list in world.sweep are SWEEPABLE's
    sweep_settings = {
        "actions_per_call": {
            "spec": "world.actions_per_call",
            "help": "actions one model call covers (1-4): fewer calls, coarser in-between frames",
        },
    }

    def __init__(self, spec: Any, weights_path: str | None = None):
        if tuple(spec.image_size) != MODEL_SIZE:
            raise ValueError(
                f"{spec.id} runs its learned model at {MODEL_SIZE[0]}x{MODEL_SIZE[1]} only; got image_size "
                f"{tuple(spec.image_size)}. Make it with image_size=(64, 64) (the default) or use Kosmos-Tabletop-v1 "
                f"for other resolutions."
            )
        self.spec = spec
        self.params: Mapping[str, Any] = spec.world
        self.image_size = MODEL_SIZE
        self.calibration = tabletop_calibration(self.params["camera"], MODEL_SIZE)
        self.weights_path = Path(weights_path) if weights_path else weights_dir() / self.params["weights"]
        self.actions_per_call = self.params.get("actions_per_call", 1)
        if self.actions_per_call not in SWEEPABLE["actions_per_call"]:
            raise ValueError(
                f"{spec.id}: world.actions_per_call must be one of {list(SWEEPABLE['actions_per_call'])}, "
                f"got {self.actions_per_call!r}"
            )
        sweep = self.params.get("sweep", {})
        bad = [
            k
            for k in (sweep if isinstance(sweep, Mapping) else ["<not a mapping>"])
            if k not in SWEEPABLE or not isinstance(sweep[k], (list, tuple)) or not set(sweep[k]) <= set(SWEEPABLE[k])
        ]
        if bad:
            raise ValueError(
                f"{spec.id}: world.sweep may list only {dict((k, list(v)) for k, v in SWEEPABLE.items())}; "
                f"got {sweep!r}"
            )
        self._model = None
        self._engine = None
        self._sim = None
        #: a :class:`~kosmos_env.batched_vector.WorldCallBatcher` set by the batched vector env: each
        #: action then runs on this world's engine inside one batched pass over all sub-envs' engines
        self.batcher: Any = None
        # worlds whose engines may be stacked into one batch: same weights file and world settings
        self._batch_key = (str(self.weights_path), json.dumps(dict(self.params), sort_keys=True, default=str))

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
                f"as world_kwargs={{'weights_path': 'DIR/world.safetensors'}}"
            )
        expected = self.params.get("weights_sha256")
        if expected:
            actual = sha256_file(self.weights_path)
            if actual != expected:
                raise ValueError(
                    f"weights {self.weights_path} have sha256 {actual}, but {self.spec.id} is bound to {expected}. "
                    f"Different weights are a different world: override the spec's world.weights_sha256 "
                    f"(which changes the spec hash) to use them."
                )
        from kosmos_env.worlds.tabletop_learned.engine import Engine
        from kosmos_env.worlds.tabletop_learned.model import load_weights

        self._model, self.weights_info = load_weights(self.weights_path)
        self._engine = Engine(self._model, self.params, self.actions_per_call, MODEL_SIZE)

    def reset(self, task: Any, rng: np.random.Generator) -> WorldReset:
        self.load()
        start = self._simulator().reset(task, rng)
        from kosmos_env.worlds.tabletop_learned.objects import TASKS

        if task.name not in TASKS:
            raise ValueError(f"the learned tabletop knows tasks {list(TASKS)}, not {task.name!r}")
        self._engine.start(start.frame[None], [TASKS.index(task.name)], [task.params])
        self._steps = 0
        self._gripper = 1.0
        return WorldReset(frame=start.frame, state=self._state())

    def step(self, actions: np.ndarray) -> WorldStep:
        frames, ee, cmd, measured = [], [], [], []
        for action in np.asarray(actions, dtype=np.float64).reshape(-1, 7):
            self._steps += 1
            # the last step of an episode always gets a generated frame (what a judge reads)
            render = True if self._steps >= self.spec.horizon else None
            if self.batcher is None:
                frame, gripper, _ = self._engine.step(action[None], render=render)
                frame, gripper = frame[0], gripper[0]
            else:  # this world's engine steps inside one batch with the other sub-envs' (LaneStepper)
                stepper = self.batcher.shared(LaneStepper, LaneStepper)
                frame, gripper = self.batcher.generate(
                    stepper, {"engine": self._engine, "key": self._batch_key, "action": action, "render": render}
                )
            self._gripper = float(np.clip(gripper, 0.0, 1.0))
            frames.append(frame)
            ee.append(self._engine.ee_pos()[0])
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
            "ee_pos": self._engine.ee_pos()[0],
            "ee_euler": self._engine.ee_euler()[0],
            "gripper": np.array([self._gripper], dtype=np.float32),
        }


class LaneStepper:
    """Steps the engines of many learned-tabletop worlds (one episode each) as one batch.

    The batched vector env's :class:`~kosmos_env.batched_vector.WorldCallBatcher` collects one
    request per stepping sub-env (its world's engine, action and render flag) and calls
    :meth:`kosmos_run_batch` with all of them; :meth:`.engine.Engine.step_lanes` runs them as one
    pass (object state bit-identical to each world alone; frames within one grey level, see
    there). Sub-envs that reset meanwhile simply bring a newly started engine: nothing of a lane's
    old episode is kept here except the stacked per-episode tensors, which are rebuilt whenever
    any lane's engine has restarted. The renderer runs as a channels-last copy (oneDNN's faster
    batched kernels; about 1.9x faster at batch 8 on the 2-core bench machine), made once per
    weights; the worlds' own networks are left as they are, so a single env is unchanged.
    """

    def __init__(self):
        self._renderers: dict[Any, Any] = {}
        self._caches: dict[Any, dict] = {}

    def kosmos_run_batch(self, requests: list[dict]) -> tuple[list, Any]:
        import torch

        from kosmos_env.worlds.tabletop_learned.engine import Engine

        results: list = [None] * len(requests)
        groups: dict[Any, list[int]] = {}
        for j, request in enumerate(requests):
            groups.setdefault(request["key"], []).append(j)
        for key, rows in groups.items():
            engines = [requests[j]["engine"] for j in rows]
            renderer = self._renderers.get(key)
            if renderer is None:
                renderer = copy.deepcopy(engines[0].model.renderer).to(memory_format=torch.channels_last)
                self._renderers[key] = renderer
            frames, gripper, _ = Engine.step_lanes(
                engines,
                np.stack([np.asarray(requests[j]["action"], dtype=np.float64) for j in rows]),
                [requests[j]["render"] for j in rows],
                renderer=renderer,
                cache=self._caches.setdefault(key, {}),
            )
            for n, j in enumerate(rows):
                results[j] = (frames[n].copy(), float(gripper[n]))
        return results, SimpleNamespace(batched=len(groups) == 1)
