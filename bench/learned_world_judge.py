"""Judges on the learned tabletop against simulator truth, on layouts never used in training.

Every (policy, task, seed) runs twice with the same seed (same first scene): in the simulator
(``Kosmos-Tabletop-v1`` at 64x64, whose state gives the truth) and in the learned world
(``Kosmos-TabletopLearned-v1``, closed loop: the policy acts on generated frames and the
integrated pose). Judged:

- ``learned/vision``: the frame classifier (trained on simulator frames only) on the learned
  world's last generated frame;
- ``learned/robot_log``: the robot-log judge on the learned world's *predicted* gripper log;
- ``reference/vision`` and ``reference/robot_log``: the same judges on the simulator's rollout
  (judge error without world error).

Printed: episode accuracy against truth; per-policy success rates; Kendall tau-b of each
evaluator's per-policy rates against the truth's, with a 95 % bootstrap interval over
(task, seed) units (all policies resampled together, paired); and, for ``grasp_miss`` (a scripted
policy that closes its gripper beside the object, then carries and releases nothing: its actions
look like success), how often each log shows an empty grasp.

    MUJOCO_GL=egl python bench/learned_world_judge.py --seeds 10 \\
        --out bench/results/learned_world_judge.txt [--actions-per-call 1 2 4]

Seeds start at 100000 (the validity study's), far from the training seeds (< 4000).
``--json ROWS --frames-out FRAMES.npz`` also keeps every rollout's last frame; then
``--rejudge ROWS FRAMES.npz --vision-weights W`` scores another frame classifier on the very
same rollouts (no episode is run again).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")

STUDY_POLICIES = (
    "scripted:skill=1.0",
    "scripted:skill=0.8",
    "scripted:skill=0.6",
    "scripted:skill=0.45",
    "scripted:skill=0.3",
    "random",
)
GRASP_MISS = "grasp_miss"
MISS_OFFSET = 0.07  # m along the object's long axis: beyond its end by more than a finger's width


def make_grasp_miss(seed=None):
    """The scripted policy with every object waypoint moved past the end of the object."""
    from kosmos_env.policies.scripted import ScriptedPolicy

    class GraspMissPolicy(ScriptedPolicy):
        name = GRASP_MISS

        def _make_plan(self, image, ee):
            plan = super()._make_plan(image, ee)
            if not plan:
                return plan
            along = MISS_OFFSET * np.array([np.cos(self._yaw), np.sin(self._yaw)])
            for i in (0, 1, 3):  # above the object, at it, lifting from it
                waypoint, grip, dwell = plan[i]
                plan[i] = (np.array([*(waypoint[:2] + along), waypoint[2]]), grip, dwell)
            return plan

    return GraspMissPolicy(skill=1.0, seed=seed)


def run(args) -> dict:
    """Every (policy, task, seed) in both worlds; ``--workers`` > 1 splits the policies across
    processes (each with one torch thread; rows come back in the same order as one process's)."""
    policies = list(args.policies) + [GRASP_MISS]
    t_start = time.perf_counter()
    workers = max(1, min(int(args.workers), len(policies)))
    if workers == 1:
        parts = [_run_policies(args, policies)]
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        chunks = [policies[i::workers] for i in range(workers)]
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            done = list(pool.map(_run_policies, [args] * workers, chunks))
        by_policy = {}
        for rows, frames, tasks, settings in done:
            for j, r in enumerate(rows):
                by_policy.setdefault(r["policy"], []).append((r, {w: f[j] for w, f in frames.items()}))
        ordered = [item for p in policies for item in by_policy[p]]
        parts = [([r for r, _ in ordered], {w: [f[w] for _, f in ordered] for w in ordered[0][1]}, tasks, settings)]
    rows, last_frames, tasks, settings = parts[0]
    if args.frames_out:
        np.savez_compressed(args.frames_out, **{w.replace("@", "_at_"): np.stack(f) for w, f in last_frames.items()})
    return {
        "rows": rows,
        "policies": policies,
        "tasks": tasks,
        "seeds": args.seeds,
        "settings": list(settings),
        "seed_offset": args.seed_offset,
        "wall_seconds": time.perf_counter() - t_start,
    }


def _run_policies(args, policies):
    import gymnasium
    import torch

    torch.set_num_threads(1)

    import kosmos_env  # noqa: F401
    from kosmos_env.judges import make_judge
    from kosmos_env.judges.robot_log import analyse_log
    from kosmos_env.policies import make_policy, parse_policy_arg
    from kosmos_env.rollouts import run_episode
    from kosmos_env.spec import load_spec
    from kosmos_env.judges.vision_frame import FrameVisionJudge

    base = load_spec("Kosmos-TabletopLearned-v1")
    kwargs = {}
    if args.weights:
        from kosmos_env.hashing import sha256_file

        kwargs = {"weights_path": args.weights}
        base = base.with_overrides(world={"weights_sha256": sha256_file(args.weights)})
    settings = args.actions_per_call or [base.world.get("actions_per_call", 1)]
    envs = {"reference": gymnasium.make("Kosmos-Tabletop-v1", image_size=(64, 64))}
    for n in settings:
        envs[f"learned@{n}"] = gymnasium.make(
            "Kosmos-TabletopLearned-v1",
            world_kwargs=kwargs,
            env_spec=base.with_overrides(world={"actions_per_call": n}),
        )
    tasks = list(envs["reference"].unwrapped.task_names)
    vision = FrameVisionJudge(args.vision_weights)
    robot_log = make_judge("robot_log")
    rows = []
    last_frames = {world_name: [] for world_name in envs}  # for --frames-out (re-judging later)
    t_start = time.perf_counter()
    for name in policies:
        for task in tasks:
            for i in range(args.seeds):
                seed = args.seed_offset + i
                row = {"policy": name, "task": task, "seed": seed}
                for world_name, env in envs.items():
                    if name == GRASP_MISS:
                        policy = make_grasp_miss()
                    else:
                        pname, pkw = parse_policy_arg(name)
                        policy = make_policy(pname, **pkw)
                    result = run_episode(env, policy, seed=seed, task=task)
                    rollout = result.rollout
                    last_frames[world_name].append(np.asarray(rollout.frames[-1], dtype=np.uint8))
                    t0 = time.perf_counter()
                    row[f"{world_name}/vision"] = bool(vision.judge(rollout).success)
                    row[f"{world_name}/vision_seconds"] = time.perf_counter() - t0
                    row[f"{world_name}/robot_log"] = bool(robot_log.judge(rollout).success)
                    row[f"{world_name}/empty_grasps"] = int(analyse_log(rollout.log).empty_grasps)
                    row[f"{world_name}/world_seconds"] = float(result.timings.get("world", 0.0))
                    if world_name == "reference":
                        row["truth"] = bool((result.ground_truth or {}).get("success", False))
                rows.append(row)
        print(f"{name}: done ({time.perf_counter() - t_start:.0f} s)", file=sys.stderr, flush=True)
    for env in envs.values():
        env.close()
    return rows, last_frames, tasks, settings


def rejudge(result: dict, frames_path: str, vision_weights: str | None) -> dict:
    """Replace every ``<world>/vision`` verdict with another frame classifier's, on the last
    frames a run saved with ``--frames-out`` (rows in the same order): a judge trained later
    is scored on the very same rollouts, without running the worlds again."""
    from kosmos_env.judges.vision_frame import TASKS, load_classifier, predict

    model = load_classifier(vision_weights)
    rows = result["rows"]
    task_index = [TASKS.index(r["task"]) for r in rows]
    with np.load(frames_path, allow_pickle=False) as saved:
        for key in saved.files:
            frames = saved[key]
            if len(frames) != len(rows):
                raise ValueError(f"{frames_path}: {len(frames)} frames for {key}, the rows hold {len(rows)}")
            probs = predict(model, frames, task_index)
            for r, p in zip(rows, probs, strict=True):
                r[f"{key.replace('_at_', '@')}/vision"] = bool(p >= 0.5)
    return result


REFERENCE_EVALUATORS = ("reference/vision", "reference/robot_log")


def _rates(rows, policies, key, units=None):
    """Per-policy success rates; ``units`` (list of (task, seed)) resamples the episodes."""
    by = {}
    for r in rows:
        by.setdefault((r["policy"], r["task"], r["seed"]), r[key])
    if units is None:
        units = sorted({(r["task"], r["seed"]) for r in rows})
    return np.array([np.mean([by[(p, t, s)] for t, s in units]) for p in policies], dtype=float)


def _accuracy(rows, key, boots):
    """Share of episodes judged as the truth, and its 95 % interval over resampled (task, seed) units
    (a unit carries all its policies' episodes, so episodes of one layout are never split)."""
    per_unit: dict = {}
    for r in rows:
        per_unit.setdefault((r["task"], r["seed"]), []).append(r[key] == r["truth"])
    right = {u: (sum(v), len(v)) for u, v in per_unit.items()}
    point = sum(a for a, _ in right.values()) / sum(n for _, n in right.values())
    vals = [sum(right[u][0] for u in b) / sum(right[u][1] for u in b) for b in boots]
    return point, tuple(np.quantile(vals, [0.025, 0.975]))


def summarise(result: dict, n_boot: int = 2000) -> str:
    parts = []
    for n in result["settings"]:
        parts.append(_summarise_setting(result, n, n_boot))
    if len(result["settings"]) > 1:
        parts.append(_cost_table(result))
    return "\n".join(parts)


def _cost_table(result: dict) -> str:
    rows = result["rows"]
    out = [
        "cost against fidelity (learned world, per episode of 40 steps):",
        "  actions_per_call  world_s  vision_judge_s  vision_accuracy  kendall(study policies)",
    ]
    for n in result["settings"]:
        key = f"learned@{n}"
        acc = np.mean([r[f"{key}/vision"] == r["truth"] for r in rows])
        out.append(
            f"  {n:16d}  {np.mean([r[f'{key}/world_seconds'] for r in rows]):7.3f}  "
            f"{np.mean([r[f'{key}/vision_seconds'] for r in rows]):14.4f}  {acc:15.3f}  "
            f"{result.get('kendall', {}).get(n, float('nan')):.3f}"
        )
    out.append(f"  reference (simulator) world_s {np.mean([r['reference/world_seconds'] for r in rows]):.3f}")
    return "\n".join(out) + "\n"


def _summarise_setting(result: dict, n: int, n_boot: int) -> str:
    from kosmos_env.stats.agreement import kendall

    EVALUATORS = (f"learned@{n}/vision", f"learned@{n}/robot_log") + REFERENCE_EVALUATORS
    rows, policies = result["rows"], result["policies"]
    units = sorted({(r["task"], r["seed"]) for r in rows})
    rng = np.random.default_rng(0)
    boots = [[units[j] for j in rng.integers(0, len(units), len(units))] for _ in range(n_boot)]
    out = [
        f"== learned tabletop, actions per model call = {n}; {len(units)} (task, seed) units "
        f"per policy, seeds {result['seed_offset']}..{result['seed_offset'] + result['seeds'] - 1}; "
        f"wall {result['wall_seconds']:.0f} s",
        "",
    ]
    out.append(
        "episode accuracy against simulator truth (all policies | study policies only), "
        "95 % bootstrap interval over (task, seed) units:"
    )
    study = [r for r in rows if r["policy"] != GRASP_MISS]
    for ev in EVALUATORS:
        cells = []
        for subset in (rows, study):
            point, (lo, hi) = _accuracy(subset, ev, boots)
            cells.append(f"{point:.3f} [{lo:.3f}, {hi:.3f}]")
        out.append(f"  {ev:24s} {cells[0]} | {cells[1]}")
    out += [
        "",
        "per-policy success rates:",
        "  " + f"{'policy':22s} {'truth':>6s} " + " ".join(f"{ev:>20s}" for ev in EVALUATORS),
    ]
    truth = _rates(rows, policies, "truth")
    table = {ev: _rates(rows, policies, ev) for ev in EVALUATORS}
    for i, p in enumerate(policies):
        out.append("  " + f"{p:22s} {truth[i]:6.2f} " + " ".join(f"{table[ev][i]:20.2f}" for ev in EVALUATORS))

    def kendall_value(e, r):
        v = kendall(e, r, floor=False).value
        return np.nan if v is None else float(v)

    for label, pols in (("study policies", [p for p in policies if p != GRASP_MISS]), ("with grasp_miss", policies)):
        out += ["", f"Kendall tau-b vs truth ({label}), 95 % bootstrap interval over (task, seed) units:"]
        boot_truth = [_rates(rows, pols, "truth", b) for b in boots]
        for ev in EVALUATORS:
            point = kendall_value(_rates(rows, pols, ev), _rates(rows, pols, "truth"))
            vals = np.array(
                [kendall_value(_rates(rows, pols, ev, b), bt) for b, bt in zip(boots, boot_truth, strict=True)]
            )
            ok = vals[~np.isnan(vals)]
            lo, hi = np.quantile(ok, [0.025, 0.975]) if len(ok) else (np.nan, np.nan)
            out.append(
                f"  {ev:24s} {point:6.3f}  [{lo:.3f}, {hi:.3f}]  (undefined in {int(np.isnan(vals).sum())} of {n_boot})"
            )
            if label == "study policies" and ev == EVALUATORS[0]:
                result.setdefault("kendall", {})[n] = point
    miss = [r for r in rows if r["policy"] == GRASP_MISS]
    if miss:
        out += [
            "",
            f"grasp_miss ({len(miss)} episodes; truth success {np.mean([r['truth'] for r in miss]):.2f}): "
            "share of episodes whose log shows >= 1 empty grasp / judged success by the robot-log judge",
        ]
        for world in ("reference", f"learned@{n}"):
            empty = np.mean([r[f"{world}/empty_grasps"] > 0 for r in miss])
            succ = np.mean([r[f"{world}/robot_log"] for r in miss])
            out.append(f"  {world:12s} empty grasp {empty:.3f}   robot-log success {succ:.3f}")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=10, help="seeds per (policy, task) (default 10)")
    p.add_argument("--seed-offset", type=int, default=100000)
    p.add_argument("--policies", nargs="+", default=list(STUDY_POLICIES))
    p.add_argument(
        "--actions-per-call",
        type=int,
        nargs="+",
        default=None,
        help="learned-world settings to run (default: the spec's world.actions_per_call)",
    )
    p.add_argument("--weights", default=None, help="another world.safetensors (bound by its own sha256)")
    p.add_argument("--vision-weights", default=None)
    p.add_argument("--workers", type=int, default=1, help="processes, each running a share of the policies (default 1)")
    p.add_argument("--json", default=None, help="also write the per-episode rows here")
    p.add_argument("--frames-out", default=None, help="also save every rollout's last frame here (.npz)")
    p.add_argument(
        "--rejudge",
        nargs=2,
        metavar=("ROWS_JSON", "FRAMES_NPZ"),
        default=None,
        help="run no episode: re-judge a saved run's last frames with --vision-weights and summarise",
    )
    p.add_argument("--out", default=None, help="write the summary here too")
    args = p.parse_args(argv)
    if args.seeds < 1 or args.workers < 1:
        print("error: --seeds and --workers must be >= 1", file=sys.stderr)
        return 2
    if args.rejudge:
        missing = [f for f in args.rejudge if not os.path.isfile(f)]
        if missing:
            print(f"error: no such file: {missing[0]}", file=sys.stderr)
            return 2
        with open(args.rejudge[0]) as fh:
            result = rejudge(json.load(fh), args.rejudge[1], args.vision_weights)
    else:
        result = run(args)
    text = "command: python bench/learned_world_judge.py " + " ".join(argv if argv is not None else sys.argv[1:]) + "\n"
    text += summarise(result)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
