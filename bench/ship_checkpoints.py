"""Copy the closed-loop checkpoints of the validity study's population into the package.

The study's population needs image-conditioned, closed-loop policies spread across true success
(trained in the simulator and in the learned world). They come from ``bench/train_in_world.py``
(``bench/results/train_in_world``) plus one weaker behaviour clone; this script copies the chosen
files to ``policies/checkpoints/`` (installed as ``kosmos_env/policies/checkpoints``, used as
``ckpt:shipped=NAME``) and writes ``manifest.json``: where each was trained, with which reward, its
env steps, sha256, and its true success on the training bench's evaluation units (330000+) with a
95 % Wilson interval, where that bench measured it.

    python bench/ship_checkpoints.py [--weak-bc /tmp/bcweak/bc.safetensors]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "bench" / "results" / "train_in_world"
DEST = ROOT / "policies" / "checkpoints"

#: name -> (source file under SRC, trained in, reward, eval json holding its truth or None)
CHOSEN = {
    "bc_clone_6000": ("start_bc.safetensors", "behaviour cloning (no environment)", "none", "arm_A/eval_start_bc.json"),
    "sim_judge_ppo_3072": (
        "arm_A/ppo_update_0012.safetensors",
        "Kosmos-Tabletop-v1 (simulator)",
        "frame judge",
        "arm_A/eval_ppo_update_0012.json",
    ),
    "sim_judge_ppo_9216": (
        "arm_A/ppo_update_0036.safetensors",
        "Kosmos-Tabletop-v1 (simulator)",
        "frame judge",
        "arm_A/eval_ppo_update_0036.json",
    ),
    "world_judge_ppo_3072": (
        "arm_B/ppo_update_0012.safetensors",
        "Kosmos-TabletopLearned-v1 (learned world)",
        "frame judge",
        "arm_B/eval_ppo_update_0012.json",
    ),
    "world_judge_ppo_12288": (
        "arm_B/ppo_update_0048.safetensors",
        "Kosmos-TabletopLearned-v1 (learned world)",
        "frame judge",
        "arm_B/eval_ppo_update_0048.json",
    ),
    "sim_oracle_ppo_9216": (
        "arm_D/ppo_update_0036.safetensors",
        "Kosmos-Tabletop-v1 (simulator)",
        "oracle (ground truth)",
        "arm_D/eval_ppo_update_0036.json",
    ),
}


def main() -> int:
    from kosmos_env.hashing import sha256_file
    from kosmos_env.policies.checkpoint import load_checkpoint
    from kosmos_env.stats import wilson

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weak-bc", default=None, help="a behaviour clone trained with fewer steps (bc_clone_2000)")
    args = ap.parse_args()
    chosen = {name: (SRC / f, where, reward, SRC / ev) for name, (f, where, reward, ev) in CHOSEN.items()}
    if args.weak_bc:
        chosen["bc_clone_2000"] = (Path(args.weak_bc), "behaviour cloning (no environment)", "none", None)
    DEST.mkdir(parents=True, exist_ok=True)
    entries = []
    for name, (src, where, reward, ev) in chosen.items():
        _, meta = load_checkpoint(src)
        dest = DEST / f"{name}.safetensors"
        shutil.copyfile(src, dest)
        entry = {
            "name": name,
            "file": dest.name,
            "sha256": sha256_file(dest),
            "trained_in": where,
            "reward": reward,
            "stage": meta["stage"],
            "env_steps": meta["env_steps"],
        }
        if name == "bc_clone_2000":
            entry["recipe"] = (
                "kosmos-env train-policy --stage bc --demos bench/results/train_in_world/demos.npz "
                "--bc-steps 2000 --threads 1 --out /tmp/bcweak (the bench's demonstrations and "
                "recipe, a third of its 6000 behaviour-cloning steps)"
            )
        if ev is not None and ev.is_file():
            truth = json.loads(ev.read_text())["truth"]
            k, n = int(sum(bool(t["true_success"]) for t in truth)), len(truth)
            iv = wilson(k, n)
            lo, hi = iv.lower, iv.upper
            entry["true_success_eval"] = {
                "successes": k,
                "units": n,
                "rate": k / n,
                "wilson95": [lo, hi],
                "seeds": "330000 + 1000*task + [0, 10)",
                "source": str(ev.relative_to(ROOT)),
            }
        else:
            entry["true_success_eval"] = None  # measured by the validity study itself
        entries.append(entry)
    (DEST / "manifest.json").write_text(
        json.dumps(
            {
                "command": "python bench/ship_checkpoints.py" + (f" --weak-bc {args.weak_bc}" if args.weak_bc else ""),
                "checkpoints": entries,
            },
            indent=1,
        )
        + "\n"
    )
    for e in entries:
        t = e["true_success_eval"]
        truth = "measured by the study" if t is None else "{:.2f} [{:.2f}, {:.2f}]".format(t["rate"], *t["wilson95"])
        print(f"{e['name']}: {e['trained_in']}, reward {e['reward']}, true success {truth}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
