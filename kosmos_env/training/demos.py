"""Demonstrations: episodes of a (weak) scripted policy, encoded as the RL wrapper encodes them.

Each step keeps the un-stacked encoding of ``kosmos_env.wrappers`` (``image`` uint8 at the
network's size, ``state`` float32 (7,), the task's index in the instruction list) and the action
rescaled to [-1, 1] as ``RescaleAction`` sees it; frames are stacked at training time
(:func:`stacked_inputs`), the way the wrapper stacks them. Files are ``.npz`` with the metadata as
a JSON string, read back without pickle.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from kosmos_env.policies.checkpoint import FrameStacker, encode_observation, jsonable, rescale_action

DEMO_FORMAT = "kosmos-policy-demos"
#: the simulator at the network's frame size (rendered at 64 px, not resized from 128)
DEFAULT_DEMO_ENV = "Kosmos-Tabletop-v1"
DEFAULT_DEMO_KWARGS: dict[str, Any] = {"image_size": (64, 64)}


@dataclass
class Demos:
    """Steps of recorded episodes, flat, with ``episode``/``step`` indices to rebuild stacks."""

    image: np.ndarray  # (N, H, W, 3) uint8
    state: np.ndarray  # (N, 7) float32
    task: np.ndarray  # (N,) int64: index into meta["instructions"]
    action: np.ndarray  # (N, 7) float32 in [-1, 1]
    episode: np.ndarray  # (N,) int64
    step: np.ndarray  # (N,) int64
    success: np.ndarray  # (n_episodes,) int8: 1 success, 0 failure, -1 no verdict (discarded, abstained)
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.action.shape[0])

    @property
    def n_episodes(self) -> int:
        return int(self.success.shape[0])

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fh:  # a file object: numpy would otherwise append ".npz" to another suffix
            np.savez_compressed(
                fh,
                image=self.image,
                state=self.state,
                task=self.task,
                action=self.action,
                episode=self.episode,
                step=self.step,
                success=self.success,
                meta=np.array(json.dumps({"format": DEMO_FORMAT, **self.meta}, sort_keys=True)),
            )
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Demos":
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"demonstrations {path}: no such file")
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {k: data[k] for k in data.files}
        except Exception as exc:  # zip or npy errors of a file that is not ours
            raise ValueError(f"demonstrations {path}: not a demonstrations .npz ({type(exc).__name__})") from None
        need = ("image", "state", "task", "action", "episode", "step", "success", "meta")
        missing = [k for k in need if k not in arrays]
        if missing:
            raise ValueError(f"demonstrations {path}: lacks {missing}")
        meta = json.loads(str(arrays.pop("meta")))
        if meta.pop("format", None) != DEMO_FORMAT:
            raise ValueError(f"demonstrations {path}: not a Kosmos demonstrations file")
        return cls(**arrays, meta=meta)

    def select_episodes(self, keep: np.ndarray) -> "Demos":
        """The steps of the episodes where ``keep[episode]`` is true (episode numbers kept)."""
        rows = np.asarray(keep, bool)[self.episode]
        return Demos(
            self.image[rows],
            self.state[rows],
            self.task[rows],
            self.action[rows],
            self.episode[rows],
            self.step[rows],
            self.success,
            dict(self.meta),
        )


def record_demos(
    env_id: str = DEFAULT_DEMO_ENV,
    *,
    policy: str = "scripted:skill=0.5",
    seeds_per_task: int = 8,
    seed_start: int = 0,
    tasks: Sequence[str] | None = None,
    image_size: Sequence[int] = (64, 64),
    env_kwargs: Mapping[str, Any] | None = None,
    out: str | Path | None = None,
    progress: bool = True,
) -> Demos:
    """Record ``tasks x seeds_per_task`` episodes of ``policy`` (CLI form, e.g. ``scripted:skill=0.5``).

    Seeds run ``seed_start .. seed_start + seeds_per_task - 1`` for every task; the policy is
    reset with the episode's seed, so a recording is reproducible. ``env_kwargs`` go to
    ``gymnasium.make`` (default for the simulator: rendered at ``image_size``); frames are resized
    to ``image_size`` as the wrapper's ``image_size`` resizes them. Written to ``out`` when given.
    """
    import gymnasium
    from tqdm.auto import tqdm

    import kosmos_env  # noqa: F401  (registers the env ids)
    from kosmos_env.policies import make_policy, parse_policy_arg
    from kosmos_env.tasks import load_suite

    if seeds_per_task < 1:
        raise ValueError(f"seeds_per_task must be >= 1, got {seeds_per_task}")
    kwargs = dict(DEFAULT_DEMO_KWARGS if env_kwargs is None and env_id == DEFAULT_DEMO_ENV else env_kwargs or {})
    name, pkw = parse_policy_arg(policy)
    pol = make_policy(name, **pkw)
    env = gymnasium.make(env_id, **kwargs)
    try:
        base = env.unwrapped
        suite = load_suite(base.kosmos_spec.tasks["suite"])
        # the wrapper's vocabulary: the suite's instructions in the env's task order
        instructions = [suite.tasks[t].instruction for t in base.task_names]
        tasks = list(tasks) if tasks else list(base.task_names)
        unknown = [t for t in tasks if t not in base.task_names]
        if unknown:
            raise ValueError(f"unknown task(s) {unknown} for {env_id}; tasks: {base.task_names}")
        low, high = env.action_space.low, env.action_space.high
        cols: dict[str, list] = {k: [] for k in ("image", "state", "task", "action", "episode", "step")}
        success, episodes = [], []
        size = tuple(int(v) for v in image_size)
        bar = tqdm(total=len(tasks) * seeds_per_task, desc=f"demos {policy}", unit="ep", disable=not progress)
        for task in tasks:
            for seed in range(seed_start, seed_start + seeds_per_task):
                obs, _ = env.reset(seed=seed, options={"task": task})
                pol.reset(obs["instruction"], seed=seed)
                ep = len(episodes)
                done, t, info = False, 0, {}
                while not done:
                    enc = encode_observation(obs, instructions, size)
                    action = np.asarray(pol.act(obs), np.float32)
                    cols["image"].append(enc["image"])
                    cols["state"].append(enc["state"])
                    cols["task"].append(int(np.argmax(enc["task"])))
                    cols["action"].append(rescale_action(action, low, high))
                    cols["episode"].append(ep)
                    cols["step"].append(t)
                    obs, _, terminated, truncated, info = env.step(action)
                    done, t = terminated or truncated, t + 1
                success.append(episode_success(info))
                episodes.append({"task": task, "seed": seed, "steps": t, "outcome": info.get("outcome")})
                bar.update(1)
                bar.set_postfix(success=f"{np.mean([s == 1 for s in success]):.2f}")
        bar.close()
        meta = {
            "env_id": env_id,
            "spec_hash": base.spec_hash,
            # a world object passed in (a wrapped world, say) is recorded by what it is, never serialised
            "env_kwargs": jsonable({k: repr(v) if k == "world_model" else v for k, v in kwargs.items()}),
            "policy": policy,
            "instructions": instructions,
            "image_size": list(size),
            "action_low": low.tolist(),
            "action_high": high.tolist(),
            "seed_start": seed_start,
            "seeds_per_task": seeds_per_task,
            "episodes": episodes,
        }
    finally:
        env.close()
    demos = Demos(
        image=np.stack(cols["image"]).astype(np.uint8),
        state=np.stack(cols["state"]).astype(np.float32),
        task=np.asarray(cols["task"], np.int64),
        action=np.stack(cols["action"]).astype(np.float32),
        episode=np.asarray(cols["episode"], np.int64),
        step=np.asarray(cols["step"], np.int64),
        success=np.asarray(success, np.int8),
        meta=meta,
    )
    if out is not None:
        demos.save(out)
    return demos


def episode_success(info: Mapping[str, Any]) -> int:
    """1 / 0 from a finished episode's last ``info`` (the judge's verdict, or a termination on
    success), -1 when there is none (discarded by the gate, judge abstained or deferred)."""
    if info.get("terminated_by") == "success":
        return 1
    judgment = info.get("judgment")
    if isinstance(judgment, Mapping) and judgment.get("success") is not None and judgment.get("success") != "pending":
        return int(bool(judgment["success"]))
    return -1


def stacked_inputs(demos: Demos, frame_stack: int) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, H, W, 3k) and states (N, 7k) stacked as the wrapper stacks them (oldest first,
    an episode's first observation repeated before it)."""
    if frame_stack == 1:
        return demos.image, demos.state
    images = np.empty((*demos.image.shape[:3], 3 * frame_stack), np.uint8)
    states = np.empty((len(demos), demos.state.shape[1] * frame_stack), np.float32)
    stacker = FrameStacker(frame_stack)
    for i in range(len(demos)):
        if demos.step[i] == 0:
            stacker.clear()
        images[i], states[i] = stacker.push(demos.image[i], demos.state[i])
    return images, states
