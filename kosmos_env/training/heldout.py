"""Held-out evaluation while a policy trains: success on tuning seeds, with a Wilson 95 % interval.

A run's held-out units are ``(task_i, HELDOUT_SEED_BASE + 100 * i + j)`` for ``j < units_per_task``,
``i`` the task's index in the env's task list. Those seeds lie in the project's *tuning* range
(``kosmos_env/study/seed_ranges.json``): a curve watched during training may pick a checkpoint,
so it must never see an evaluation seed, and demonstrations use training seeds.

What counts as success depends on the world the policy trains in:

- ``truth`` (the tabletop worlds, simulated or learned): the simulator's own verdict at the horizon,
  in its evaluation configuration (:data:`kosmos_env.training.evaluate.TRUTH`: 64x64 frames,
  terminal reward, no early end), at the run's horizon;
- ``world`` (any other world): the env's own judge verdict at the episode's end, in the
  configuration the policy trains in (its reward, horizon and frame size); an episode without a
  verdict (discarded by the gate, judge abstained) is left out of ``n`` and counted as ``undecided``.

The policy is the checkpoint's deterministic one (the Gaussian mean), exactly as ``ckpt:path=FILE``
acts. Nothing here trains, and nothing here imports SB3.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from kosmos_env.training.evaluate import TRUTH, EnvConfig, rollout_units

#: first seed of the held-out units (tuning range 320000-329999; 325000-328999 serve the recipe pilots)
HELDOUT_SEED_BASE = 329000
#: seeds per task a run may use (task i's block is 100 seeds wide)
MAX_UNITS_PER_TASK = 100
#: worlds whose success the simulator can tell (a learned tabletop's scenes are the simulator's)
TRUTH_WORLDS = ("tabletop", "tabletop_learned")


def heldout_units(task_names: Sequence[str], units_per_task: int, tasks: Sequence[str] | None = None) -> list:
    """``(task, seed)`` pairs: ``units_per_task`` seeds for each of ``tasks`` (default: all of
    ``task_names``), the seed block of a task fixed by its index in ``task_names``."""
    k = int(units_per_task)
    if not 1 <= k <= MAX_UNITS_PER_TASK:
        raise ValueError(f"held-out units per task must be in [1, {MAX_UNITS_PER_TASK}], got {units_per_task}")
    names = list(task_names)
    chosen = list(tasks) if tasks else names
    unknown = [t for t in chosen if t not in names]
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; tasks: {names}")
    return [(t, HELDOUT_SEED_BASE + 100 * names.index(t) + j) for t in chosen for j in range(k)]


def success_mode(world_type: str) -> str:
    """``truth`` for the tabletop worlds, ``world`` (the env's own judge) for any other."""
    return "truth" if world_type in TRUTH_WORLDS else "world"


class _Recorder:
    """A policy that passes through to ``policy`` and keeps the frames of the first episode it plays."""

    def __init__(self, policy):
        self.policy = policy
        self.frames: list[np.ndarray] = []
        self._episodes = 0

    def reset(self, instruction: str, seed: int | None = None) -> None:
        self._episodes += 1
        self.policy.reset(instruction, seed=seed)

    def act(self, obs: Mapping[str, Any]) -> np.ndarray:
        if self._episodes == 1 and "image" in obs:
            self.frames.append(np.asarray(obs["image"], np.uint8).copy())
        return self.policy.act(obs)

    def close(self) -> None:
        self.policy.close()


class HeldOut:
    """Evaluates checkpoints on a run's held-out units (module docstring); one env for all calls.

    ``evaluate(path, update, env_steps)`` returns a row ``{update, env_steps, success, k, n,
    undecided, wilson_95: [lo, hi], mode, per_task: {task: [k, n]}, verdicts: [1 | 0 | None per
    unit, in the order of units]}`` and, with ``frames=True``, the first unit's frames
    ((T, H, W, 3) uint8) for a video.
    """

    def __init__(
        self,
        env_id: str,
        world_type: str,
        task_names: Sequence[str],
        units_per_task: int,
        *,
        env_kwargs: Mapping[str, Any] | None = None,
        image_size: Sequence[int] = (64, 64),
        tasks: Sequence[str] | None = None,
    ):
        self.mode = success_mode(world_type)
        self.units = heldout_units(task_names, units_per_task, tasks)
        self.units_per_task = int(units_per_task)
        kwargs = dict(env_kwargs or {})
        if self.mode == "truth":
            # the simulator's evaluation configuration; only the run's episode length carries over
            horizon = {"horizon": kwargs["horizon"]} if "horizon" in kwargs else {}
            self.config = EnvConfig(TRUTH.env_id, {**TRUTH.kwargs, **horizon}, TRUTH.label)
        else:
            kwargs.setdefault("image_size", tuple(int(v) for v in image_size))
            self.config = EnvConfig(env_id, kwargs, "world-judged")
        self._env = None

    def describe(self) -> dict[str, Any]:
        """What the rows mean, for curve.json and the run's logged config."""
        return {
            "mode": self.mode,
            "env_id": self.config.env_id,
            "env_kwargs": {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.config.kwargs.items()},
            "units_per_task": self.units_per_task,
            "n_units": len(self.units),
            "seeds": f"{HELDOUT_SEED_BASE} + 100 * task index + j, j < {self.units_per_task} (tuning range)",
            "units": [[task, seed] for task, seed in self.units],
        }

    def evaluate(self, checkpoint: str, update: int, env_steps: int, *, frames: bool = False):
        """(row, frames or None) for the checkpoint file ``checkpoint``."""
        from kosmos_env.policies import make_policy
        from kosmos_env.stats.intervals import wilson

        if self._env is None:
            self._env = self.config.make()
        recorder: list[_Recorder] = []

        def build():
            policy = make_policy("ckpt", path=str(checkpoint))
            if frames:
                recorder.append(_Recorder(policy))
                return recorder[0]
            return policy

        records = rollout_units(build, self.config, self.units, env=self._env)
        verdicts = [self._verdict(r) for r in records]
        decided = [v for v in verdicts if v is not None]
        k, n = int(sum(decided)), len(decided)
        interval = wilson(k, n)
        per_task: dict[str, list[int]] = {}
        for r, v in zip(records, verdicts, strict=True):
            counts = per_task.setdefault(r["task"], [0, 0])
            if v is not None:
                counts[0] += int(v)
                counts[1] += 1
        row = {
            "update": int(update),
            "env_steps": int(env_steps),
            "success": None if n == 0 else k / n,
            "k": k,
            "n": n,
            "undecided": len(verdicts) - n,
            "wilson_95": [round(interval.lower, 6), round(interval.upper, 6)],
            "mode": self.mode,
            "per_task": per_task,
            "verdicts": [None if v is None else int(v) for v in verdicts],  # in the order of self.units
        }
        clip = np.stack(recorder[0].frames) if recorder and recorder[0].frames else None
        return row, clip

    def _verdict(self, record: Mapping[str, Any]) -> bool | None:
        if self.mode == "truth":
            return record["true_success"]
        judged = record.get("judge_success")  # the env judge's verdict at the episode's end
        if record.get("outcome") == "discarded" or judged is None or judged == "pending":
            return None
        return bool(judged)

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
