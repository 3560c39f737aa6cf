"""The vision judge for generated frames: a small frame classifier trained on simulator frames.

A learned world has no simulator state to ask, so its rollouts are judged from pixels. This
judge is a small CNN that looks at a frame (64×64 RGB) and the task, and says whether the task
is solved in it. It is trained only on *simulator* frames labelled by the simulator's ground
truth (``gt_success`` after each step of the recorded training episodes), then applied to frames
the learned world generated: exactly the situation of any vision judge (a VLM included) scoring
video from a world model it was never trained on. The study reports how much of the ranking
error comes from this judge (apply it to simulator frames too) and how much from the world.

The verdict for a rollout is the classifier's probability on its last frame (``score``) and
``success = score >= threshold``; it never abstains. The same probability, read on each chunk's last
frame, is what it offers as a progress judge (:meth:`FrameVisionJudge.score_progress`).
"""

from __future__ import annotations

import json
import time
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from kosmos_env.judges.base import Judgment, ProgressScore, Rollout, progress_first_frames

TASKS = ("spoon_on_towel", "carrot_on_plate", "stack_green_on_yellow", "eggplant_in_basket")  # = objects.TASKS


def shipped_classifier_path() -> Path:
    return Path(str(resources.files("kosmos_env.worlds.tabletop_learned") / "weights" / "vision_judge.safetensors"))


def _build(n_tasks: int = len(TASKS), width: int = 16):
    import torch
    from torch import nn

    class FrameClassifier(nn.Module):
        """conv stack → pooled features ⊕ task embedding → logit of "task solved in this frame"."""

        def __init__(self):
            super().__init__()
            c = width
            self.features = nn.Sequential(
                nn.Conv2d(3, c, 3, padding=1),
                nn.SiLU(),
                nn.MaxPool2d(2),
                nn.Conv2d(c, 2 * c, 3, padding=1),
                nn.SiLU(),
                nn.MaxPool2d(2),
                nn.Conv2d(2 * c, 2 * c, 3, padding=1),
                nn.SiLU(),
                nn.MaxPool2d(2),
                nn.Conv2d(2 * c, 4 * c, 3, padding=1),
                nn.SiLU(),
                nn.AdaptiveMaxPool2d(1),
            )
            self.task = nn.Embedding(n_tasks, 4 * c)
            self.head = nn.Sequential(nn.Linear(8 * c, 4 * c), nn.SiLU(), nn.Linear(4 * c, 1))

        def forward(self, images: "torch.Tensor", task: "torch.Tensor") -> "torch.Tensor":
            f = self.features(images).flatten(1)
            return self.head(torch.cat([f, self.task(task)], dim=1)).squeeze(1)

    return FrameClassifier()


def _images(frames: np.ndarray):
    import torch

    return torch.from_numpy(np.ascontiguousarray(frames)).float().div_(255.0).movedim(-1, -3)


def _pool(episodes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(episode, step) index pairs of every post-action frame, and labels."""
    e, t = np.nonzero(np.ones(episodes.success.shape, dtype=bool))
    return e, t, episodes.success[e, t].astype(np.float32)


def train_classifier(
    train_eps, held_eps, steps: int = 600, batch: int = 64, seed: int = 0, lr: float = 2e-3, progress: bool = True
):
    """Train on every post-action frame of ``train_eps`` (balanced batches); evaluate on ``held_eps``."""
    import torch
    from tqdm import tqdm

    torch.set_num_threads(2)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = _build()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    e, t, y = _pool(train_eps)
    pos, neg = np.nonzero(y > 0.5)[0], np.nonzero(y < 0.5)[0]
    if len(pos) == 0 or len(neg) == 0:
        raise ValueError("the vision judge needs both successful and failed frames in the training episodes")
    model.train()
    for _ in tqdm(range(steps), desc="training vision judge", disable=not progress):
        pick = np.r_[rng.choice(pos, batch // 2), rng.choice(neg, batch - batch // 2)]
        frames = train_eps.frames[e[pick], t[pick] + 1]
        if rng.random() < 0.5:  # light colour jitter: generated frames are a little off in colour
            frames = np.clip(frames.astype(np.float32) * rng.uniform(0.9, 1.1), 0, 255).astype(np.uint8)
        logits = model(_images(frames), torch.from_numpy(train_eps.task[e[pick]]).long())
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.from_numpy(y[pick]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval()
    return model, evaluate_classifier(model, held_eps)


def predict(model, frames: np.ndarray, tasks: Sequence[int]) -> np.ndarray:
    """Probability of success for each frame (N, H, W, 3) with its task index."""
    import torch

    out = []
    with torch.no_grad():
        for i in range(0, len(frames), 256):
            logits = model(
                _images(frames[i : i + 256]), torch.as_tensor(np.asarray(tasks[i : i + 256]), dtype=torch.long)
            )
            out.append(torch.sigmoid(logits).numpy())
    return np.concatenate(out) if out else np.zeros(0, np.float32)


def evaluate_classifier(model, episodes) -> dict[str, float]:
    """Frame accuracy, and episode accuracy on final frames, on (held-out) simulator episodes."""
    e, t, y = _pool(episodes)
    p = predict(model, episodes.frames[e, t + 1], episodes.task[e])
    final = predict(model, episodes.frames[:, -1], episodes.task)
    yf = episodes.success[:, -1]
    return {
        "frame_accuracy": round(float(((p >= 0.5) == (y > 0.5)).mean()), 4),
        "final_frame_accuracy": round(float(((final >= 0.5) == yf).mean()), 4),
        "final_true_positive_rate": round(float((final[yf] >= 0.5).mean()), 4) if yf.any() else None,
        "final_true_negative_rate": round(float((final[~yf] < 0.5).mean()), 4) if (~yf).any() else None,
        "n_frames": int(len(y)),
        "n_episodes": int(len(episodes)),
    }


def save_classifier(model, path, extra_meta: Mapping[str, Any] | None = None) -> None:
    from safetensors.torch import save_file

    meta = {"format": "kosmos-tabletop-vision-judge-v1", "tasks": json.dumps(list(TASKS))}
    meta.update({k: json.dumps(v, sort_keys=True) for k, v in dict(extra_meta or {}).items()})
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path), metadata=meta)


def load_classifier(path=None):
    from safetensors import safe_open
    from safetensors.torch import load_file

    path = Path(path) if path else shipped_classifier_path()
    if not path.is_file():
        raise FileNotFoundError(f"no vision-judge weights at {path}; train them with `kosmos-env train-world`")
    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = fh.metadata() or {}
    except Exception as exc:  # noqa: BLE001 - a truncated or corrupt file: name it, whatever safetensors raised
        raise ValueError(f"vision-judge weights {path} cannot be read ({type(exc).__name__}: {exc})") from None
    if meta.get("format") != "kosmos-tabletop-vision-judge-v1":
        raise ValueError(f"{path} is not a Kosmos tabletop vision-judge weights file")
    if json.loads(meta["tasks"]) != list(TASKS):
        raise ValueError(f"{path} was trained for tasks {meta['tasks']}, expected {list(TASKS)}")
    model = _build()
    model.load_state_dict(load_file(str(path)))
    model.eval()
    return model


class FrameVisionJudge:
    """Judge protocol over :func:`predict`: success probability of the rollout's last frame."""

    name = "vision_frame"
    #: what :meth:`score_frames` reads (the :class:`~kosmos_env.judges.base.StepJudge` protocol)
    frame_size = (64, 64)
    tasks = TASKS

    def __init__(self, weights: str | None = None, threshold: float = 0.5, weights_sha256: str | None = None):
        if not 0.0 < float(threshold) < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {threshold}")
        self.threshold = float(threshold)
        self.weights = weights
        self.weights_sha256 = weights_sha256
        self._model = None

    def preflight(self) -> None:
        """Read the weights now (a few ms): a missing, corrupt or mismatched file fails before any episode."""
        if self._model is None:
            path = Path(self.weights) if self.weights else shipped_classifier_path()
            if self.weights_sha256 is not None and path.is_file():
                from kosmos_env.hashing import sha256_file

                actual = sha256_file(path)
                if actual != self.weights_sha256:
                    raise ValueError(
                        f"vision-judge weights {path} have sha256 {actual[:16]}..., the judge is bound "
                        f"to {str(self.weights_sha256)[:16]}..."
                    )
            self._model = load_classifier(path)

    def _task_index(self, rollout: Rollout) -> int:
        if rollout.task not in TASKS:
            raise ValueError(f"the tabletop vision judge knows tasks {list(TASKS)}, not {rollout.task!r}")
        return TASKS.index(rollout.task)

    def judge(self, rollout: Rollout) -> Judgment:
        return self.judge_batch([rollout])[0]

    def score_frames(self, frames: np.ndarray, task: str) -> np.ndarray:
        """P(``task`` solved) for each frame (n, 64, 64, 3): the per-step signal of the progress reward."""
        if task not in TASKS:
            raise ValueError(f"the tabletop vision judge knows tasks {list(TASKS)}, not {task!r}")
        frames = np.asarray(frames)
        if frames.shape[1:] != (64, 64, 3):
            raise ValueError(f"the tabletop vision judge reads 64x64 RGB frames, got {frames.shape[1:]}")
        if self._model is None:
            self.preflight()
        return predict(self._model, frames, [TASKS.index(task)] * len(frames))

    def score_progress(
        self,
        chunks: Sequence[np.ndarray],
        instructions: Sequence[str],
        tasks: Sequence[str],
        first_frames: Sequence[np.ndarray | None] | None = None,
    ) -> list[ProgressScore]:
        """The :class:`~kosmos_env.judges.base.ProgressJudge` protocol: one score per episode, all
        episodes' chunks in one forward pass.

        ``progress`` is P(task solved) on the last frame of each episode's latest chunk, and
        ``success`` is that probability at or above the judge's threshold. This is a *success
        probability used as progress*, not a graded estimate of how far the task has come: the
        classifier was trained to tell solved frames from unsolved ones, so it reads near 0 through
        reaching, grasping and most of the carry and rises only as the scene comes to look solved.
        As a potential for shaping it pays mostly for the last part of the task; how well it tracks
        the distance to the goal before that is what the tabletop calibration
        (:mod:`kosmos_env.checks.progress_calibration`) measures. It never abstains. The
        instruction and the first frame are not read (the classifier knows the task by name).
        """
        progress_first_frames(chunks, instructions, tasks, first_frames)  # read for its checks only
        if len(chunks) == 0:
            return []
        for task in tasks:
            if task not in TASKS:
                raise ValueError(f"the tabletop vision judge knows tasks {list(TASKS)}, not {task!r}")
        last = []
        for i, chunk in enumerate(chunks):
            chunk = np.asarray(chunk)
            if chunk.ndim != 4 or len(chunk) == 0 or chunk.shape[1:] != (64, 64, 3):
                raise ValueError(
                    f"the tabletop vision judge reads chunks of 64x64 RGB frames (n, 64, 64, 3) with n >= 1; "
                    f"chunk {i} has shape {chunk.shape}"
                )
            last.append(chunk[-1])
        if self._model is None:
            self.preflight()
        probs = predict(self._model, np.stack(last), [TASKS.index(t) for t in tasks])
        return [ProgressScore(progress=float(p), success=bool(p >= self.threshold)) for p in probs]

    def judge_batch(self, rollouts: Sequence[Rollout]) -> list[Judgment]:
        t0 = time.perf_counter()
        if self._model is None:
            self.preflight()
        frames = np.stack([np.asarray(r.frames[-1]) for r in rollouts])
        if frames.shape[1:] != (64, 64, 3):
            raise ValueError(f"the tabletop vision judge reads 64x64 RGB frames, got {frames.shape[1:]}")
        probs = predict(self._model, frames, [self._task_index(r) for r in rollouts])
        seconds = (time.perf_counter() - t0) / max(len(rollouts), 1)
        return [
            Judgment(
                success=bool(p >= self.threshold),
                score=float(p),
                rationale=f"frame classifier: P(solved in last frame) = {p:.2f}",
                judge=self.name,
                model_id="kosmos-tabletop-vision-judge-v1",
                seconds=seconds,
            )
            for p in probs
        ]
