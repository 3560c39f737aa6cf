"""The ``kosmos-env`` command. Each subcommand lives in ``kosmos_env/commands/<name>.py`` with
``add_parser(subparsers)`` (which sets ``func``) so this file stays a thin dispatcher."""
from __future__ import annotations

import argparse
import importlib
import sys

# subcommand modules under kosmos_env.commands, in the order `--help` lists them
COMMANDS = [
    # run and inspect campaigns
    "eval", "verify", "report", "analyze", "compare", "rollout", "serve",
    "judge",  # re-judge a campaign's stored rollouts with another judge
    # studies, publishing, leaderboard
    "register", "publish", "leaderboard",
    # the evaluator itself: gate, learned world, judges
    "doctor", "judge_check", "gate_check", "train_world", "study", "judge_label", "judge_distill", "judge_audit", "trust",
    # policies trained inside the envs (behaviour cloning, PPO)
    "train_policy",
    # policies served out of process
    "serve_policy",
]


def build_parser() -> argparse.ArgumentParser:
    from kosmos_env import __version__

    parser = argparse.ArgumentParser(
        prog="kosmos-env",
        description="Rank robot manipulation policies inside world models, and measure the evaluator itself.",
    )
    parser.add_argument("--version", action="version", version=f"kosmos-env {__version__}")
    parser.add_argument("--allow-import", action="store_true",
                        help="let a policy be named as 'module:Class' (imports that module; only for code you trust). "
                             "Without it only registered policies (built-in or installed plug-ins) are accepted")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="let checkpoints that ask for trust_remote_code run their own Python code (only for code "
                             "you trust); without it a policy, judge, protocol or registration asking for it is refused")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"kosmos_env.commands.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if args.allow_import:  # an environment variable, so campaign worker processes inherit the opt-in
        import os

        from kosmos_env.plugins import ALLOW_IMPORT_ENV

        os.environ[ALLOW_IMPORT_ENV] = "1"
    if args.trust_remote_code:  # an environment variable too, so worker processes inherit the permission
        import os

        from kosmos_env.plugins import TRUST_REMOTE_CODE_ENV

        os.environ[TRUST_REMOTE_CODE_ENV] = "1"
    try:
        return int(args.func(args) or 0)
    except (ValueError, RuntimeError, OSError) as exc:
        # user-facing errors (OSError: a path that cannot be read or written, a network failure):
        # one clear line, no traceback
        print(f"kosmos-env {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
