"""A synthetic campaign results bundle that follows the results contract exactly
(results.json, content-addressed artifacts with real H.264 MP4s, .npy actions and .npz robot
logs with per-step gt_success, manifest.json), for the report, analyze, trust and uncertainty
tests while no real campaign can be run. ``tests/report/test_synthetic_bundle.py`` checks that
the generator itself honours the contract.

Outcomes are drawn from fixed per-policy success rates with a seeded RNG, so the expected
ranking is known (skill 1.0 > skill 0.5 > random) but the numbers are not hand-made.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from kosmos_env.utils.video import write_mp4

POLICIES = [
    ("scripted:skill=1.0", "scripted", {"skill": 1.0}, 0.85),
    ("scripted:skill=0.5", "scripted", {"skill": 0.5}, 0.5),
    ("random", "random", {}, 0.1),
]
TASKS = ["carrot_on_plate", "stack_cube"]
HORIZON = 20
STAGES = ("policy", "world", "gate", "judge", "io")


def _store(root: Path, data: bytes, ext: str) -> str:
    digest = hashlib.sha256(data).hexdigest()
    rel = f"artifacts/sha256/{digest[:2]}/{digest}.{ext}"
    path = root / rel
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.rename(path)
    return rel


def _npy_bytes(arr: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _npz_bytes(**arrays) -> bytes:
    import io

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _video(policy_index: int, outcome: str, steps: int, size: int = 32) -> np.ndarray:
    """A square that moves towards a target; green when the episode succeeds."""
    frames = np.full((steps, size, size, 3), 40, np.uint8)
    colour = {"success": (60, 200, 60), "failure": (200, 60, 60)}.get(outcome, (200, 200, 60))
    for t in range(steps):
        x = int(2 + (size - 10) * t / max(1, steps - 1))
        y = 4 + 8 * policy_index
        frames[t, y : y + 6, x : x + 6] = colour
        frames[t, size - 6 : size - 2, size - 8 : size - 4] = (220, 220, 220)
    return frames


def _agg(outcomes: list[str]) -> dict:
    from kosmos_env.stats.intervals import summarize_rate

    s = summarize_rate(outcomes)
    c = s.counts
    return {
        "n": len(outcomes),
        "successes": c["success"],
        "failures": c["failure"],
        "discarded": c["discarded"],
        "abstained": c["abstained"],
        "errors": c["error"],
        "success_rate": s.raw.estimate,
        "wilson_95": [s.raw.lower, s.raw.upper] if s.raw.estimate is not None else None,
        "worst_case_95": list(s.worst_case_ci) if s.worst_case_ci else None,
    }


def make_bundle(
    root: Path,
    *,
    seeds: int = 8,
    repeats: int = 1,
    rng_seed: int = 7,
    price_table: dict | None = None,
    policies=POLICIES,
    tasks=TASKS,
    undecided: bool = True,
    score_of=None,
) -> Path:
    """Write a complete results bundle under ``root`` and return ``root``.

    ``undecided=False``: no discarded or abstained episode (the same random draws, so the
    remaining numbers are unchanged); ``score_of(outcome)``: the judge's score of a decided
    episode when it is not the success bit (a judge like the robot-log one, whose score is
    graded while its verdict is 0/1)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(rng_seed)
    videos: dict[tuple, str] = {}
    rows = []
    for pi, (label, name, kwargs, p) in enumerate(policies):
        for task in tasks:
            for seed in range(seeds):
                for rep in range(repeats):
                    u = rng.random()
                    if not undecided:
                        u = 1.0
                    if u < 0.07:
                        outcome = "discarded"
                    elif u < 0.12:
                        outcome = "abstained"
                    else:
                        outcome = "success" if rng.random() < p else "failure"
                    steps = HORIZON if outcome != "discarded" else int(rng.integers(3, HORIZON))
                    # ground truth: successes reach the goal at a policy-dependent step and stay there
                    gt = np.zeros(steps, bool)
                    truth = outcome == "success" or (outcome in ("abstained", "discarded") and rng.random() < p)
                    if truth:
                        onset = int(np.clip(rng.normal(6 + 6 * pi, 3), 1, HORIZON - 1))
                        gt[min(onset, steps - 1) :] = True
                    actions = rng.normal(0, 0.01, size=(steps, 7)).astype(np.float32)
                    log = {
                        "ee_pos": rng.normal(0, 0.1, (steps, 3)).astype(np.float32),
                        "gripper_cmd": rng.random(steps).astype(np.float32),
                        "gripper_measured": rng.random(steps).astype(np.float32),
                        "gt_success": gt,
                    }
                    vkey = (pi, outcome, steps)
                    if vkey not in videos:
                        tmp = root / "tmp_video.mp4"
                        write_mp4(tmp, _video(pi, outcome, steps), fps=5)
                        videos[vkey] = _store(root, tmp.read_bytes(), "mp4")
                        tmp.unlink()
                    decided = outcome in ("success", "failure")
                    score = float(outcome == "success") if score_of is None or not decided else float(score_of(outcome))
                    judgment = (
                        None
                        if outcome == "discarded"
                        else {
                            "success": (outcome == "success") if decided else None,
                            "score": score,
                            "rationale": "synthetic",
                            "votes": [],
                            "judge": "state_oracle",
                            "model_id": None,
                            "prompt_sha256": None,
                            "seconds": 0.001,
                            "abstained": outcome == "abstained",
                            "extras": {},
                        }
                    )
                    t = {
                        "policy": float(rng.uniform(0.01, 0.05)),
                        "world": float(rng.uniform(0.2, 0.4)),
                        "gate": float(rng.uniform(0.001, 0.01)),
                        "judge": float(rng.uniform(0.05, 0.15)),
                        "io": float(rng.uniform(0.01, 0.03)),
                    }
                    t["total"] = sum(t.values()) + 0.01
                    rows.append(
                        {
                            "episode_id": f"{label}|{task}|{seed}|{rep}",
                            "policy": label,
                            "task": task,
                            "seed": seed,
                            "repeat": rep,
                            "outcome": outcome,
                            "success": {"success": True, "failure": False}.get(outcome),
                            "score": score if decided else None,
                            "judge": "state_oracle",
                            "judgment": judgment,
                            "gate": {
                                "ok": outcome != "discarded",
                                "reason": None if outcome != "discarded" else "motion mismatch",
                            },
                            "steps": steps,
                            "timings": t,
                            "artifacts": {
                                "video": videos[vkey],
                                "actions": _store(root, _npy_bytes(actions), "npy"),
                                "log": _store(root, _npz_bytes(**log), "npz"),
                            },
                            "error": None,
                            "attempts": 1,
                            "worker": "local-0",
                        }
                    )
    per_policy = {lab: _agg([r["outcome"] for r in rows if r["policy"] == lab]) for lab, *_ in policies}
    per_pt = {
        lab: {t: _agg([r["outcome"] for r in rows if r["policy"] == lab and r["task"] == t]) for t in tasks}
        for lab, *_ in policies
    }
    order = sorted(per_policy, key=lambda k: -(per_policy[k]["success_rate"] or 0))
    sec = {s: float(np.mean([r["timings"][s] for r in rows])) for s in STAGES + ("total",)}
    results = {
        "schema": "kosmos-env/results",
        "schema_version": 1,
        "package_version": "0.1.0",
        "campaign": {
            "id": "synthetic-test",
            "env_id": "Kosmos-Tabletop-v1",
            "spec_hash": "ab" * 32,
            "spec": {"id": "Kosmos-Tabletop-v1"},
            "policies": [
                {"label": lab, "name": n, "kwargs": kw, "content_hash": "0" * 64, "hub_model_id": None}
                for lab, n, kw, _ in policies
            ],
            "tasks": list(tasks),
            "seeds": list(range(seeds)),
            "repeats": repeats,
            "judge": {"name": "state_oracle"},
            "gate": {"enabled": True},
            "created": "2025-01-01T00:00:00Z",
            "price_table": price_table,
        },
        "per_episode": rows,
        "aggregated": {
            "per_policy": per_policy,
            "per_policy_task": per_pt,
            "ranking": order,
            "cost": {
                "seconds_per_stage": sec,
                "rollouts_per_hour": 3600 / sec["total"],
                "seconds_per_rollout": sec["total"],
                "money": None,
            },
        },
    }
    (root / "results.json").write_text(json.dumps(results, indent=1))
    files = {}
    for f in sorted(root.rglob("*")):
        if f.is_file() and f.name != "manifest.json":
            files[f.relative_to(root).as_posix()] = hashlib.sha256(f.read_bytes()).hexdigest()
    (root / "manifest.json").write_text(json.dumps({"schema": "kosmos-env/manifest", "files": files}, indent=1))
    return root
