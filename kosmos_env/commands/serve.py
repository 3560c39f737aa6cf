"""``kosmos-env serve [RUNS_DIR ...]``: a browser console for campaigns (needs the ``console`` extra).

Lists every campaign under RUNS_DIR (a campaign folder, or a folder of them; default ``runs``)
with its state and progress; a live view per campaign (queue, rollouts per hour, ETA, seconds
per stage, cost with the judge's share, ranking with intervals) pushed from the ledger as it
changes; an episode browser with each episode's video, actions, robot log, gate verdicts,
judge votes and provenance; the analysis of ``kosmos-env analyze`` with plots; side-by-side
comparison of two campaigns on the same spec hash; and a cancel control.

Ledgers are read read-only while campaigns run. The console listens on 127.0.0.1 unless
``--host ADDR --allow-remote`` is given. Cancelling needs the token printed at start-up
(or set $KOSMOS_CONSOLE_TOKEN); a cancelled campaign resumes when its eval command is rerun.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "serve",
        help="browser console: watch, browse, compare and cancel campaigns",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "dirs", nargs="*", type=Path, metavar="RUNS_DIR", help="campaign folders or folders of them (default: runs)"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a --host other than loopback (the console has no login: anyone who reaches it reads "
        "every campaign)",
    )
    p.add_argument("--port", type=int, default=8321, help="port (default: 8321; 0 picks a free one)")
    p.add_argument(
        "--reference",
        type=Path,
        default=None,
        metavar="FILE.csv",
        help="reference success rates (task, policy, reference) for the analysis pages' agreement section",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in 0..65535, got {args.port}")
    missing = [str(d) for d in (args.dirs or []) if not Path(d).is_dir()]
    if missing:  # a typo would otherwise serve an empty console that never shows a run
        raise FileNotFoundError(f"run folder(s) not found: {', '.join(missing)}")
    if args.reference is not None and not args.reference.is_file():
        raise FileNotFoundError(f"--reference {args.reference} not found")
    try:
        from kosmos_env.console.server import serve
    except ImportError as exc:
        raise RuntimeError(
            f"the console needs the console extra ({exc.name} is missing): pip install 'kosmos-env[console]'"
        ) from None
    try:
        serve(
            args.dirs or [Path("runs")],
            host=args.host,
            port=args.port,
            allow_remote=args.allow_remote,
            reference=args.reference,
        )
    except RuntimeError as exc:
        # the bind's OSError rides along as the context of the server's one-line error
        if _port_in_use(exc):
            raise RuntimeError(
                f"{exc}: another program holds it (a second `kosmos-env serve`?); give --port 0 to take a "
                f"free port (the console prints its address)"
            ) from None
        raise
    return 0


def _port_in_use(exc: BaseException) -> bool:
    import errno

    context = exc.__cause__ or exc.__context__
    return isinstance(context, OSError) and context.errno == errno.EADDRINUSE
