"""``kosmos-env export``: a campaign's rollouts, or ``train-policy`` demonstrations, as a LeRobot dataset.

The dataset is LeRobot's current format (codebase version v3.0, LeRobot 0.4): parquet rows of
``action`` (the env's 7-D action), ``observation.state``, ``timestamp``, ``frame_index``,
``episode_index``, ``index`` and ``task_index``, the camera as MP4 (``observation.images.image``),
the instruction as the task string, fps from the env spec, and meta/ (info, stats, tasks,
episodes). Load it with ``LeRobotDataset(repo_id, root=OUT)``. OUT must be new (or empty).

    kosmos-env export runs/c1 datasets/c1
    kosmos-env export runs/c1 datasets/c1-success --outcome success --policy scripted
    kosmos-env export --demos runs/bc/demos.npz datasets/demos

From a campaign, ``observation.state`` is the robot log ([ee_x, ee_y, ee_z, gripper]) measured
after the previous action, so each episode starts at its second action (the state before the
first is not stored). Demonstrations hold the full 7-D state before every action.
"""

from __future__ import annotations

import argparse
import json


def add_parser(subparsers) -> None:
    from kosmos_env.export.sources import DEFAULT_CAMERA, OUTCOMES

    p = subparsers.add_parser(
        "export",
        help="write a campaign's rollouts or train-policy demonstrations as a LeRobot dataset",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run", nargs="?", metavar="RUN", help="campaign folder (kosmos-env eval --out)")
    p.add_argument("out", metavar="OUT", help="the dataset folder to write (new, or empty)")
    p.add_argument(
        "--demos", metavar="DEMOS.npz", help="export these train-policy demonstrations instead of a campaign"
    )
    p.add_argument("--format", choices=["lerobot"], default="lerobot", help="dataset format (default lerobot)")
    p.add_argument(
        "--camera",
        default=DEFAULT_CAMERA,
        help=f"camera name: the video feature is observation.images.<camera> (default {DEFAULT_CAMERA})",
    )
    p.add_argument("--policy", action="append", metavar="LABEL", help="only this policy's episodes (repeatable)")
    p.add_argument(
        "--outcome", action="append", choices=list(OUTCOMES), help="only episodes with this outcome (repeatable)"
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kosmos_env.export.lerobot import check_out_folder
    from kosmos_env.export.sources import campaign_source, demos_source, export_lerobot

    out = args.out
    if args.demos:
        if args.run is not None:
            raise ValueError("with --demos give only the dataset folder: kosmos-env export --demos DEMOS.npz OUT")
        if args.policy:
            raise ValueError("--policy picks a campaign's policies; a demonstrations file has one")
        check_out_folder(out)  # before any reading
        source = demos_source(args.demos, camera=args.camera, outcomes=args.outcome)
        what = f"demonstrations {args.demos}"
    else:
        if args.run is None:
            raise ValueError("give the campaign folder and a new dataset folder: kosmos-env export RUN OUT")
        check_out_folder(out)
        source = campaign_source(args.run, camera=args.camera, policies=args.policy, outcomes=args.outcome)
        what = f"campaign {args.run}"
    report = export_lerobot(source, out)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 0
    left_out = ", ".join(f"{n} {why}" for why, n in sorted(report.skipped.items())) or "none"
    print(
        f"exported {report.episodes} episodes ({report.frames} frames, {report.tasks} tasks) of {what} as a "
        f"LeRobot v3.0 dataset in {report.out} ({report.data_files} data file(s), {report.video_files} video "
        f"file(s)); left out: {left_out}"
    )
    print(f"load it with: LeRobotDataset('local/{_name(report.out)}', root='{report.out}')")
    return 0


def _name(path: str) -> str:
    from pathlib import Path

    return Path(path).name
