"""Record tabletop transitions from a mix of policies, and split them by episode seed.

Every episode of every (policy, task, seed) in the mix is run in ``Kosmos-Tabletop-v1`` at the
model resolution and stored whole: frames (T+1), actions (T), the measured gripper (T+1; the
first value is the reset state) and the simulator's per-step ground truth (T, used only to
train the vision judge). For the object-centric parts of the model the simulator also supplies
supervision it alone knows: the object's and the target's centre (T+1, 3), whether a finger
touches the object (T+1) and a segmentation of every frame (T+1, H, W; bit 1 = object, bit 2 =
target). The learned world never reads these at run time: it predicts them.
Hold-out is by seed, so no held-out layout is ever seen in training.
The file is a plain ``.npz`` of numeric arrays (loaded with ``allow_pickle=False``), with an optional
``meta`` JSON string (:func:`read_meta`: who recorded it, how). Each episode's policy is an index into
``policy_names``, whose labels are the policy specs; :func:`concatenate` merges recordings made
apart (one per policy, :mod:`kosmos_env.training.world_data`) keeping every episode's label.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

#: the policy mix of the shipped model: scripted at several skills, and uniform random
DEFAULT_POLICIES = (
    "scripted:skill=1.0",
    "scripted:skill=0.8",
    "scripted:skill=0.6",
    "scripted:skill=0.4",
    "scripted:skill=0.2",
    "scripted:skill=0.0",
    "random",
)
REFERENCE_ENV = "Kosmos-Tabletop-v1"


@dataclass
class Episodes:
    """Stacked episodes: frames (E, T+1, H, W, 3) uint8, actions (E, T, 7), gripper (E, T+1),
    success (E, T) bool, task (E,) int (index into ``task_names``), policy (E,) int, seed (E,);
    object_pos / target_pos (E, T+1, 3), contact (E, T+1) bool, masks (E, T+1, H, W) uint8."""

    frames: np.ndarray
    actions: np.ndarray
    gripper: np.ndarray
    success: np.ndarray
    task: np.ndarray
    policy: np.ndarray
    seed: np.ndarray
    task_names: list[str]
    policy_names: list[str]
    object_pos: np.ndarray
    target_pos: np.ndarray
    contact: np.ndarray
    masks: np.ndarray

    def __len__(self) -> int:
        return len(self.frames)

    def subset(self, mask: np.ndarray) -> "Episodes":
        m = np.asarray(mask, dtype=bool)
        return Episodes(
            self.frames[m],
            self.actions[m],
            self.gripper[m],
            self.success[m],
            self.task[m],
            self.policy[m],
            self.seed[m],
            list(self.task_names),
            list(self.policy_names),
            self.object_pos[m],
            self.target_pos[m],
            self.contact[m],
            self.masks[m],
        )

    def save(self, path: str | Path, meta: Mapping[str, Any] | None = None) -> None:
        """Write a plain ``.npz`` at exactly ``path``; ``meta`` (JSON-able: who recorded the episodes,
        with which settings) is stored beside the arrays as one JSON string, read by :func:`read_meta`."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        extra = {} if meta is None else {"meta": np.array(json.dumps(meta, sort_keys=True))}
        with open(path, "wb") as fh:  # a file object: numpy would append ".npz" to any other suffix
            self._savez(fh, extra)

    def _savez(self, fh, extra: Mapping[str, np.ndarray]) -> None:
        np.savez(
            fh,
            frames=self.frames,
            actions=self.actions,
            gripper=self.gripper,
            success=self.success,
            task=self.task,
            policy=self.policy,
            seed=self.seed,
            task_names=np.array(self.task_names),
            policy_names=np.array(self.policy_names),
            object_pos=self.object_pos,
            target_pos=self.target_pos,
            contact=self.contact,
            masks=self.masks,
            **extra,
        )

    @classmethod
    def load(cls, path: str | Path) -> "Episodes":
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in ("object_pos", "target_pos", "contact", "masks") if k not in z.files]
            if missing:
                raise ValueError(
                    f"{path} was recorded by an older train-world (no {', '.join(missing)}); delete it and record again"
                )
            return cls(
                z["frames"],
                z["actions"],
                z["gripper"],
                z["success"],
                z["task"],
                z["policy"],
                z["seed"],
                [str(s) for s in z["task_names"]],
                [str(s) for s in z["policy_names"]],
                z["object_pos"],
                z["target_pos"],
                z["contact"],
                z["masks"],
            )


def read_meta(path: str | Path) -> dict[str, Any] | None:
    """The JSON ``meta`` an episodes file was saved with (:meth:`Episodes.save`), or None if it has none."""
    with np.load(path, allow_pickle=False) as z:
        return json.loads(str(z["meta"])) if "meta" in z.files else None


def concatenate(parts: Sequence[Episodes]) -> Episodes:
    """One :class:`Episodes` of every part's episodes, in order, each keeping its own policy label.

    Policy labels are merged by name (a label in several parts is one policy; its episodes keep
    pointing at it) and task indices are remapped by name, so parts recorded separately merge
    whatever their own label order. Frames, horizon and image size must agree."""
    if not parts:
        raise ValueError("nothing to concatenate: no episodes")
    shapes = {p.frames.shape[1:] for p in parts}
    if len(shapes) != 1:
        raise ValueError(f"episodes of different horizons or image sizes cannot be merged: {sorted(shapes)}")
    task_names: list[str] = []
    policy_names: list[str] = []
    tasks, policies = [], []
    for p in parts:
        for name in p.task_names:
            if name not in task_names:
                task_names.append(name)
        for name in p.policy_names:
            if name not in policy_names:
                policy_names.append(name)
        task_map = np.array([task_names.index(n) for n in p.task_names], dtype=np.int64)
        policy_map = np.array([policy_names.index(n) for n in p.policy_names], dtype=np.int64)
        tasks.append(task_map[p.task] if len(p) else np.zeros(0, np.int64))
        policies.append(policy_map[p.policy] if len(p) else np.zeros(0, np.int64))

    def cat(key: str) -> np.ndarray:
        return np.concatenate([getattr(p, key) for p in parts])

    return Episodes(
        cat("frames"),
        cat("actions"),
        cat("gripper"),
        cat("success"),
        np.concatenate(tasks),
        np.concatenate(policies),
        cat("seed"),
        task_names,
        policy_names,
        cat("object_pos"),
        cat("target_pos"),
        cat("contact"),
        cat("masks"),
    )


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
            raise ValueError(
                f"task {episodes.task_names[task]!r} has {len(seeds)} distinct seed(s): "
                f"too few to split into train and held-out"
            )
        held |= in_task & np.isin(episodes.seed, seeds[-n_hold:])
    return episodes.subset(~held), episodes.subset(held)


def record(
    policies: Mapping[str, Any],
    seeds_per_task: int = 14,
    seed_offset: int = 0,
    horizon: int = 40,
    image_size: tuple[int, int] = (64, 64),
    progress: bool = True,
) -> Episodes:
    """Run every policy on every task of the reference tabletop for ``seeds_per_task`` seeds.

    ``policies`` maps a label (kept in ``Episodes.policy_names``) to a built policy; the caller
    builds them (e.g. from :data:`DEFAULT_POLICIES` with ``kosmos_env.policies.make_policy``),
    because worlds never import policies. Seeds are ``seed_offset + task_index * 1000 + i``: one
    layout per (task, seed), shared by all policies, so a seed held out is held out for every policy.
    """
    import gymnasium
    from tqdm import tqdm

    import kosmos_env  # noqa: F401  (registers the env ids)

    if seeds_per_task < 1:
        raise ValueError(f"seeds_per_task must be >= 1, got {seeds_per_task}")
    # no consistency gate: it would end an episode early, and what a policy did is data either way
    env = gymnasium.make(REFERENCE_ENV, image_size=tuple(image_size), horizon=horizon, gate={"enabled": False})
    tasks = env.unwrapped.task_names
    labels, built = list(policies), list(policies.values())
    keys = (
        "frames",
        "actions",
        "gripper",
        "success",
        "task",
        "policy",
        "seed",
        "object_pos",
        "target_pos",
        "contact",
        "masks",
    )
    rows: dict[str, list] = {k: [] for k in keys}
    jobs = [
        (p, t, seed_offset + t * 1000 + i)
        for p in range(len(built))
        for t in range(len(tasks))
        for i in range(seeds_per_task)
    ]
    try:
        for p, t, seed in tqdm(jobs, desc="recording tabletop episodes", disable=not progress):
            # the same protocol as kosmos_env.rollouts.run_episode (policy reset with the episode
            # seed), stepped here so the simulator's object state can be read after every step
            obs, _ = env.reset(seed=seed, options={"task": tasks[t]})
            built[p].reset(obs["instruction"], seed=seed)
            sim = env.unwrapped.world
            probe = [_probe(sim)]
            for _ in range(horizon):
                obs, _, terminated, truncated, _ = env.step(np.asarray(built[p].act(obs), dtype=np.float32))
                probe.append(_probe(sim))
                if terminated or truncated:
                    break
            r = env.unwrapped.rollout()
            if len(r.actions) != horizon:  # only a gate could end an episode early, and it is off
                raise RuntimeError(f"episode {labels[p]} {tasks[t]} {seed} ended after {len(r.actions)} steps")
            rows["frames"].append(r.frames)
            rows["actions"].append(r.actions.astype(np.float32))
            rows["gripper"].append(np.r_[1.0, r.log["gripper_measured"]].astype(np.float32))
            rows["success"].append(np.asarray(r.log["gt_success"], dtype=bool))
            rows["task"].append(t)
            rows["policy"].append(p)
            rows["seed"].append(seed)
            for i, key in enumerate(("object_pos", "target_pos", "contact", "masks")):
                rows[key].append(np.stack([pr[i] for pr in probe]))
    finally:
        env.close()
    per_episode = ("task", "policy", "seed")
    return Episodes(
        *(np.asarray(rows[k]) if k in per_episode else np.stack(rows[k]) for k in keys[:7]),
        task_names=list(tasks),
        policy_names=labels,
        **{k: np.stack(rows[k]) for k in keys[7:]},
    )


def _probe(sim) -> tuple[np.ndarray, np.ndarray, bool, np.ndarray]:
    """Object centre, target centre, finger contact and segmentation of the simulator's current frame."""
    model, data = sim.model, sim.data
    obj_body, target_body = model.body("object").id, model.body("target").id
    renderer = sim.renderer
    renderer.enable_segmentation_rendering()
    try:
        renderer.update_scene(data, camera="main")
        seg = renderer.render()[..., 0].copy()
    finally:
        renderer.disable_segmentation_rendering()
    body_of_geom = np.r_[model.geom_bodyid, -1]  # -1: background (geom id -1) maps to the last entry
    body = body_of_geom[seg]
    masks = (body == obj_body).astype(np.uint8) | ((body == target_body).astype(np.uint8) << 1)
    contact = bool(sim.evaluate()["released"] is False)
    return (
        data.xpos[obj_body].astype(np.float32).copy(),
        data.xpos[target_body].astype(np.float32).copy(),
        contact,
        masks,
    )
