"""Record tabletop transitions from a mix of policies, and split them by episode seed.

Every episode of every (policy, task, seed) in the mix is run in ``Kosmos-Tabletop-v1`` at the
model resolution and stored whole: frames (T+1), actions (T), the measured gripper (T+1; the
first value is the reset state) and the simulator's per-step ground truth (T, used only to
train the vision judge). Hold-out is by seed, so no held-out layout is ever seen in training.
The file is a plain ``.npz`` of numeric arrays (loaded with ``allow_pickle=False``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

#: the policy mix of the shipped model: scripted at several skills, and uniform random
DEFAULT_POLICIES = ("scripted:skill=1.0", "scripted:skill=0.8", "scripted:skill=0.6", "scripted:skill=0.4",
                    "scripted:skill=0.2", "scripted:skill=0.0", "random")
REFERENCE_ENV = "Kosmos-Tabletop-v1"


@dataclass
class Episodes:
    """Stacked episodes: frames (E, T+1, H, W, 3) uint8, actions (E, T, 7), gripper (E, T+1),
    success (E, T) bool, task (E,) int (index into ``task_names``), policy (E,) int, seed (E,)."""

    frames: np.ndarray
    actions: np.ndarray
    gripper: np.ndarray
    success: np.ndarray
    task: np.ndarray
    policy: np.ndarray
    seed: np.ndarray
    task_names: list[str]
    policy_names: list[str]

    def __len__(self) -> int:
        return len(self.frames)

    def subset(self, mask: np.ndarray) -> "Episodes":
        m = np.asarray(mask, dtype=bool)
        return Episodes(self.frames[m], self.actions[m], self.gripper[m], self.success[m], self.task[m],
                        self.policy[m], self.seed[m], list(self.task_names), list(self.policy_names))

    def save(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, frames=self.frames, actions=self.actions, gripper=self.gripper, success=self.success,
                 task=self.task, policy=self.policy, seed=self.seed,
                 task_names=np.array(self.task_names), policy_names=np.array(self.policy_names))

    @classmethod
    def load(cls, path: str | Path) -> "Episodes":
        with np.load(path, allow_pickle=False) as z:
            return cls(z["frames"], z["actions"], z["gripper"], z["success"], z["task"], z["policy"], z["seed"],
                       [str(s) for s in z["task_names"]], [str(s) for s in z["policy_names"]])


def split_by_seed(episodes: Episodes, holdout_fraction: float = 0.15) -> tuple[Episodes, Episodes]:
    """(train, held-out): within every task, the highest ``holdout_fraction`` of its distinct seeds
    are held out whole (every policy's episode on those layouts), so each task is evaluated."""
    if not 0.0 < holdout_fraction < 1.0:
        raise ValueError(f"holdout_fraction must be in (0, 1), got {holdout_fraction}")
    held = np.zeros(len(episodes), dtype=bool)
    for task in np.unique(episodes.task):
        in_task = episodes.task == task
        seeds = np.unique(episodes.seed[in_task])
        n_hold = max(1, int(round(len(seeds) * holdout_fraction)))
        if n_hold >= len(seeds):
            raise ValueError(f"task {episodes.task_names[task]!r} has {len(seeds)} distinct seed(s): "
                             f"too few to split into train and held-out")
        held |= in_task & np.isin(episodes.seed, seeds[-n_hold:])
    return episodes.subset(~held), episodes.subset(held)


def record(policies: Mapping[str, Any], seeds_per_task: int = 14, seed_offset: int = 0, horizon: int = 40,
           image_size: tuple[int, int] = (64, 64), progress: bool = True) -> Episodes:
    """Run every policy on every task of the reference tabletop for ``seeds_per_task`` seeds.

    ``policies`` maps a label (kept in ``Episodes.policy_names``) to a built policy; the caller
    builds them (e.g. from :data:`DEFAULT_POLICIES` with ``kosmos_env.policies.make_policy``),
    because worlds never import policies. Seeds are ``seed_offset + task_index * 1000 + i``: one
    layout per (task, seed), shared by all policies, so a seed held out is held out for every policy.
    """
    import gymnasium
    from tqdm import tqdm

    import kosmos_env  # noqa: F401  (registers the env ids)
    from kosmos_env.rollouts import run_episode

    if seeds_per_task < 1:
        raise ValueError(f"seeds_per_task must be >= 1, got {seeds_per_task}")
    env = gymnasium.make(REFERENCE_ENV, image_size=tuple(image_size), horizon=horizon)
    tasks = env.unwrapped.task_names
    labels, built = list(policies), list(policies.values())
    rows: dict[str, list] = {k: [] for k in ("frames", "actions", "gripper", "success", "task", "policy", "seed")}
    jobs = [(p, t, seed_offset + t * 1000 + i) for p in range(len(built)) for t in range(len(tasks))
            for i in range(seeds_per_task)]
    try:
        for p, t, seed in tqdm(jobs, desc="recording tabletop episodes", disable=not progress):
            result = run_episode(env, built[p], seed=seed, task=tasks[t])
            r = result.rollout
            if len(r.actions) != horizon:  # only a gate could end an episode early; the tabletop has none
                raise RuntimeError(f"episode {labels[p]} {tasks[t]} {seed} ended after {len(r.actions)} steps")
            rows["frames"].append(r.frames)
            rows["actions"].append(r.actions.astype(np.float32))
            rows["gripper"].append(np.r_[1.0, r.log["gripper_measured"]].astype(np.float32))
            rows["success"].append(np.asarray(r.log["gt_success"], dtype=bool))
            rows["task"].append(t)
            rows["policy"].append(p)
            rows["seed"].append(seed)
    finally:
        env.close()
    return Episodes(*(np.stack(rows[k]) if k in ("frames", "actions", "gripper", "success") else np.asarray(rows[k])
                      for k in ("frames", "actions", "gripper", "success", "task", "policy", "seed")),
                    task_names=list(tasks), policy_names=labels)
