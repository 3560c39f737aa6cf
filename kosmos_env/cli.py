"""The ``kosmos-env`` command. Each subcommand lives in ``kosmos_env/commands/<name>.py`` with
``add_parser(subparsers)`` (which sets ``func``) so this file stays a thin dispatcher."""

from __future__ import annotations

import argparse
import importlib
import re
import sys

# subcommand modules under kosmos_env.commands, in the order `--help` lists them
COMMANDS = [
    # run and inspect campaigns
    "eval",
    "verify",
    "report",
    "analyze",
    "compare",
    "rollout",
    "serve",
    "judge",  # re-judge a campaign's stored rollouts with another judge
    "export",  # rollouts or demonstrations as a LeRobot dataset
    # studies, publishing, leaderboard
    "register",
    "publish",
    "leaderboard",
    # the evaluator itself: gate, learned world, judges
    "doctor",
    "judge_check",
    "gate_check",
    "train_world",
    "study",
    "judge_label",
    "judge_distill",
    "judge_audit",
    "trust",
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
    parser.add_argument(
        "--allow-import",
        action="store_true",
        help="let a policy be named as 'module:Class' (imports that module; only for code you trust). "
        "Without it only registered policies (built-in or installed plug-ins) are accepted",
    )
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="let checkpoints that ask for trust_remote_code run their own Python code (only for code "
        "you trust); without it a policy, judge, protocol or registration asking for it is refused",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"kosmos_env.commands.{name}").add_parser(sub)
    _plain_help(parser)
    return parser


# reStructuredText markup that module docstrings (reused as command descriptions) carry: a terminal
# shows it raw, so ``x`` and :role:`x` print as x
_RST_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)
_RST_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")


def plain_text(text: str | None) -> str | None:
    if not text:
        return text
    return _RST_ROLE.sub(r"\1", _RST_LITERAL.sub(r"\1", text))


def _plain_help(parser: argparse.ArgumentParser) -> None:
    """Strip rst markup from every description and option help, in every subcommand, and give a
    subcommand without a description its one-line help as one (so `COMMAND --help` says what it does)."""
    parser.description = plain_text(parser.description)
    parser.epilog = plain_text(parser.epilog)
    for action in parser._actions:
        action.help = plain_text(action.help) if isinstance(action.help, str) else action.help
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, child in action.choices.items():
                if not child.description and helps.get(name):
                    child.description = helps[name][0].upper() + helps[name][1:] + "."
                _plain_help(child)
            for choice in action._choices_actions:
                choice.help = plain_text(choice.help)


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except ModuleNotFoundError as exc:
        # an optional package the command needs is not installed (a core install running `report`,
        # `doctor --tiny`, a Bridge `eval`): one line naming the extra, whichever command got there
        from kosmos_env.errors import missing_module_message

        message = missing_module_message(exc)
        if message is None:  # a module of kosmos-env itself, or one pyproject.toml does not name: a bug
            raise
        command = _command_name(argv)
        print(f"kosmos-env{f' {command}' if command else ''}: error: {message}", file=sys.stderr)
        return 2


def _command_name(argv: list[str] | None) -> str | None:
    names = {name.replace("_", "-") for name in COMMANDS}
    for word in sys.argv[1:] if argv is None else argv:
        if word in names:
            return word
    return None


def _main(argv: list[str] | None) -> int:
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
