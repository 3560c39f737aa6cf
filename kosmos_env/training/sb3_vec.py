"""A stable-baselines3 ``VecEnv`` whose sub-envs step as one batched pass of the world.

SB3's ``DummyVecEnv`` steps its envs one after another; over ``Kosmos-TabletopLearned-v1`` that is
N sequential passes of the learned world. :class:`KosmosVecEnv` gives SB3 the same envs, but its
sub-envs live in the Gymnasium vector env of ``gymnasium.make_vec(id, num_envs=N,
vectorization_mode="vector_entry_point")`` (:class:`kosmos_env.batched_vector.BatchedWorldVectorEnv`),
whose ``step_some`` runs every sub-env's world call in one batch.

What SB3 sees is what it sees through ``DummyVecEnv`` of
:func:`kosmos_env.training.training_envs.make_training_env` envs, by construction: each sub-env of the vector
env is wrapped in the same wrapper chain (a "lane": ppo.py's ``TaskSampler``, then
:func:`kosmos_env.wrappers.wrap_rl_env`: observation encoding, frame stacking, actions from
[-1, 1] to the env's bounds), and this class follows ``DummyVecEnv.step_wait`` line for line
(``TimeLimit.truncated``, ``terminal_observation``, reset in the same step). A step:

1. each lane's action is mapped through the lane's action wrappers to the env's units;
2. ``vec.step_some`` steps all sub-envs side by side, their world calls in one batch, and hands
   back each sub-env's raw ``(obs, reward, terminated, truncated, info)``;
3. each result is handed to its sub-env (the vector env's own ``ready`` slot, which its ``step``
   uses the same way) and the lane's ``step`` runs through its wrappers, which encode and stack it
   exactly as in a single env.

Autoreset: the vector env's own is next-step (``make_vec`` with ``vector_entry_point`` passes no
``autoreset_mode``, and ``make_batched_vec`` hands every keyword to the env), and a same-step one
would reset a sub-env with its old task, since the env keeps its task when reset without options.
Neither is used: ``step_some`` never autoresets, and this class resets a finished lane itself in the
same step (SB3's semantics: ``infos[i]["terminal_observation"]``, then the new episode's first
observation), through the lane, so its ``TaskSampler`` draws the next task from its own seeded
generator. Resets run in the calling thread, as the vector env requires.

A vector env without ``step_some`` (``vectorization_mode="sync"``) also works: its lanes step one
after another, exactly like ``DummyVecEnv``.

    vec = make_sb3_vec_env("Kosmos-TabletopLearned-v1", 8, image_size=(64, 64), frame_stack=1,
                           tasks=None, seed=0)
    model = PPO(KosmosActorCritic, vec, policy_kwargs={"net_config": NetConfig().to_dict()})
"""

from __future__ import annotations

from collections import OrderedDict
from copy import deepcopy
from typing import Any, Callable, Mapping, Sequence

import gymnasium
import numpy as np
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs, VecEnvStepReturn
from stable_baselines3.common.vec_env.util import dict_to_obs, obs_space_info

#: sub-env ``i`` of a run seeded ``seed`` draws its tasks from ``default_rng(seed * 1000 + i)``:
#: the seeds ``finetune_ppo`` gives the envs of its ``DummyVecEnv``
TASK_SEED_STRIDE = 1000


class KosmosVecEnv(VecEnv):
    """SB3 ``VecEnv`` over the sub-envs of a Gymnasium ``SyncVectorEnv`` (module docstring).

    ``vec``: the vector env (``BatchedWorldVectorEnv`` batches its steps; a plain
    ``SyncVectorEnv`` steps them in turn); it belongs to this object from now on, and :meth:`close`
    closes it. ``wrap(sub_env, i)``: the lane of sub-env ``i``, a wrapper chain around
    ``vec.envs[i]`` (:func:`make_sb3_vec_env` passes ppo.py's ``TaskSampler`` + ``wrap_rl_env``).
    ``envs`` are the lanes, as ``DummyVecEnv.envs`` are its envs.
    """

    def __init__(self, vec: Any, wrap: Callable[[gymnasium.Env, int], gymnasium.Env]):
        subs = getattr(vec, "envs", None)
        if subs is None:
            raise ValueError(
                f"KosmosVecEnv needs a vector env holding its sub-envs in this process (.envs: "
                f"vector_entry_point or sync mode); got {type(vec).__name__}"
            )
        self.vec = vec
        self.batched = hasattr(vec, "step_some")
        self._subs: list[gymnasium.Env] = list(subs)
        self.envs: list[gymnasium.Env] = [wrap(sub, i) for i, sub in enumerate(self._subs)]
        #: per lane, its action wrappers from the outside in (what maps an SB3 action to env units)
        self._action_wrappers = [self._action_chain(lane, sub) for lane, sub in zip(self.envs, self._subs, strict=True)]
        lane = self.envs[0]
        super().__init__(len(self.envs), lane.observation_space, lane.action_space)
        self.keys, shapes, dtypes = obs_space_info(lane.observation_space)
        self.buf_obs = OrderedDict(
            [(k, np.zeros((self.num_envs, *tuple(shapes[k])), dtype=dtypes[k])) for k in self.keys]
        )
        self.buf_dones = np.zeros((self.num_envs,), dtype=bool)
        self.buf_rews = np.zeros((self.num_envs,), dtype=np.float32)
        self.buf_infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        self.metadata = lane.metadata
        self.actions: np.ndarray | None = None

    @staticmethod
    def _action_chain(lane: gymnasium.Env, sub: gymnasium.Env) -> list[gymnasium.ActionWrapper]:
        chain, env = [], lane
        while env is not sub:
            if isinstance(env, gymnasium.ActionWrapper):
                chain.append(env)
            inner = getattr(env, "env", None)
            if inner is None:
                raise ValueError("a lane must be a wrapper chain around its vector sub-env (wrap(sub, i) wraps sub)")
            env = inner
        return chain

    def _env_action(self, i: int, action: np.ndarray) -> Any:
        """Lane ``i``'s action as its sub-env receives it (the lane's action wrappers, outside in)."""
        for wrapper in self._action_wrappers[i]:
            action = wrapper.action(action)
        return action

    # -- VecEnv API --------------------------------------------------------------------------
    def step_async(self, actions: np.ndarray) -> None:
        self.actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        if self.actions is None:
            raise RuntimeError("step_wait() without step_async(actions)")
        actions, self.actions = self.actions, None
        if self.batched:
            # all sub-envs' steps in one batched pass; each lane then reads its own result
            results = self.vec.step_some({i: self._env_action(i, actions[i]) for i in range(self.num_envs)})
            for i, sub in enumerate(self._subs):
                sub.ready = results[i]  # an exception is re-raised by the sub-env's step, in this thread
        try:
            # DummyVecEnv.step_wait, line for line
            for env_idx in range(self.num_envs):
                obs, self.buf_rews[env_idx], terminated, truncated, self.buf_infos[env_idx] = self.envs[env_idx].step(
                    actions[env_idx]
                )
                self.buf_dones[env_idx] = terminated or truncated
                self.buf_infos[env_idx]["TimeLimit.truncated"] = truncated and not terminated
                if self.buf_dones[env_idx]:
                    self.buf_infos[env_idx]["terminal_observation"] = obs
                    obs, self.reset_infos[env_idx] = self.envs[env_idx].reset()
                self._save_obs(env_idx, obs)
        finally:
            if self.batched:  # a lane that raised leaves the others' results unread: drop them
                for sub in self._subs:
                    sub.ready = None
        return self._obs_from_buf(), np.copy(self.buf_rews), np.copy(self.buf_dones), deepcopy(self.buf_infos)

    def reset(self) -> VecEnvObs:
        for env_idx in range(self.num_envs):
            maybe_options = {"options": self._options[env_idx]} if self._options[env_idx] else {}
            obs, self.reset_infos[env_idx] = self.envs[env_idx].reset(seed=self._seeds[env_idx], **maybe_options)
            self._save_obs(env_idx, obs)
        # seeds and options are used once (SB3's VecEnv.seed / set_options semantics)
        self._reset_seeds()
        self._reset_options()
        return self._obs_from_buf()

    def close(self) -> None:
        self.vec.close()  # closes every sub-env (the lanes' innermost envs) and the vector env's threads

    def get_images(self) -> Sequence[np.ndarray | None]:
        if self.render_mode != "rgb_array":
            return [None for _ in self.envs]
        return [env.render() for env in self.envs]

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return [env.get_wrapper_attr(attr_name) for env in self._get_target_envs(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        for env in self._get_target_envs(indices):
            setattr(env, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list[Any]:
        return [
            env.get_wrapper_attr(method_name)(*method_args, **method_kwargs) for env in self._get_target_envs(indices)
        ]

    def env_is_wrapped(self, wrapper_class: type[gymnasium.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        from stable_baselines3.common import env_util

        return [env_util.is_wrapped(env, wrapper_class) for env in self._get_target_envs(indices)]

    # -- buffers (as DummyVecEnv's) -----------------------------------------------------------
    def _get_target_envs(self, indices: VecEnvIndices) -> list[gymnasium.Env]:
        return [self.envs[i] for i in self._get_indices(indices)]

    def _save_obs(self, env_idx: int, obs: VecEnvObs) -> None:
        for key in self.keys:
            if key is None:
                self.buf_obs[key][env_idx] = obs
            else:
                self.buf_obs[key][env_idx] = obs[key]

    def _obs_from_buf(self) -> VecEnvObs:
        return dict_to_obs(self.observation_space, deepcopy(self.buf_obs))


def task_seeds(seed: int | Sequence[int | Sequence[int]], n_envs: int) -> list[int | list[int]]:
    """The task-drawing seed of each sub-env: ``seed * 1000 + i`` for an int (``finetune_ppo``'s
    per-env seeds), or the sequence itself (one ``make_training_env`` seed per sub-env: an int, or
    a list of ints as a resumed run gives, ``[seed * 1000 + i, update]``)."""
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return [int(seed) * TASK_SEED_STRIDE + i for i in range(n_envs)]
    seeds = [int(s) if isinstance(s, (int, np.integer)) else [int(v) for v in s] for s in seed]
    if len(seeds) != n_envs:
        raise ValueError(f"seed must be an int or {n_envs} ints (one per sub-env), got {len(seeds)}")
    return seeds


def make_sb3_vec_env(
    env_id: str,
    n_envs: int,
    *,
    image_size: Sequence[int],
    frame_stack: int,
    tasks: Sequence[str] | None,
    seed: int | Sequence[int],
    env_kwargs: Mapping[str, Any] | None = None,
) -> KosmosVecEnv:
    """``n_envs`` PPO envs as one batched SB3 ``VecEnv``: ``DummyVecEnv`` of
    :func:`~kosmos_env.training.training_envs.make_training_env` envs, stepped as one batch.

    The arguments are ``make_training_env``'s: the world renders at ``image_size`` unless
    ``env_kwargs`` (``gymnasium.make`` keywords: spec overrides such as ``horizon=``, ``reward=``)
    says otherwise; each reset draws one of ``tasks`` (None: all of the suite's) from the sub-env's
    own generator; ``frame_stack`` as in ``wrap_rl_env``. ``seed``: an int gives sub-env ``i`` the
    task seed ``seed * 1000 + i``, as ``finetune_ppo(seed=seed)`` seeds its env ``i``; a sequence
    gives each sub-env its own (``make_training_env``'s ``seed``). Episode layouts follow SB3's own
    seeding (``VecEnv.seed``, which ``PPO(seed=...)`` calls), as with ``DummyVecEnv``.
    An unknown task raises ``ValueError`` (the envs are closed first).
    """
    import kosmos_env  # noqa: F401  (registers the env ids)
    from kosmos_env.training.training_envs import _task_sampler_class
    from kosmos_env.wrappers import wrap_rl_env

    n = int(n_envs)
    if n < 1:
        raise ValueError(f"n_envs must be >= 1, got {n_envs}")
    seeds = task_seeds(seed, n)
    size = tuple(int(v) for v in image_size)
    kwargs = dict(env_kwargs or {})
    kwargs.setdefault("image_size", size)  # as make_training_env: the world renders at the network's size
    vec = gymnasium.make_vec(env_id, num_envs=n, vectorization_mode="vector_entry_point", **kwargs)
    try:
        known = list(vec.envs[0].unwrapped.task_names)
        names = list(tasks) if tasks else known
        unknown = [t for t in names if t not in known]
        if unknown:
            raise ValueError(f"unknown task(s) {unknown} for {env_id}; tasks: {known}")
        sampler = _task_sampler_class()
        return KosmosVecEnv(
            vec,
            lambda sub, i: wrap_rl_env(sampler(sub, names, seeds[i]), image_size=size, frame_stack=int(frame_stack)),
        )
    except Exception:
        vec.close()
        raise
