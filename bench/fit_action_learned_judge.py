"""Fit the learned action-only judge (kosmos_env.judges.action_learned) on simulator episodes.

    python bench/fit_action_learned_judge.py            # record, fit, write the coefficients
    python bench/fit_action_learned_judge.py --refit    # fit again from the recorded episodes

Episodes: every policy of the study's default population (scripted family, random, deceptive,
closed-loop checkpoints) on every task of Kosmos-Tabletop-v1, labelled by the simulator's ground
truth. Fitting uses training seeds only (50000 + 1000 * task + i); the regularisation strength C
is chosen on tuning seeds (250000 + 1000 * task + i) by the lowest log loss there (ties: the
smaller C, the simpler model). Evaluation seeds are never touched. scikit-learn's
LogisticRegression (lbfgs) on standardised features; the judge itself predicts with numpy.

Writes judges/action_learned_coefficients.json (the shipped file) and
bench/results/action_learned_judge/{episodes.npz, README.md, fit.json}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "bench" / "results" / "action_learned_judge"
C_GRID = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)


def record(policies, tasks, seeds_of, progress=True):
    from tqdm import tqdm

    from kosmos_env.policies import make_policy, parse_policy_arg
    from kosmos_env.rollouts import run_episode
    from kosmos_env.study.run import _make_env

    env = _make_env("Kosmos-Tabletop-v1")
    acts, task_i, truth, pol_i, seeds = [], [], [], [], []
    jobs = [(p, t, s) for p in policies for t in tasks for s in seeds_of(t)]
    built = {p: make_policy(n, **kw) for p, (n, kw) in ((p, parse_policy_arg(p)) for p in policies)}
    try:
        for p, t, s in tqdm(jobs, desc="simulator episodes", disable=not progress):
            r = run_episode(env, built[p], seed=s, task=t)
            a = np.zeros((40, 7), np.float32)
            n = min(40, len(r.rollout.actions))
            a[:n] = np.asarray(r.rollout.actions)[:n]
            acts.append(a)
            seeds.append(s)
            task_i.append(tasks.index(t))
            pol_i.append(policies.index(p))
            truth.append(bool((r.ground_truth or {}).get("success", False)))
            assert n == len(r.rollout.actions), "episodes longer than 40 steps: raise the buffer"
    finally:
        env.close()
    return {
        "actions": np.asarray(acts),
        "n_steps": np.asarray([40] * len(acts)),
        "task": np.asarray(task_i),
        "policy": np.asarray(pol_i),
        "seed": np.asarray(seeds),
        "truth": np.asarray(truth),
    }


def wilson(k, n, z=1.959964):
    if n == 0:
        return [None, None]
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [float(c - h), float(c + h)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train-seeds", type=int, default=10, help="training seeds per (policy, task)")
    ap.add_argument("--tune-seeds", type=int, default=4, help="tuning seeds per (policy, task)")
    ap.add_argument("--refit", action="store_true", help="reuse bench/results/action_learned_judge/episodes.npz")
    args = ap.parse_args()
    os.environ.setdefault("MUJOCO_GL", "egl")
    import torch
    from sklearn import __version__ as sk_version
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss

    from kosmos_env.judges.action_learned import BASE_FEATURES, action_features
    from kosmos_env.judges.action_only import ActionOnlyJudge, action_log
    from kosmos_env.judges.robot_log import analyse_log
    from kosmos_env.study.seed_ranges import check_seeds
    from kosmos_env.study.run import DEFAULT_POLICIES

    torch.set_num_threads(1)
    import gymnasium

    import kosmos_env  # noqa: F401
    from kosmos_env.spec import load_spec

    env = gymnasium.make("Kosmos-Tabletop-v1")
    tasks = list(env.unwrapped.task_names)
    env.close()
    policies = list(DEFAULT_POLICIES)
    train_seeds = {t: [50000 + 1000 * k + i for i in range(args.train_seeds)] for k, t in enumerate(tasks)}
    tune_seeds = {t: [250000 + 1000 * k + i for i in range(args.tune_seeds)] for k, t in enumerate(tasks)}
    check_seeds([s for v in train_seeds.values() for s in v], "training", "fitting seeds")
    check_seeds([s for v in tune_seeds.values() for s in v], "tuning", "tuning seeds")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    cache = OUT_DIR / "episodes.npz"
    t0 = time.perf_counter()
    if args.refit and cache.is_file():
        with np.load(cache, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    else:
        tr = record(policies, tasks, lambda t: train_seeds[t])
        tu = record(policies, tasks, lambda t: tune_seeds[t])
        data = {**{f"train_{k}": v for k, v in tr.items()}, **{f"tune_{k}": v for k, v in tu.items()}}
        np.savez_compressed(cache, **data)
    record_s = time.perf_counter() - t0
    world = load_spec("Kosmos-Tabletop-v1").world

    def feats(split):
        acts, ti = data[f"{split}_actions"], data[f"{split}_task"]
        return np.stack(
            [
                action_features(a, tasks[k], tasks, world["home_tcp"], world["workspace"])
                for a, k in zip(acts, ti, strict=True)
            ]
        ), data[f"{split}_truth"].astype(int)

    Xtr, ytr = feats("train")
    Xtu, ytu = feats("tune")
    mean, scale = Xtr.mean(axis=0), Xtr.std(axis=0)
    scale = np.where(scale > 1e-9, scale, 1.0)
    Ztr, Ztu = (Xtr - mean) / scale, (Xtu - mean) / scale
    grid = []
    for C in C_GRID:
        m = LogisticRegression(C=C, max_iter=5000).fit(Ztr, ytr)
        p = m.predict_proba(Ztu)[:, 1]
        grid.append(
            {
                "C": C,
                "tune_log_loss": float(log_loss(ytu, p, labels=[0, 1])),
                "tune_accuracy": float(((p >= 0.5) == ytu).mean()),
            }
        )
    best = min(grid, key=lambda g: (round(g["tune_log_loss"], 4), g["C"]))
    model = LogisticRegression(C=best["C"], max_iter=5000).fit(Ztr, ytr)
    p_tu = model.predict_proba(Ztu)[:, 1]
    acc_tu = int(((p_tu >= 0.5) == ytu).sum())
    rule = ActionOnlyJudge.from_world(world)
    rule_tu = int(
        sum(
            bool(analyse_log(action_log(a, rule.home, rule.workspace), rule.thresholds).success) == bool(y)
            for a, y in zip(data["tune_actions"], ytu, strict=True)
        )
    )
    n_tu = len(ytu)
    features = list(BASE_FEATURES) + [f"task={t}" for t in tasks]
    fit = {
        "policies": policies,
        "tasks": tasks,
        "training_seeds": "50000 + 1000 * task_index + i, i < %d" % args.train_seeds,
        "tuning_seeds": "250000 + 1000 * task_index + i, i < %d" % args.tune_seeds,
        "n_training_episodes": int(len(ytr)),
        "training_success_rate": float(ytr.mean()),
        "n_tuning_episodes": n_tu,
        "tuning_success_rate": float(ytu.mean()),
        "C_grid": grid,
        "chosen_C": best["C"],
        "decision_rule": "lowest tuning log loss (rounded to 1e-4); ties: smaller C",
        "tuning_accuracy": acc_tu / n_tu,
        "tuning_accuracy_wilson95": wilson(acc_tu, n_tu),
        "rule_action_only_tuning_accuracy": rule_tu / n_tu,
        "rule_action_only_tuning_wilson95": wilson(rule_tu, n_tu),
        "sklearn": sk_version,
        "record_seconds": record_s,
    }
    coefficients = {
        "about": "kosmos_env.judges.action_learned: logistic regression on command-stream features; "
        "fitted by bench/fit_action_learned_judge.py on simulator episodes from training seeds",
        "features": features,
        "tasks": tasks,
        "mean": mean.tolist(),
        "scale": scale.tolist(),
        "coef": model.coef_[0].tolist(),
        "intercept": float(model.intercept_[0]),
        "threshold": 0.5,
        "fit": {
            k: fit[k]
            for k in (
                "training_seeds",
                "tuning_seeds",
                "n_training_episodes",
                "chosen_C",
                "decision_rule",
                "tuning_accuracy",
                "sklearn",
            )
        },
    }
    (ROOT / "judges" / "action_learned_coefficients.json").write_text(json.dumps(coefficients, indent=1) + "\n")
    (OUT_DIR / "fit.json").write_text(json.dumps(fit, indent=1) + "\n")
    lines = [
        "# Learned action-only judge: fit",
        "",
        "Command: `python bench/fit_action_learned_judge.py` (1 torch thread, MUJOCO_GL=egl).",
        "",
        f"- Population: the study's {len(policies)} default policies on {len(tasks)} tasks of Kosmos-Tabletop-v1.",
        f"- Training: {len(ytr)} episodes, seeds {fit['training_seeds']} (training range); success rate {ytr.mean():.3f}.",
        f"- Tuning: {n_tu} episodes, seeds {fit['tuning_seeds']} (tuning range); success rate {ytu.mean():.3f}.",
        f"- Decision rule for C: {fit['decision_rule']}. Chosen C = {best['C']}.",
        f"- Tuning accuracy: learned {acc_tu / n_tu:.3f} [{fit['tuning_accuracy_wilson95'][0]:.3f}, "
        f"{fit['tuning_accuracy_wilson95'][1]:.3f}] vs the action-only rule {rule_tu / n_tu:.3f} "
        f"[{fit['rule_action_only_tuning_wilson95'][0]:.3f}, {fit['rule_action_only_tuning_wilson95'][1]:.3f}] "
        "(Wilson 95 %).",
        "",
        "| C | tuning log loss | tuning accuracy |",
        "|---|---|---|",
    ]
    lines += [f"| {g['C']} | {g['tune_log_loss']:.4f} | {g['tune_accuracy']:.3f} |" for g in grid]
    lines += [
        "",
        "Evaluation seeds were not used. Episodes are kept in episodes.npz (actions, task, policy, seed, truth).",
    ]
    (OUT_DIR / "README.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
