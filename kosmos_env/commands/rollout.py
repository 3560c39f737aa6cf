"""`kosmos-env rollout`: run one policy on one task for N seeds, write MP4s, print the success rate."""

from __future__ import annotations

import argparse
import json
import os
import sys


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rollout",
        help="run a policy for N episodes on one task and write one MP4 per episode",
        description="Run one policy on one task for N seeds (no ledger, no ranking), write one MP4 per "
        "episode and summary.json, and print the success rate. For a paired comparison of "
        "policies use `kosmos-env eval`.",
    )
    p.add_argument("--env", default="Kosmos-Tabletop-v1", help="registered env id (default: %(default)s)")
    # the flags are spelled as `eval` spells them (--tasks, --seeds N from --seed-offset); the older
    # --task / --episodes / --seed stay as aliases so existing scripts keep working
    p.add_argument(
        "--tasks",
        "--task",
        dest="task",
        default=None,
        metavar="TASK",
        help="the task (one; default: the spec's default task)",
    )
    p.add_argument("--policy", default="scripted", help="policy as name[:k=v,...] (default: %(default)s)")
    p.add_argument(
        "--seeds",
        "--episodes",
        dest="episodes",
        type=int,
        default=5,
        metavar="N",
        help="number of episodes: N consecutive seeds from --seed-offset (default: %(default)s)",
    )
    p.add_argument(
        "--seed-offset",
        "--seed",
        dest="seed",
        type=int,
        default=None,
        metavar="K",
        help="first seed (default: 100000, the first evaluation seed of kosmos_env/study/seed_ranges.json, "
        "as `eval`; the same seed gives the same scene as an `eval` episode on it)",
    )
    p.add_argument("--out", required=True, help="output directory for MP4s and summary.json")
    p.add_argument("--no-video", action="store_true", help="skip writing MP4s")
    from kosmos_env.utils.threads import add_threads_argument

    add_threads_argument(p)
    from kosmos_env.plugins import add_global_flag_hints

    add_global_flag_hints(p)  # `eval --allow-import` says the flag goes before the command
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kosmos_env.utils.threads import choose_threads, threads_applied

    with threads_applied(choose_threads(1, given=args.threads).threads):  # before the policy or world loads torch
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    import gymnasium
    from tqdm import tqdm

    import kosmos_env  # noqa: F401  (registers the env ids)
    from kosmos_env.policies import make_policy, parse_policy_arg
    from kosmos_env.rollouts import run_episode
    from kosmos_env.utils.video import write_mp4

    from kosmos_env.utils.seed_ranges import evaluation_start, overlap_line

    if args.episodes < 1:
        raise ValueError("--seeds (--episodes) must be at least 1")
    first_seed = evaluation_start() if args.seed is None else args.seed
    if first_seed < 0:
        raise ValueError(f"--seed-offset must be at least 0, got {first_seed}")
    overlap = overlap_line(range(first_seed, first_seed + args.episodes))
    if overlap:
        print(f"kosmos-env rollout: note: {overlap}", file=sys.stderr)
    if args.task is not None and "," in args.task:
        raise ValueError(f"rollout runs one task; got --tasks {args.task!r} (use `kosmos-env eval` for several)")
    name, kwargs = parse_policy_arg(args.policy)
    policy = make_policy(name, **kwargs)
    env = gymnasium.make(args.env, task=args.task) if args.task else gymnasium.make(args.env)
    base = env.unwrapped
    os.makedirs(args.out, exist_ok=True)
    episodes = []
    successes = 0
    for i in tqdm(range(args.episodes), desc=f"{policy.name} on {base.task.name}", unit="ep", file=sys.stderr):
        seed = first_seed + i
        result = run_episode(env, policy, seed)
        success = bool(result.judgment and result.judgment.get("success"))
        successes += success
        video = None
        if not args.no_video:
            video = os.path.join(args.out, f"episode_{i:04d}.mp4")
            write_mp4(video, result.rollout.frames, base.metadata["render_fps"])
        episodes.append(
            {"seed": seed, "outcome": result.outcome, "success": success, "steps": result.steps, "video": video}
        )
    env.close()
    rate = successes / args.episodes
    summary = {
        "env_id": args.env,
        "spec_hash": base.spec_hash,
        "task": base.task.name,
        "policy": args.policy,
        "episodes": episodes,
        "success_rate": rate,
    }
    with open(os.path.join(args.out, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
    print(
        f"{args.policy} on {args.env}/{base.task.name}: success rate {rate:.2f} ({successes}/{args.episodes}), "
        f"spec {base.spec_hash[:12]}, videos in {args.out}"
    )
    return 0
