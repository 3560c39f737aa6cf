"""Tuning pilots for the training recipe: behaviour cloning and PPO settings, scored on TUNING seeds only.

One pilot = one setting: demonstrations (scripted demonstrator, training seeds), behaviour cloning,
then (optionally) PPO in the simulator with a reward mode, every checkpoint scored by true success
at the horizon in the simulator on tuning units ``(task, 325000 + 1000 * task_index + j)``,
``j < --tune-units``. Nothing here reads an evaluation seed: these pilots choose the defaults of
``kosmos-env train-policy`` and of ``bench/train_positive_control.py``, whose evaluation seeds are
registered apart.

Each stage caches its output under ``--cache`` (demonstrations and clones keyed by their settings)
and ``--out/<name>/`` (PPO checkpoints, scores), so a killed pilot resumes and pilots that share a
clone reuse it::

    MUJOCO_GL=egl python bench/train_recipe_pilot.py --name oracle_std --ppo-steps 49152
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

TASKS = ("spoon_on_towel", "carrot_on_plate", "stack_green_on_yellow", "eggplant_in_basket")
DEMO_SEED = 300000  # training range
TUNE_SEED = 325000  # tuning range (320000-329999); 320000-324999 served the earlier pilots


def tuning_units(n: int) -> list[tuple[str, int]]:
    return [(task, TUNE_SEED + 1000 * i + j) for i, task in enumerate(TASKS) for j in range(n)]


def _key(**fields) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]


def true_success(ckpt: Path, units) -> dict:
    from kosmos_env.policies import make_policy
    from kosmos_env.training.evaluate import TRUTH, rollout_units

    rows = rollout_units(lambda: make_policy("ckpt", path=str(ckpt)), TRUTH, units)
    wins = [bool(r["true_success"]) for r in rows]
    per_task = {t: sum(w for w, r in zip(wins, rows, strict=True) if r["task"] == t) for t in TASKS}
    return {"success": sum(wins) / len(wins), "n": len(wins), "per_task": per_task, "wins": wins}


def _dart_env_kwargs(level: float) -> dict:
    """The demonstration env with the simulator executing every command under translation/rotation
    noise of ``level`` (no gripper flips): the demonstrator corrects from states it would not reach alone,
    and its corrections are the labels (DART, Laskey et al. 2017)."""
    from kosmos_env.spec import load_spec
    from kosmos_env.worlds import make_world
    from kosmos_env.worlds.noisy import NoisyDynamicsWorld

    spec = load_spec("Kosmos-Tabletop-v1").with_overrides(image_size=[64, 64])
    return {"image_size": (64, 64), "world_model": NoisyDynamicsWorld(make_world(spec), level, flip_per_level=0.0)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--name", required=True)
    p.add_argument("--out", default="bench/results/train_recipe/pilots")
    p.add_argument("--cache", default="/tmp/kosmos_recipe_cache")
    p.add_argument("--demo-policy", default="scripted:skill=1.0")
    p.add_argument("--demos", type=int, default=100, help="demonstrations per task")
    p.add_argument(
        "--dart-level",
        type=float,
        default=0.0,
        help="record the demonstrations with the simulator executing them under this dynamics-noise level "
        "(kosmos_env.worlds.noisy, gripper never flipped); 0: plain demonstrations",
    )
    p.add_argument("--bc-steps", type=int, default=6000)
    p.add_argument("--bc-batch", type=int, default=64)
    p.add_argument("--bc-shift", type=int, default=2)
    p.add_argument("--bc-seed", type=int, default=0)
    p.add_argument("--reward", default="oracle", choices=["oracle", "progress"])
    p.add_argument("--ppo-steps", type=int, default=0, help="0: behaviour cloning only")
    p.add_argument("--n-envs", type=int, default=4)
    p.add_argument("--n-steps", type=int, default=256)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--target-kl", type=float, default=None)
    p.add_argument("--init-log-std", type=float, default=-2.3)
    p.add_argument("--critic-warmup", type=int, default=0)
    p.add_argument("--ent-coef", type=float, default=0.0)
    p.add_argument("--clip-range", type=float, default=0.2)
    p.add_argument("--checkpoint-every", type=int, default=12)
    p.add_argument("--seed", type=int, default=0, help="PPO seed")
    p.add_argument("--tune-units", type=int, default=25, help="tuning units per task")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)

    import torch

    from kosmos_env.training.bc import BCConfig, behaviour_clone
    from kosmos_env.training.demos import Demos, record_demos
    from kosmos_env.training.ppo import PPOConfig, finetune_ppo

    torch.set_num_threads(1)
    cache, out = Path(args.cache), Path(args.out) / args.name
    cache.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    units = tuning_units(args.tune_units)
    t0 = time.perf_counter()
    key = {"p": args.demo_policy, "n": args.demos, "s": DEMO_SEED}
    if args.dart_level > 0:  # DART: the demonstrator's commands are labels, a noisy execution of them the states
        key["dart"] = args.dart_level
    demo_path = cache / f"demos_{_key(**key)}.npz"
    if not demo_path.is_file():
        record_demos(
            policy=args.demo_policy,
            seeds_per_task=args.demos,
            seed_start=DEMO_SEED,
            out=demo_path,
            progress=False,
            env_kwargs=_dart_env_kwargs(args.dart_level) if args.dart_level > 0 else None,
        )
    demos = Demos.load(demo_path)
    bc_cfg = BCConfig(steps=args.bc_steps, batch=args.bc_batch, shift_px=args.bc_shift, seed=args.bc_seed)
    bc_path = cache / f"bc_{_key(d=demo_path.name, c=repr(bc_cfg))}.safetensors"
    if not bc_path.is_file():
        behaviour_clone(demos, bc_path, bc_cfg, progress=not args.quiet)
    summary_path = out / "pilot.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {"checkpoints": {}}
    summary.update(
        {
            "settings": {k: v for k, v in vars(args).items() if k not in ("quiet", "cache", "out")},
            "tuning_units": f"{TUNE_SEED}+1000*task+[0, {args.tune_units})",
            "demonstrations": f"{args.demo_policy}, {DEMO_SEED}+[0, {args.demos}) per task"
            + (f", executed under dynamics noise {args.dart_level} (DART)" if args.dart_level > 0 else ""),
            "demonstrator_success": float((demos.success == 1).mean()),
        }
    )
    if "start" not in summary["checkpoints"]:
        summary["checkpoints"]["start"] = {"env_steps": 0, **true_success(bc_path, units)}
        summary_path.write_text(json.dumps(summary, indent=1))
    print(f"{args.name}: start {summary['checkpoints']['start']['success']:.3f}", flush=True)
    if args.ppo_steps > 0:
        ppo_dir = out / "ppo"
        done = ppo_dir / "done.json"
        if not done.is_file():
            reward = {"mode": "oracle"} if args.reward == "oracle" else "progress"
            cfg = PPOConfig(
                n_steps=args.n_steps,
                batch_size=args.batch,
                n_epochs=args.epochs,
                learning_rate=args.lr,
                target_kl=args.target_kl,
                init_log_std=args.init_log_std,
                critic_warmup=args.critic_warmup,
                ent_coef=args.ent_coef,
                clip_range=args.clip_range,
            )
            t1 = time.perf_counter()
            paths = finetune_ppo(
                "Kosmos-Tabletop-v1",
                bc_path,
                reward=reward,
                total_steps=args.ppo_steps,
                n_envs=args.n_envs,
                seed=args.seed,
                out_dir=ppo_dir,
                checkpoint_every=args.checkpoint_every,
                env_kwargs={"gate": {"enabled": False}},
                config=cfg,
                progress=not args.quiet,
            )
            done.write_text(json.dumps({"checkpoints": [x.name for x in paths], "seconds": time.perf_counter() - t1}))
        info = json.loads(done.read_text())
        summary["ppo_seconds"] = round(info["seconds"], 1)
        for name in info["checkpoints"]:
            if name not in summary["checkpoints"]:
                from kosmos_env.policies.checkpoint import read_checkpoint_meta

                steps = int(read_checkpoint_meta(ppo_dir / name)["env_steps"])
                summary["checkpoints"][name] = {"env_steps": steps, **true_success(ppo_dir / name, units)}
                summary_path.write_text(json.dumps(summary, indent=1))
                print(f"{args.name}: {name} ({steps} steps) {summary['checkpoints'][name]['success']:.3f}", flush=True)
    summary["wall_seconds"] = round(time.perf_counter() - t0, 1)
    summary_path.write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
