"""A Kosmos env in the shape RLinf's env worker drives (``rlinf`` 0.3.0, ``rlinf/workers/env/env_worker.py``).

RLinf builds one env object per pipeline stage, ``env_cls(cfg=..., num_envs=...,
seed_offset=..., total_num_processes=..., worker_info=...)``, that holds ``num_envs`` copies and
answers in batched torch tensors: ``reset(env_idx=None, reset_state_ids=None) -> (obs, infos)``,
``step(actions, auto_reset=True)`` and ``chunk_step(chunk_actions)`` (``[num_envs, chunk, 7]``,
one policy call's action chunk) with rewards/terminations/truncations ``[num_envs, chunk]``, plus
``is_start``, ``elapsed_steps`` and ``update_reset_state_ids()``. Observations are RLinf's
embodied schema: ``main_images`` (uint8 ``[N, H, W, 3]``), ``states`` (float32 ``[N, D]``),
``task_descriptions`` (N strings). :class:`KosmosRLinfEnv` is that object over Kosmos envs;
it imports nothing of RLinf (the contract is duck-typed), only torch.

RLinf picks env classes from a closed enum (``rlinf.envs.SupportedEnvType`` in ``get_env_cls``
and ``prepare_actions``), so a run needs those two functions to map a new ``env_type`` to this
class with actions passed through unchanged (as RLinf does for ``robotwin``/``realworld``).
"""

from __future__ import annotations

import copy
from typing import Any, Mapping, Sequence

import gymnasium
import numpy as np

from kosmos_env.utils.obs_encoding import encode_state, resize_image
from kosmos_env.tasks import load_suite


def _cfg_get(cfg: Any, key: str, default: Any = None) -> Any:
    """A field of an OmegaConf DictConfig (RLinf's configs), a mapping or an object."""
    if cfg is None:
        return default
    if isinstance(cfg, Mapping) or hasattr(cfg, "get"):
        return cfg.get(key, default)
    return getattr(cfg, key, default)


def _plain(value: Any) -> Any:
    """Mappings and non-string sequences (OmegaConf's DictConfig/ListConfig too) as dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [_plain(v) for v in value]
    return value


class KosmosRLinfEnv:
    """``num_envs`` Kosmos envs answering RLinf's env-worker calls in batched tensors.

    ``cfg`` fields (an OmegaConf ``DictConfig`` as RLinf passes it, or a plain mapping):

    - ``env_id`` (required): a Kosmos id whose observations have the state extras
      (``Kosmos-Tabletop-v1``, ``Kosmos-TabletopLearned-v1``);
    - ``init_params``: keyword arguments of ``gymnasium.make`` (``judge``, spec overrides such as
      ``horizon``); the Kosmos env owns the horizon, RLinf's ``max_episode_steps`` is not used;
    - ``seed`` (0): env ``i`` of this worker is first reset with ``seed + seed_offset * num_envs + i``,
      later resets continue its own generator (Gymnasium's convention); a ``reset_state_ids`` entry
      ``r`` resets with seed ``seed + r`` and task ``tasks[r % len(tasks)]`` instead;
    - ``tasks``: task names env ``i`` cycles through (``tasks[i % len(tasks)]``); default the suite;
    - ``image_size``: (h, w) frames are resized to (``obs_encoding.resize_image``), else spec size;
    - ``auto_reset`` (True) and ``ignore_terminations`` (False): as in RLinf's own envs.

    Observations: ``main_images`` ``torch.uint8 [N, h, w, 3]``; ``states`` ``torch.float32 [N, 7]``
    (``obs_encoding.encode_state``: ee_pos, ee_euler, gripper); ``task_descriptions``: the N
    instructions. Actions: ``[N, 7]`` (``[N, chunk, 7]`` for ``chunk_step``) in the env's own
    units, clipped to its bounds (RLinf's policies sample unbounded Gaussians; the Kosmos env
    refuses out-of-bounds actions). Rewards: the judge's score on an episode's last step, else 0.
    Terminations: the consistency gate discarded the episode; truncations: the horizon.
    ``infos["episode"]``: ``success_once`` (the judge said success), ``return``, ``episode_len``,
    ``reward`` (return / length), each a tensor ``[N]``. With auto-reset, a finished env is reset
    and ``infos`` carries ``final_observation``, ``final_info`` and the ``_final_*`` masks.
    An env whose episode ended inside a chunk is not stepped again in that chunk: it repeats its
    last observation with reward 0 (a Kosmos episode cannot be stepped once it is over).
    """

    def __init__(
        self, cfg: Any, num_envs: int, seed_offset: int = 0, total_num_processes: int = 1, worker_info: Any = None
    ):
        import torch  # noqa: F401  (fail here, not mid-rollout, when torch is missing)

        env_id = _cfg_get(cfg, "env_id")
        if not env_id:
            raise ValueError("KosmosRLinfEnv needs cfg.env_id, a Kosmos env id such as 'Kosmos-Tabletop-v1'")
        if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
            raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
        self.cfg = cfg
        self.num_envs = num_envs
        self.seed_offset = int(seed_offset)
        self.total_num_processes = int(total_num_processes)
        self.worker_info = worker_info
        self.auto_reset = bool(_cfg_get(cfg, "auto_reset", True))
        self.ignore_terminations = bool(_cfg_get(cfg, "ignore_terminations", False))
        self.seed = int(_cfg_get(cfg, "seed", 0))
        size = _cfg_get(cfg, "image_size")
        self.image_size = None if size is None else (int(size[0]), int(size[1]))
        # OmegaConf containers (what RLinf passes) become plain dicts/lists: the spec checks types
        init_params = _plain(_cfg_get(cfg, "init_params", None) or {})

        self.envs = [gymnasium.make(env_id, **init_params) for _ in range(num_envs)]
        base = self.envs[0].unwrapped
        missing = [k for k in ("ee_pos", "ee_euler", "gripper") if k not in base.observation_space.spaces]
        if missing:
            self.close()
            raise ValueError(
                f"{env_id} observations have no {missing}; RLinf's 'states' needs the tabletop worlds' extras"
            )
        suite = load_suite(base.kosmos_spec.tasks["suite"])
        self.task_names: tuple[str, ...] = tuple(base.task_names)
        self.instructions = {name: suite.tasks[name].instruction for name in self.task_names}
        tasks = [str(t) for t in (_cfg_get(cfg, "tasks", None) or self.task_names)]
        unknown = [t for t in tasks if t not in self.instructions]
        if unknown:
            self.close()
            raise ValueError(f"unknown task(s) {unknown} for {env_id}; tasks: {list(self.task_names)}")
        self.tasks = tasks
        space = base.action_space
        self._low, self._high = np.asarray(space.low, np.float32), np.asarray(space.high, np.float32)

        self._is_start = True
        self._seeded = [False] * num_envs
        self._over = np.zeros(num_envs, dtype=bool)
        self._elapsed_steps = np.zeros(num_envs, dtype=np.int32)
        self._returns = np.zeros(num_envs, dtype=np.float32)
        self._success_once = np.zeros(num_envs, dtype=bool)
        self._last_raw: list[dict[str, Any] | None] = [None] * num_envs

    # -- RLinf's attributes ---------------------------------------------------------------
    @property
    def is_start(self) -> bool:
        return self._is_start

    @is_start.setter
    def is_start(self, value: bool) -> None:
        self._is_start = bool(value)

    @property
    def elapsed_steps(self) -> np.ndarray:
        return self._elapsed_steps

    @property
    def info_logging_keys(self) -> list[str]:
        return []

    def update_reset_state_ids(self) -> None:
        """RLinf calls this after each rollout epoch to draw new reset states; here every env's
        next episode already comes from its own generator (or from explicit ``reset_state_ids``)."""

    # -- episodes -------------------------------------------------------------------------
    def reset(self, env_idx: int | Sequence[int] | np.ndarray | None = None, reset_state_ids: Any = None):
        idx = np.arange(self.num_envs) if env_idx is None else np.atleast_1d(np.asarray(env_idx, dtype=np.int64))
        states = None if reset_state_ids is None else np.atleast_1d(np.asarray(reset_state_ids, dtype=np.int64))
        if states is not None and len(states) != len(idx):
            raise ValueError(f"reset_state_ids has {len(states)} entries for {len(idx)} envs")
        for j, i in enumerate(idx):
            i = int(i)
            if states is not None:
                seed, task = self.seed + int(states[j]), self.tasks[int(states[j]) % len(self.tasks)]
            else:
                task = self.tasks[i % len(self.tasks)]
                # first reset of env i: a seed of its own across all workers; later: its generator
                seed = None if self._seeded[i] else self.seed + self.seed_offset * self.num_envs + i
            obs, _ = self.envs[i].reset(seed=seed, options={"task": task})
            self._seeded[i] = True
            self._last_raw[i] = obs
            self._over[i] = False
            self._elapsed_steps[i] = 0
            self._returns[i] = 0.0
            self._success_once[i] = False
        return self._observation(), {}

    def step(self, actions: Any, auto_reset: bool = True):
        import torch

        if any(o is None for o in self._last_raw):
            raise RuntimeError("step() before reset(): RLinf's worker resets every env first; call reset()")
        actions = actions.detach().cpu().numpy() if isinstance(actions, torch.Tensor) else np.asarray(actions)
        actions = np.clip(actions.astype(np.float32).reshape(self.num_envs, -1), self._low, self._high)
        rewards = np.zeros(self.num_envs, dtype=np.float32)
        terminations = np.zeros(self.num_envs, dtype=bool)
        truncations = np.zeros(self.num_envs, dtype=bool)
        for i, env in enumerate(self.envs):
            if self._over[i]:
                continue  # ended earlier in this chunk: a Kosmos episode cannot be stepped past its end
            obs, reward, term, trunc, info = env.step(actions[i])
            self._last_raw[i] = obs
            self._elapsed_steps[i] += 1
            rewards[i] = float(reward)
            self._returns[i] += float(reward)
            terminations[i], truncations[i] = bool(term), bool(trunc)
            if term or trunc:
                self._over[i] = True
                judgment = info.get("judgment") or {}
                self._success_once[i] |= judgment.get("success") is True
        infos: dict[str, Any] = {"episode": self._episode_info()}
        if self.ignore_terminations:
            infos["episode"]["success_at_end"] = torch.as_tensor(self._success_once.copy())
            terminations[:] = False
        obs = self._observation()
        dones = terminations | truncations
        if auto_reset and self.auto_reset and dones.any():
            obs, infos = self._auto_reset(dones, obs, infos)
        return obs, torch.as_tensor(rewards), torch.as_tensor(terminations), torch.as_tensor(truncations), infos

    def chunk_step(self, chunk_actions: Any):
        import torch

        chunk = chunk_actions.shape[1]
        obs_list, infos_list, rewards, terms, truncs = [], [], [], [], []
        for c in range(chunk):
            obs, reward, term, trunc, infos = self.step(chunk_actions[:, c], auto_reset=False)
            obs_list.append(obs)
            infos_list.append(infos)
            rewards.append(reward)
            terms.append(term)
            truncs.append(trunc)
        rewards_t, terms_t, truncs_t = (
            torch.stack(rewards, dim=1),
            torch.stack(terms, dim=1),
            torch.stack(truncs, dim=1),
        )
        past_term, past_trunc = terms_t.any(dim=1), truncs_t.any(dim=1)
        past_done = past_term | past_trunc
        if self.auto_reset and past_done.any():
            obs_list[-1], infos_list[-1] = self._auto_reset(past_done.numpy(), obs_list[-1], infos_list[-1])
        if self.auto_reset or self.ignore_terminations:
            # RLinf's convention: with auto-reset, a chunk reports an episode's end on its last column
            terms_t, truncs_t = torch.zeros_like(terms_t), torch.zeros_like(truncs_t)
            terms_t[:, -1], truncs_t[:, -1] = past_term, past_trunc
        return obs_list, rewards_t, terms_t, truncs_t, infos_list

    def close(self) -> None:
        for env in getattr(self, "envs", []):
            env.close()

    # -- helpers ----------------------------------------------------------------------------
    def _auto_reset(self, dones: np.ndarray, final_obs: dict[str, Any], infos: dict[str, Any]):
        import torch

        final_obs, final_info = copy.deepcopy(final_obs), copy.deepcopy(infos)
        obs, infos = self.reset(env_idx=np.flatnonzero(dones))
        mask = torch.as_tensor(np.asarray(dones, dtype=bool))
        infos.update(
            {
                "final_observation": final_obs,
                "final_info": final_info,
                "_final_observation": mask,
                "_final_info": mask,
                "_elapsed_steps": mask,
            }
        )
        return obs, infos

    def _episode_info(self) -> dict[str, Any]:
        import torch

        steps = self._elapsed_steps.copy()
        return {
            "success_once": torch.as_tensor(self._success_once.copy()),
            "return": torch.as_tensor(self._returns.copy()),
            "episode_len": torch.as_tensor(steps),
            "reward": torch.as_tensor(self._returns / np.maximum(steps, 1)),
        }

    def _observation(self) -> dict[str, Any]:
        import torch

        raw = self._last_raw
        images = np.stack([resize_image(o["image"], self.image_size) for o in raw])
        states = np.stack([encode_state(o) for o in raw])
        return {
            "main_images": torch.from_numpy(np.ascontiguousarray(images)),
            "states": torch.from_numpy(states),
            "task_descriptions": [str(o["instruction"]) for o in raw],
        }
