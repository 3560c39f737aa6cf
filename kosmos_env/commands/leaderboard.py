"""`kosmos-env leaderboard run|build`: a leaderboard whose verified entries the board earned itself.

run SUBMISSION... --board DIR --out DIR: each submission folder names a runnable policy in its
submission.json (a ckpt or sb3 file, a Hub repo at a pinned commit, a LeRobot folder, a remote
endpoint, or the builtin random/scripted baselines) and may carry its own results. The board copies
the policy into DIR and hashes it there, draws challenge seeds from the evaluation range with a
secret it keeps in DIR (created once; never from the submission), runs its own campaign on them,
and lists the policy "verified by re-run" with the numbers of its own episodes, named by the
identity it established (file sha256, repo@revision, folder hash, or a remote server's stated hash),
never by the submitter's label. The submission's own results are checked and shown beside them,
never ranked. A folder without submission.json is a results bundle: listed apart as self-reported.

build SUBMISSION... --out DIR: results bundles alone, every entry self-reported (nothing is run):
every file's sha256, the env spec hash, the design and every aggregate are checked, outcomes
re-derive from the stored artifacts (judge re-run, --replay N episodes replayed bit for bit, drawn
with --replay-seed, or a seed drawn per build: never from the submission's bytes).

Both write leaderboard.json and a self-contained index.html to --out; each entry says what was
re-run, what re-derived and what taken on trust; each episode counts once per board. Exit code 0
when every submission was accepted (and, for run, re-run), 1 when any was not (the page is still
written).
"""

from __future__ import annotations

import argparse
import sys


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "leaderboard",
        help="run submitted policies on the board's own challenge seeds, or list checked results",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    lsub = p.add_subparsers(dest="leaderboard_command", metavar="ACTION")
    r = lsub.add_parser(
        "run",
        help="evaluate each submitted policy on challenge seeds and write the leaderboard",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument(
        "submissions",
        nargs="+",
        metavar="SUBMISSION",
        help="submission folders (submission.json naming the policy), or results bundles (self-reported)",
    )
    r.add_argument(
        "--board",
        required=True,
        metavar="DIR",
        help="the board's private folder: its secret, arrivals, staged policies and campaigns (never publish it)",
    )
    r.add_argument("--out", required=True, help="output folder for leaderboard.json and index.html (public)")
    r.add_argument("--env", default="Kosmos-Tabletop-v1", help="the env every policy runs in (default %(default)s)")
    r.add_argument("--tasks", nargs="+", default=None, metavar="TASK", help="tasks (default: the suite's all)")
    r.add_argument("--seeds", type=int, default=20, help="challenge seeds drawn per arrival (default %(default)s)")
    r.add_argument("--image-size", nargs=2, type=int, default=None, metavar=("H", "W"), help="image size override")
    r.add_argument("--video", action="store_true", help="keep the board's rollout videos")
    r.add_argument("--workers", type=int, default=1, help="parallel workers per campaign (default %(default)s)")
    r.add_argument(
        "--hub-mirror",
        default=None,
        metavar="DIR",
        help="read Hub repos from DIR/<owner>/<name>/<revision>/ instead of downloading them",
    )
    r.add_argument(
        "--allow-remote",
        action="store_true",
        help="contact remote endpoints that submissions name (otherwise they are not re-run)",
    )
    _common(r)
    r.set_defaults(func=run_run)
    b = lsub.add_parser(
        "build",
        help="check results bundles and list them as self-reported (no policy is run)",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    b.add_argument(
        "submissions",
        nargs="+",
        metavar="SUBMISSION",
        help="submission folders (a campaign folder, or a published results/<env>/<spec>/<campaign>/ folder)",
    )
    b.add_argument("--out", required=True, help="output folder for leaderboard.json and index.html")
    b.add_argument(
        "--replay-seed",
        type=int,
        default=None,
        help="seed of the replay sample (default: one drawn for this build and recorded in leaderboard.json)",
    )
    _common(b)
    b.set_defaults(func=run_build)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-overrides",
        action="store_true",
        help="accept results with spec overrides or a non-default judge; they get their own boards",
    )
    p.add_argument("--json", action="store_true", help="print leaderboard.json to stdout as well")
    p.add_argument(
        "--replay",
        default=None,
        metavar="N|all",
        help="simulator episodes of self-reported results replayed per bundle "
        "(default kosmos_env.publish.validate.DEFAULT_REPLAY_SAMPLE)",
    )


def _replay(args: argparse.Namespace):
    from kosmos_env.campaign.rederive import replay_count
    from kosmos_env.publish.validate import DEFAULT_REPLAY_SAMPLE

    return DEFAULT_REPLAY_SAMPLE if args.replay is None else replay_count(args.replay)


def run_run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kosmos_env.publish.board import MAX_CHALLENGE_SEEDS, BoardSettings
    from kosmos_env.publish.leaderboard import run_leaderboard
    from kosmos_env.utils.fileio import check_writable_path

    replay = _replay(args)
    if not 1 <= args.seeds <= MAX_CHALLENGE_SEEDS:
        raise ValueError(f"--seeds must be in [1, {MAX_CHALLENGE_SEEDS}], got {args.seeds}")
    if args.workers < 1:
        raise ValueError(f"--workers must be at least 1, got {args.workers}")
    board, out = Path(args.board).resolve(), Path(args.out).resolve()
    if out == board or board in out.parents or out in board.parents:
        raise ValueError("--out is published and --board holds the board's secret: give two separate folders")
    if args.hub_mirror is not None and not Path(args.hub_mirror).is_dir():
        raise ValueError(f"--hub-mirror {args.hub_mirror} is not a folder")
    check_writable_path(args.out)
    check_writable_path(args.board, "--board")
    tasks = [t for item in args.tasks or [] for t in item.split(",") if t] or None
    settings = BoardSettings(
        env_id=args.env,
        tasks=tuple(tasks) if tasks else None,
        seeds=args.seeds,
        image_size=tuple(args.image_size) if args.image_size else None,
        video=args.video,
        workers=args.workers,
    )
    data = run_leaderboard(
        args.submissions,
        args.board,
        settings,
        hub_mirror=args.hub_mirror,
        allow_remote=args.allow_remote,
        allow_overrides=args.allow_overrides,
        replay_sample=replay,
        progress=False,
    )
    return _report(data, args)


def run_build(args: argparse.Namespace) -> int:
    from kosmos_env.publish.leaderboard import build_leaderboard
    from kosmos_env.utils.fileio import check_writable_path

    import secrets

    replay = _replay(args)
    check_writable_path(args.out)  # a file or read-only folder fails before any submission is checked
    # a seed drawn per build (recorded in leaderboard.json): no submitter can know which episodes it picks
    seed = secrets.randbelow(2**31) if args.replay_seed is None else args.replay_seed
    data = build_leaderboard(
        args.submissions,
        allow_overrides=args.allow_overrides,
        progress=len(args.submissions) > 5,
        replay_sample=replay,
        replay_seed=seed,
    )
    return _report(data, args)


def _report(data: dict, args: argparse.Namespace) -> int:
    import json

    from kosmos_env.publish.leaderboard import write_leaderboard

    js, page = write_leaderboard(data, args.out)
    for r in data["rejected"]:
        print(f"REJECTED {r['submission']} ({r['check']}): {r['reason']}", file=sys.stderr)
    for board in data["boards"]:
        kind = "official" if board["official"] else "non-default"
        standing = "verified by re-run" if board["standing"] == "verified_by_rerun" else "self-reported"
        print(f"{board['env_id']} spec {board['spec_hash'][:12]} ({kind}, {standing}):")
        for e in board["entries"]:
            rate = "-" if e["success_rate"] is None else f"{100 * e['success_rate']:.1f}%"
            ci = "" if not e["wilson_95"] else f" [{100 * e['wilson_95'][0]:.1f}, {100 * e['wilson_95'][1]:.1f}]"
            tie = "  (not separable from next)" if e["separable_from_next"] is False else ""
            named = [x for x in e.get("submitted_as") or [] if x != e["policy"]]
            also = f"  submitted as {', '.join(named)}" if named else ""
            print(f"  {e['rank']:>3}  {e['policy']}  {rate}{ci}  n={e['n']}  campaign {e['campaign_id']}{also}{tie}")
    print(
        f"{len(data.get('runs') or [])} re-run, {len(data['accepted'])} self-reported accepted, "
        f"{len(data['rejected'])} rejected -> {js}, {page}"
    )
    if args.json:
        print(json.dumps(data, indent=1))
    return 1 if data["rejected"] else 0
