"""Run the study's episodes: every policy × task × seed in the learned world and the simulator.

Each episode is recorded as a plain row (no frames kept except a few for the report): the
verdict of every judge at the full horizon and at shorter horizons, the simulator's ground
truth, and the seconds it cost. Judges:

- ``state`` (simulator only): ground truth from MuJoCo state — the reference;
- ``robot_log``: the robot-log judge on the world's log (the learned world's is predicted);
- ``vision``: the frame classifier on the world's frames (the learned world's are generated).

Applying ``robot_log`` and ``vision`` to the simulator too separates judge error from world
error. Seeds start at ``seed_offset`` (default 100000), far from the training seeds.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

DEFAULT_POLICIES = ("scripted:skill=1.0", "scripted:skill=0.8", "scripted:skill=0.6", "scripted:skill=0.45",
                    "scripted:skill=0.3", "random")
DEFAULT_HORIZONS = (5, 10, 15, 20, 25, 30, 35, 40)


@dataclass
class StudyConfig:
    world: str = "Kosmos-TabletopLearned-v1"
    reference: str = "Kosmos-Tabletop-v1"
    policies: tuple = DEFAULT_POLICIES
    tasks: tuple | None = None  # None: every task of the suite
    seeds: int = 10  # per (policy, task)
    seed_offset: int = 100000
    horizons: tuple = DEFAULT_HORIZONS
    gate: bool = True  # also run the learned world with the consistency gate, when it exists
    threads: int = 1
    world_kwargs: dict = field(default_factory=dict)
    vision_weights: str | None = None
    keep_examples: int = 1  # (policy, task, seed) triples whose frames go in the report

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}


def _judges(vision_weights):
    from kosmos_env.judges import make_judge
    from kosmos_env.judges.vision_frame import FrameVisionJudge

    return {"robot_log": make_judge("robot_log"), "vision": FrameVisionJudge(vision_weights)}


def _judge_all(judges, rollout, horizons) -> tuple[dict, dict, dict]:
    """(final verdicts, verdicts per horizon, judge seconds) for one rollout."""
    final, per_h, seconds = {}, {}, {}
    n = len(rollout.actions)
    for name, judge in judges.items():
        t0 = time.perf_counter()
        cuts = [h for h in horizons if h < n] + [n]
        rolls = [rollout if h == n else rollout.truncated(h) for h in cuts]
        if hasattr(judge, "judge_batch"):
            verdicts = judge.judge_batch(rolls)
        else:
            verdicts = []
            for r in rolls:
                try:
                    verdicts.append(judge.judge(r))
                except ValueError:  # e.g. a log too short to judge: a failure to show anything
                    verdicts.append(None)
        seconds[name] = (time.perf_counter() - t0) / len(cuts)
        per_h[name] = {int(h): (None if v is None else bool(v.success)) for h, v in zip(cuts, verdicts)}
        final[name] = per_h[name][n]
    return final, per_h, seconds


def _run_world(env_id: str, cfg: StudyConfig, judges: dict, *, with_gate: bool, is_reference: bool,
               progress: bool, examples: dict) -> list[dict]:
    import gymnasium
    from tqdm import tqdm

    import kosmos_env  # noqa: F401
    from kosmos_env.policies import make_policy, parse_policy_arg
    from kosmos_env.rollouts import run_episode

    kwargs: dict[str, Any] = {"image_size": (64, 64), "defer_judging": True}
    if with_gate:  # the gate clips commands to the workspace exactly as the world does
        from kosmos_env.spec import load_spec

        kwargs["gate"] = {"enabled": True, "workspace": load_spec(env_id).world["workspace"]}
    if not is_reference and cfg.world_kwargs:
        kwargs["world_kwargs"] = dict(cfg.world_kwargs)
    env = gymnasium.make(env_id, **kwargs)
    tasks = list(cfg.tasks) if cfg.tasks else env.unwrapped.task_names
    label = f"{env_id}{' + gate' if with_gate else ''}"
    rows = []
    jobs = [(p, t, i) for p in cfg.policies for t in tasks for i in range(cfg.seeds)]
    built = {p: make_policy(n, **kw) for p, (n, kw) in ((p, parse_policy_arg(p)) for p in cfg.policies)}
    try:
        for policy, task, i in tqdm(jobs, desc=f"study: {label}", disable=not progress):
            seed = cfg.seed_offset + tasks.index(task) * 1000 + i
            t0 = time.perf_counter()
            result = run_episode(env, built[policy], seed=seed, task=task)
            episode_seconds = time.perf_counter() - t0
            rollout = result.rollout
            final, per_h, judge_seconds = _judge_all(judges, rollout, cfg.horizons)
            row = {
                "world": env_id, "gate": with_gate, "policy": policy, "task": task, "seed": seed, "repeat": 0,
                "outcome": result.outcome, "discarded": result.outcome == "discarded", "steps": result.steps,
                "judges": final, "horizon_judges": per_h, "seconds": {
                    "episode": episode_seconds, "world": result.timings.get("world", 0.0),
                    "policy": result.timings.get("policy", 0.0), "gate": result.timings.get("gate", 0.0),
                    **{f"judge_{k}": v for k, v in judge_seconds.items()}},
            }
            if is_reference:
                gt = result.ground_truth or {}
                row["judges"]["state"] = bool(gt.get("success", False))
                steps_truth = np.asarray(rollout.log.get("gt_success", []), dtype=bool)
                row["horizon_judges"]["state"] = {int(h): bool(steps_truth[h - 1]) for h in cfg.horizons
                                                  if h <= len(steps_truth)}
            if result.gate is not None:
                row["gate_verdict"] = result.gate
            key = (policy, task, i)
            if key in examples.get("keys", ()) and not with_gate:
                examples.setdefault("frames", {})[(env_id, *key)] = rollout.frames.copy()
            rows.append(row)
    finally:
        env.close()
    return rows


def gate_available() -> tuple[bool, str]:
    """Whether the consistency gate module exists and builds from a minimal spec."""
    try:
        from kosmos_env.gate import ConsistencyGate  # noqa: F401
    except Exception as exc:  # the gate is written by another issue; absent until it lands
        return False, f"kosmos_env.gate is not importable ({type(exc).__name__}: {exc})"
    try:
        ConsistencyGate.from_spec({"enabled": True})
    except Exception as exc:
        return False, f"ConsistencyGate.from_spec({{'enabled': True}}) failed: {type(exc).__name__}: {exc}"
    return True, "kosmos_env.gate.ConsistencyGate with its default thresholds"


def run_study(cfg: StudyConfig, progress: bool = True) -> dict[str, Any]:
    """Run everything; returns {"config", "rows", "gate_status", "examples", "wall_seconds"}."""
    import torch

    if cfg.seeds < 2:
        raise ValueError(f"the study needs at least 2 seeds per (policy, task) for split-half numbers, got {cfg.seeds}")
    if len(cfg.policies) < 2:
        raise ValueError("the study ranks policies: give at least 2")
    torch.set_num_threads(max(1, min(2, cfg.threads)))
    t0 = time.perf_counter()
    judges = _judges(cfg.vision_weights)
    first_task = (cfg.tasks or ("spoon_on_towel",))[0]
    examples: dict[str, Any] = {"keys": {(cfg.policies[0], first_task, 0)}}
    rows = _run_world(cfg.reference, cfg, judges, with_gate=False, is_reference=True, progress=progress, examples=examples)
    rows += _run_world(cfg.world, cfg, judges, with_gate=False, is_reference=False, progress=progress, examples=examples)
    ok, why = gate_available() if cfg.gate else (False, "disabled by the study settings (--no-gate)")
    gate_status = {"available": ok, "detail": why}
    if ok:
        try:
            rows += _run_world(cfg.world, cfg, judges, with_gate=True, is_reference=False, progress=progress, examples=examples)
        except Exception as exc:  # report it plainly rather than lose the rest of the study
            gate_status = {"available": False, "detail": f"running with the gate failed: {type(exc).__name__}: {exc}"}
    return {"config": cfg.to_dict(), "rows": rows, "gate_status": gate_status,
            "examples": examples.get("frames", {}), "wall_seconds": time.perf_counter() - t0}
