"""The env PPO trains in: a Kosmos env rendered at the network's size, a task drawn per reset, and
``kosmos_env.wrappers``' RL view of it. Shared by :mod:`kosmos_env.training.ppo` (one env per
``DummyVecEnv`` slot) and :mod:`kosmos_env.training.sb3_vec` (the same wrappers over the sub-envs of a
batched vector env), so the two stepping modes see the same observations and draw the same tasks.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np


def _task_sampler_class():
    import gymnasium

    class TaskSampler(gymnasium.Wrapper):
        """Each reset lays out a task drawn from ``tasks`` with its own seeded generator."""

        def __init__(self, env, tasks: Sequence[str], seed: int):
            super().__init__(env)
            self.tasks = list(tasks)
            self._rng = np.random.default_rng(seed)

        def reset(self, *, seed=None, options=None):
            options = dict(options or {})
            options.setdefault("task", self.tasks[int(self._rng.integers(len(self.tasks)))])
            return self.env.reset(seed=seed, options=options)

    return TaskSampler


def make_training_env(
    env_id: str,
    *,
    image_size: Sequence[int],
    frame_stack: int,
    tasks: Sequence[str] | None,
    seed: int,
    env_kwargs: Mapping[str, Any] | None = None,
):
    """One env as PPO sees it: the Kosmos env (rendered at ``image_size`` unless ``env_kwargs``
    says otherwise), a task drawn per reset, then ``kosmos_env.wrappers.wrap_rl_env``."""
    import gymnasium

    import kosmos_env  # noqa: F401  (registers the env ids)
    from kosmos_env.wrappers import wrap_rl_env

    kwargs = dict(env_kwargs or {})
    # the world renders at the network's size (a spec override, recorded in the spec hash), so no
    # resizing happens in training; wrap_rl_env rather than make_rl_env because make_rl_env's
    # image_size is the wrapper's resize, not the spec's
    kwargs.setdefault("image_size", tuple(int(v) for v in image_size))
    env = gymnasium.make(env_id, **kwargs)
    try:
        names = list(tasks) if tasks else list(env.unwrapped.task_names)
        unknown = [t for t in names if t not in env.unwrapped.task_names]
        if unknown:
            raise ValueError(f"unknown task(s) {unknown} for {env_id}; tasks: {env.unwrapped.task_names}")
        return wrap_rl_env(
            _task_sampler_class()(env, names, seed), image_size=tuple(image_size), frame_stack=int(frame_stack)
        )
    except Exception:
        env.close()
        raise
