"""Object error of two learned-tabletop weights on the same held-out episodes, by policy group.

Issue 41 item 1 asks for "per-step object error under closed-loop control" per world version. Both
worlds run open loop from each held-out episode's first frame on the commands the simulator
recorded (the same replay `kosmos-env train-world` reports), and the object centre the world
predicts is compared with the simulator's, per step. Episodes are those of the merged training
data whose *seeds* were held out from v2's training (`split_by_seed`, the same 15 %: seeds 14, 15
of each task): v1 never saw these seeds either. Their policies are the world pool's (clone 2's
lineage and the scripted mix), so this measures held-out *scenes*, not held-out *policies*.

Reported per group (closed-loop checkpoints, scripted), per world: the median object error (cm)
at steps 10, 20, 40 (the mean is dominated by the few objects knocked off the table, which fall
far), the share of episodes whose object ends within 2 cm of the simulator's, and v2 minus v1 on
that share with a 95 % bootstrap interval paired over episodes (2000 resamples, seed 0).

    python bench/world_v2_object_error.py --data EPISODES.npz --weights-a V1.safetensors --weights-b V2.safetensors \
        --out bench/results/world_v2/object_error.md
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def per_episode_error(weights: str, data, world) -> np.ndarray:
    """(episodes, steps) object-centre error in cm, the world open loop on the recorded commands."""
    import torch

    from kosmos_env.worlds.tabletop_learned.engine import Engine
    from kosmos_env.worlds.tabletop_learned.model import load_weights

    torch.set_num_threads(1)
    model, _ = load_weights(weights)
    model.eval()
    E, T1 = data.frames.shape[:2]
    out = np.zeros((E, T1 - 1))
    engine = Engine(model, world, 1)
    with torch.no_grad():
        for i in range(0, E, 128):
            ep = np.arange(i, min(i + 128, E))
            engine.start(data.frames[ep, 0], data.task[ep], [data.task_params[e] for e in ep])
            for t in range(T1 - 1):
                engine.step(data.actions[ep, t], render=False)
                out[ep, t] = np.linalg.norm(engine.obj.numpy() - data.object_pos[ep, t + 1], axis=1) * 100.0
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True)
    p.add_argument("--weights-a", required=True, help="the first world's weights (v1)")
    p.add_argument("--weights-b", required=True, help="the second world's weights (v2)")
    p.add_argument("--names", nargs=2, default=["v1", "v2"])
    p.add_argument("--holdout", type=float, default=0.15)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)

    from kosmos_env.spec import load_spec
    from kosmos_env.worlds.tabletop_learned import dataset as ds
    from kosmos_env.worlds.tabletop_learned import train as tr

    episodes = ds.Episodes.load(args.data)
    _, held = ds.split_by_seed(episodes, args.holdout)
    world = load_spec(ds.REFERENCE_ENV).world
    data = tr.prepare(held, world)
    names = [held.policy_names[i] for i in held.policy]
    group = np.array(["closed_loop" if n.startswith("ckpt") else "scripted" for n in names])
    errs = {
        args.names[0]: per_episode_error(args.weights_a, data, world),
        args.names[1]: per_episode_error(args.weights_b, data, world),
    }
    rng = np.random.default_rng(0)
    lines = [
        f"# Object error, {args.names[0]} vs {args.names[1]}, on {len(held)} held-out episodes",
        "",
        f"command: python bench/world_v2_object_error.py --data {args.data} --weights-a {args.weights_a} "
        f"--weights-b {args.weights_b} --names {' '.join(args.names)}",
        f"held-out seeds: {sorted(set(int(s) for s in held.seed))} (v2's training split; v1 never saw them either)",
        "",
        "| group | episodes | world | median cm at step 10 / 20 / 40 | ends within 2 cm |",
        "|---|---|---|---|---|",
    ]
    summary = {}
    for g in ("closed_loop", "scripted", "all"):
        idx = np.arange(len(held)) if g == "all" else np.flatnonzero(group == g)
        within = {}
        for w, e in errs.items():
            med = [float(np.median(e[idx, t - 1])) for t in (10, 20, 40)]
            within[w] = (e[idx, -1] <= 2.0).astype(float)
            lines.append(
                f"| {g} | {len(idx)} | {w} | {med[0]:.1f} / {med[1]:.1f} / {med[2]:.1f} | {within[w].mean():.2f} |"
            )
            summary.setdefault(g, {})[w] = {"median_cm": med, "within_2cm": float(within[w].mean()), "n": int(len(idx))}
        a, b = within[args.names[0]], within[args.names[1]]
        draws = rng.integers(0, len(idx), size=(2000, len(idx)))
        diff = (b[draws] - a[draws]).mean(axis=1)
        lo, hi = np.quantile(diff, [0.025, 0.975])
        summary[g]["difference_within_2cm"] = {"estimate": float((b - a).mean()), "interval": [float(lo), float(hi)]}
        lines.append(
            f"| {g} | | {args.names[1]} − {args.names[0]} | | {float((b - a).mean()):+.2f} [{lo:+.2f}, {hi:+.2f}] |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
        with open(args.out.rsplit(".", 1)[0] + ".json", "w") as fh:
            json.dump(summary, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
