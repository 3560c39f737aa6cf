"""``kosmos-env train-policy``: train an image-conditioned closed-loop policy inside an env.

Stages: ``bc`` records demonstrations of a weak scripted policy in the simulator
(``Kosmos-Tabletop-v1`` at 64x64) and behaviour-clones a small CNN policy on them; ``ppo``
fine-tunes a checkpoint (``--init``, or the ``bc`` stage's) with stable-baselines3 PPO in
``--env`` under the ``--reward`` mode; ``both`` runs one after the other. Every checkpoint is a
``.safetensors`` file that loads as a policy: ``--policy ckpt:path=FILE``::

    kosmos-env train-policy --stage both --env Kosmos-TabletopLearned-v1 --reward progress \\
        --demos demos.npz --steps 20000 --n-envs 2 --checkpoint-every 10 --out runs/learned_progress
"""

from __future__ import annotations

import sys
from pathlib import Path


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "train-policy",
        help="behaviour-clone and PPO-fine-tune a CNN policy inside an env (CPU)",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--env", default="Kosmos-Tabletop-v1", help="env id PPO trains in (default Kosmos-Tabletop-v1)")
    p.add_argument("--stage", choices=["bc", "ppo", "both"], default="both", help="what to run (default both)")
    p.add_argument(
        "--demos", default=None, help="demonstrations .npz: read if it exists, else recorded and written there"
    )
    # defaults chosen on tuning seeds (bench/results/train_in_world/pilot.txt): fewer or noisier
    # demonstrations, or fewer steps, gave a clone that solved nothing
    p.add_argument("--demo-skill", type=float, default=0.8, help="skill of the scripted demonstrator (default 0.8)")
    p.add_argument("--demo-seeds", type=int, default=100, help="demonstration seeds per task (default 100)")
    p.add_argument(
        "--demo-seed-start",
        type=int,
        default=300000,
        help="first demonstration seed (default 300000: training seeds, apart from evaluation seeds)",
    )
    p.add_argument("--bc-steps", type=int, default=6000, help="behaviour-cloning gradient steps (default 6000)")
    p.add_argument("--frame-stack", type=int, default=1, help="frames the network sees (default 1)")
    p.add_argument("--init", default=None, metavar="CKPT", help="checkpoint PPO starts from (--stage ppo)")
    p.add_argument(
        "--reward",
        choices=["terminal", "progress", "oracle"],
        default=None,
        help="reward mode of the env (spec override; default: the spec's own, terminal)",
    )
    p.add_argument(
        "--terminate-on-success",
        action="store_true",
        help="end an episode once the step signal says success (progress/oracle only)",
    )
    p.add_argument(
        "--success-threshold",
        type=float,
        default=0.5,
        help="step signal that counts as success with --terminate-on-success (default 0.5)",
    )
    p.add_argument(
        "--success-patience",
        type=int,
        default=3,
        help="consecutive steps at or above the threshold before the episode ends (default 3, chosen on "
        "tuning seeds: the frame judge sees success while the object is still held over its target)",
    )
    p.add_argument(
        "--init-log-std",
        type=float,
        default=-2.3,
        help="PPO's exploration log-std at the start (default -2.3: wider noise than the cloned actor's "
        "error turns every rollout into a failure; bench/results/train_in_world/pilot.txt)",
    )
    p.add_argument("--steps", type=int, default=20000, help="PPO env steps in total (default 20000)")
    p.add_argument("--n-envs", type=int, default=2, help="envs stepped side by side (default 2)")
    p.add_argument("--n-steps", type=int, default=64, help="steps per env per PPO update (default 64)")
    p.add_argument("--batch-size", type=int, default=64, help="PPO minibatch (default 64)")
    p.add_argument(
        "--checkpoint-every", type=int, default=10, help="save a checkpoint every N PPO updates (default 10)"
    )
    p.add_argument("--horizon", type=int, default=None, help="episode length override for PPO and demos (spec field)")
    p.add_argument("--seed", type=int, default=0, help="training seed (default 0)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--out", default="policy_run", help="output folder (default policy_run)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def run(args) -> int:
    problem = _check(args)
    if problem:
        print(f"kosmos-env train-policy: error: {problem}", file=sys.stderr)
        return 2
    from kosmos_env.training import bc, demos, ppo

    out = Path(args.out)
    horizon = {"horizon": args.horizon} if args.horizon is not None else {}
    init = args.init
    if args.stage in ("bc", "both"):
        if args.demos and Path(args.demos).is_file():
            recorded = demos.Demos.load(args.demos)
            print(f"read {recorded.n_episodes} demonstration episodes from {args.demos}", file=sys.stderr)
        else:
            recorded = demos.record_demos(
                policy=f"scripted:skill={args.demo_skill}",
                seeds_per_task=args.demo_seeds,
                seed_start=args.demo_seed_start,
                env_kwargs={**demos.DEFAULT_DEMO_KWARGS, **horizon},
                out=args.demos,
                progress=not args.quiet,
            )
        rate = float((recorded.success == 1).mean()) if recorded.n_episodes else 0.0
        cfg = bc.BCConfig(steps=args.bc_steps, seed=args.seed, threads=args.threads, frame_stack=args.frame_stack)
        init = str(bc.behaviour_clone(recorded, out / "bc.safetensors", cfg, progress=not args.quiet))
        print(
            f"behaviour cloning on {len(recorded)} steps of {recorded.n_episodes} episodes "
            f"(demonstrator success {rate:.2f}) -> {init}"
        )
    if args.stage in ("ppo", "both"):
        reward = ppo.reward_override(args.reward)
        if args.terminate_on_success:
            reward = {
                **(reward or {}),
                "terminate_on_success": True,
                "success_threshold": args.success_threshold,
                "success_patience": args.success_patience,
            }
        paths = ppo.finetune_ppo(
            args.env,
            init,
            reward=reward,
            total_steps=args.steps,
            n_envs=args.n_envs,
            seed=args.seed,
            out_dir=out,
            checkpoint_every=args.checkpoint_every,
            env_kwargs=horizon,
            config=ppo.PPOConfig(
                n_steps=args.n_steps, batch_size=args.batch_size, threads=args.threads, init_log_std=args.init_log_std
            ),
            progress=not args.quiet,
        )
        print(
            f"PPO in {args.env}: {len(paths)} checkpoints in {out}/ (last {paths[-1].name}); "
            f"learning curve {out / 'curve.png'}"
        )
    return 0


def _check(args) -> str | None:
    """The first problem with the arguments, as one line (None when they are fine)."""
    for flag in (
        "steps",
        "n_envs",
        "n_steps",
        "batch_size",
        "checkpoint_every",
        "demo_seeds",
        "bc_steps",
        "frame_stack",
        "threads",
    ):
        if getattr(args, flag) < 1:
            return f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}"
    if args.horizon is not None and args.horizon < 1:
        return f"--horizon must be >= 1, got {args.horizon}"
    if not 0.0 <= args.demo_skill <= 1.0:
        return f"--demo-skill must be in [0, 1], got {args.demo_skill}"
    if args.stage == "ppo" and not args.init:
        return "--stage ppo fine-tunes a checkpoint: give --init CKPT (or use --stage both)"
    if args.stage != "ppo" and args.init:
        return "--init is for --stage ppo (stage bc and both train their own starting checkpoint)"
    if not 0.0 <= args.success_threshold <= 1.0:
        return f"--success-threshold must be in [0, 1], got {args.success_threshold}"
    if args.success_patience < 1:
        return f"--success-patience must be >= 1, got {args.success_patience}"
    if args.terminate_on_success and args.reward in (None, "terminal"):
        return "--terminate-on-success needs --reward progress or oracle (a per-step success signal)"
    if args.init:
        from kosmos_env.policies.checkpoint import read_checkpoint_meta

        try:
            read_checkpoint_meta(args.init)
        except ValueError as exc:
            return f"--init: {exc}"
    return None
