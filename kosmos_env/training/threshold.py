"""Choosing ``reward.success_threshold`` for ``terminate_on_success`` on tuning seeds only.

A progress-reward episode ends at the first step where the step-judge probability has been at or
above the threshold for ``patience`` consecutive steps, so what matters is that *first crossing*:
is the task really solved at that step?
On simulator episodes of scripted policies (tuning seeds, never evaluation seeds) every step has
the judge's probability and the simulator's truth. For each candidate threshold:

- ``precision``: of the episodes that cross it, the share whose first crossing is at a step where
  the simulator says solved (a crossing that is not is a premature, exploitable termination);
- ``recall``: of the episodes the simulator says are solved at some step, the share that cross;
- ``f1``: their harmonic mean. The rule picks the (threshold, patience) with the highest F1 (ties:
  the higher patience, then the higher threshold: the more conservative), and the whole table is
  kept beside the choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

CANDIDATES = tuple(round(0.5 + 0.05 * i, 2) for i in range(10))  # 0.50 .. 0.95
PATIENCES = (1, 2, 3, 4)


@dataclass
class TuningEpisode:
    """One tuning episode: the step judge's probability and the simulator's truth after each step."""

    task: str
    seed: int
    policy: str
    progress: np.ndarray  # (T,) after each step
    truth: np.ndarray  # (T,) bool


def record_tuning_episodes(
    policies: Sequence[str],
    tasks: Sequence[str],
    seeds: Sequence[int],
    env_id: str = "Kosmos-Tabletop-v1",
    step_judge: dict | None = None,
    progress_bar: bool = True,
) -> list[TuningEpisode]:
    """Run each policy on each (task, seed) in the simulator with the progress reward; keep both signals."""
    import gymnasium
    from tqdm import tqdm

    import kosmos_env  # noqa: F401
    from kosmos_env.policies import make_policy, parse_policy_arg

    reward = {"mode": "progress", "step_judge": dict(step_judge or {"type": "vision_frame"})}
    env = gymnasium.make(env_id, image_size=(64, 64), reward=reward)
    out = []
    jobs = [(p, t, s) for p in policies for t in tasks for s in seeds]
    for name, task, seed in tqdm(jobs, desc="tuning episodes", disable=not progress_bar):
        kind, kwargs = parse_policy_arg(name)
        policy = make_policy(kind, **kwargs)
        obs, _ = env.reset(seed=seed, options={"task": task})
        policy.reset(obs["instruction"], seed=seed)
        prog = []
        while True:
            obs, _, term, trunc, info = env.step(policy.act(obs))
            prog.append(info["progress"])
            if term or trunc:
                break
        truth = np.asarray(env.unwrapped.rollout().log["gt_success"], bool)  # the simulator's, per step
        out.append(TuningEpisode(task, seed, name, np.asarray(prog, np.float32), truth))
    env.close()
    return out


def first_crossing(progress: np.ndarray, threshold: float, patience: int) -> int | None:
    """The step at which an env with this threshold and patience terminates on success, or None."""
    run = 0
    for t, p in enumerate(progress):
        run = run + 1 if p >= threshold else 0
        if run >= patience:
            return t
    return None


def threshold_table(
    episodes: Sequence[TuningEpisode], candidates: Sequence[float] = CANDIDATES, patiences: Sequence[int] = PATIENCES
) -> list[dict[str, Any]]:
    """Precision, recall and F1 of the first crossing for each (threshold, patience) (module docstring)."""
    rows = []
    solved = sum(bool(e.truth.any()) for e in episodes)
    for patience in patiences:
        for tau in candidates:
            crossed = correct = 0
            for e in episodes:
                t = first_crossing(e.progress, tau, patience)
                if t is not None:
                    crossed += 1
                    correct += bool(e.truth[t])
            precision = correct / crossed if crossed else float("nan")
            recall = correct / max(solved, 1)
            f1 = 2 * precision * recall / (precision + recall) if crossed and precision + recall > 0 else 0.0
            rows.append(
                {
                    "threshold": float(tau),
                    "patience": int(patience),
                    "crossed": crossed,
                    "correct_first_crossings": correct,
                    "solved_episodes": int(solved),
                    "precision": precision,
                    "recall": recall,
                    "f1": f1,
                }
            )
    return rows


def choose_threshold(table: Sequence[dict[str, Any]]) -> tuple[float, int]:
    """The decision rule: highest F1; ties to the higher patience, then the higher threshold."""
    best = max(table, key=lambda r: (r["f1"], r["patience"], r["threshold"]))
    return float(best["threshold"]), int(best["patience"])
