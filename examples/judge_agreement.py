"""How far can the robot's own log stand in for the ground truth, and what does its veto buy?

Runs scripted policies of several skills (plus the random policy) on every tabletop task,
judges each finished rollout three ways, and reports against the state judge (the
simulator's own success predicate, the ground truth):

- the robot-log judge's balanced accuracy (targets >= 0.85);
- the Spearman correlation of each policy's mean log score Z with its true success rate
  (target >= 0.9);
- the false-pass rate of a deliberately optimistic judge (every rollout a success) before
  and after the robot-log veto (target: cut by at least half).

The log judge's thresholds are the defaults in ``kosmos_env.judges.robot_log``; they were
fixed before this script first ran and are not tuned on its outcomes.

    python examples/judge_agreement.py --out agreement.json            # 448 episodes, about 1 min on 2 CPU cores
    python examples/judge_agreement.py --episodes-per-cell 2 --out quick.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict

import numpy as np

DEFAULT_POLICIES = (
    "scripted:1.0",
    "scripted:0.85",
    "scripted:0.7",
    "scripted:0.55",
    "scripted:0.4",
    "scripted:0.2",
    "random",
)


def spearman(x, y) -> float:
    """Spearman rank correlation with average ranks for ties."""
    from scipy.stats import rankdata

    rx, ry = rankdata(x), rankdata(y)
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def build_policy(name: str, seed: int):
    from kosmos_env.policies import make_policy

    if name.startswith("scripted:"):
        return make_policy("scripted", skill=float(name.split(":", 1)[1]), seed=seed)
    return make_policy(name, seed=seed)


def run_episodes(policies, episodes_per_cell: int, image_size: int, seed0: int):
    """Yield (policy name, task, rollout) for every policy x task x seed."""
    import gymnasium
    from tqdm import tqdm

    import kosmos_env  # noqa: F401  (registers the env ids)

    env = gymnasium.make("Kosmos-Tabletop-v1", image_size=[image_size, image_size], judge="state")
    tasks = env.unwrapped.task_names
    total = len(policies) * len(tasks) * episodes_per_cell
    with tqdm(total=total, desc="episodes", unit="ep") as bar:
        for p_i, name in enumerate(policies):
            policy = build_policy(name, seed=seed0 + p_i)
            for task in tasks:
                for k in range(episodes_per_cell):
                    seed = seed0 + 1000 * p_i + k
                    obs, _ = env.reset(seed=seed, options={"task": task})
                    policy.reset(obs["instruction"], seed=seed)
                    done = False
                    while not done:
                        obs, _, terminated, truncated, _ = env.step(policy.act(obs))
                        done = terminated or truncated
                    yield name, task, env.unwrapped.rollout()
                    bar.update(1)
    env.close()


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policies", nargs="+", default=list(DEFAULT_POLICIES), help="'scripted:<skill>' or a policy name")
    ap.add_argument("--episodes-per-cell", type=int, default=16, help="episodes per policy and task")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write the numbers to this JSON file")
    args = ap.parse_args(argv)

    from kosmos_env.judges import make_judge
    from kosmos_env.judges.combine import balanced_accuracy, false_pass_rate

    state, log_judge = make_judge("state"), make_judge("robot_log")
    optimistic = make_judge("optimistic")
    vetoed = make_judge({"type": "veto", "judge": "optimistic"})

    t0 = time.perf_counter()
    rows = []
    for name, task, rollout in run_episodes(args.policies, args.episodes_per_cell, args.image_size, args.seed):
        truth = state.judge(rollout).success
        lj = log_judge.judge(rollout)
        rows.append(
            {
                "policy": name,
                "task": task,
                "truth": truth,
                "log": lj,
                "optimistic": optimistic.judge(rollout),
                "veto": vetoed.judge(rollout),
            }
        )
    elapsed = time.perf_counter() - t0

    truth = [r["truth"] for r in rows]
    per_policy = defaultdict(list)
    for r in rows:
        per_policy[r["policy"]].append(r)
    policy_table = {
        p: {
            "episodes": len(rs),
            "true_success_rate": float(np.mean([r["truth"] for r in rs])),
            "log_success_rate": float(np.mean([r["log"].success is True for r in rs])),
            "mean_z": float(np.mean([r["log"].extras["z"] for r in rs])),
        }
        for p, rs in per_policy.items()
    }
    names = list(policy_table)
    confusion = {
        "tp": sum(1 for r in rows if r["truth"] and r["log"].success),
        "fn": sum(1 for r in rows if r["truth"] and not r["log"].success),
        "fp": sum(1 for r in rows if not r["truth"] and r["log"].success),
        "tn": sum(1 for r in rows if not r["truth"] and not r["log"].success),
    }
    fpr_before = false_pass_rate([r["optimistic"] for r in rows], truth)
    fpr_after = false_pass_rate([r["veto"] for r in rows], truth)
    results = {
        "episodes": len(rows),
        "true_successes": int(sum(truth)),
        "seconds": round(elapsed, 1),
        "image_size": args.image_size,
        "log_judge": make_judge("robot_log").spec,
        "log_balanced_accuracy": balanced_accuracy([r["log"] for r in rows], truth),
        "log_confusion": confusion,
        "spearman_mean_z_vs_true_success": spearman(
            [policy_table[p]["mean_z"] for p in names], [policy_table[p]["true_success_rate"] for p in names]
        ),
        "optimistic_false_pass_rate": fpr_before,
        "vetoed_optimistic_false_pass_rate": fpr_after,
        "veto_true_pass_rate": float(np.mean([r["veto"].success is True for r in rows if r["truth"]]))
        if any(truth)
        else float("nan"),
        "per_policy": policy_table,
        "targets": {"log_balanced_accuracy": 0.85, "spearman": 0.9, "veto_false_pass_cut": 0.5},
    }
    results["targets_met"] = {
        "log_balanced_accuracy": results["log_balanced_accuracy"] >= 0.85,
        "spearman": results["spearman_mean_z_vs_true_success"] >= 0.9,
        "veto_cuts_false_passes_by_half": fpr_after <= 0.5 * fpr_before,
    }

    print(f"{len(rows)} episodes ({sum(truth)} true successes) in {elapsed:.0f} s")
    print(f"{'policy':<16}{'n':>5}{'true SR':>9}{'log SR':>9}{'mean Z':>9}")
    for p in names:
        t = policy_table[p]
        print(
            f"{p:<16}{t['episodes']:>5}{t['true_success_rate']:>9.3f}{t['log_success_rate']:>9.3f}{t['mean_z']:>9.2f}"
        )
    print(
        f"robot-log judge balanced accuracy vs state judge: {results['log_balanced_accuracy']:.3f} (target >= 0.85) confusion {confusion}"
    )
    print(
        f"Spearman(per-policy mean Z, true success rate): {results['spearman_mean_z_vs_true_success']:.3f} (target >= 0.9)"
    )
    print(f"optimistic judge false-pass rate: {fpr_before:.3f} -> with log veto {fpr_after:.3f} (target: at most half)")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(results, fh, indent=2, default=float)
        print(f"wrote {args.out}")
    return results


if __name__ == "__main__":
    main()
