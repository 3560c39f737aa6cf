"""`kosmos-env gate-check`: validate the action-consistency gate on the tabletop world.

One command runs every control the gate must pass, seeded end to end:

1. **Recording.** Scripted policies at several skills and the random policy run on every task
   with the gate off; frames, commanded actions and the robot log are kept.
2. **True vs shuffled commands.** The gate replays each episode with its true commands, then
   with the same frames paired with shuffled commands (``permuted``: the episode's own
   commands permuted in time; ``swapped``: another episode's commands, permuted in time). It
   reports step and episode pass rates and the AUROC of the gate's score (true = positive),
   on steps the gate can check (the paired command moves the gripper visibly) and on all steps.
3. **Frozen frames and camera pans.** At every step, with the gate's state after the true
   history, the new frame is replaced by the previous one (frozen) or by the previous one
   shifted with ``cv2.warpAffine`` (a pan of 2-8 px at 128 px, the arm still). Rejection
   rates are reported for steps whose command exceeds the gate's motion threshold, and for
   all steps.
4. **Calibration-free mode.** The same controls with the calibration and the robot log
   withheld (how the gate runs on a generated Bridge world).
5. **Campaign.** Scripted policies at several skills run as a small campaign in three worlds,
   each with and without the gate: the true world; a world that executes another episode's
   actions (permuted in time) instead of the commanded ones; and a world that ignores the
   command and shows an expert (scripted, skill 1) solving the task, the failure that makes
   every policy look perfect. Success rates that survive the gate (successes in non-discarded
   episodes over all episodes) must collapse in the command-ignoring worlds and stay put in
   the true one.

Defaults take about 2 minutes on 2 CPU cores at 128x128.
"""

from __future__ import annotations

import argparse
import json

DEFAULT_POLICIES = "scripted:skill=1.0,scripted:skill=0.6,scripted:skill=0.3,scripted:skill=0.0,random"
DEFAULT_CAMPAIGN_SKILLS = "1.0,0.6,0.3"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "gate-check",
        help="validate the action-consistency gate (true vs shuffled commands, "
        "frozen frames, camera pans, shuffled-command campaign)",
        description="Run every control the action-consistency gate must pass on a simulated world, "
        "seeded end to end: true vs shuffled commands (AUROC, pass rates), frozen frames "
        "and camera pans, the calibration-free mode, and a small campaign in the true "
        "world and in two worlds that ignore the command. About 2 minutes on 2 CPU cores.",
    )
    p.add_argument(
        "--env", default="Kosmos-Tabletop-v1", help="env id with a simulated (tabletop) world (default: %(default)s)"
    )
    p.add_argument(
        "--policies",
        default=DEFAULT_POLICIES,
        help="';'- or ','-separated policies as name[:k=v] recorded for the replay controls (default: %(default)s)",
    )
    p.add_argument("--tasks", default=None, help="comma-separated tasks (default: every task of the suite)")
    p.add_argument("--seeds", type=int, default=3, help="episodes per policy and task (default: %(default)s)")
    p.add_argument(
        "--seed-offset",
        "--seed",
        dest="seed",
        type=int,
        default=None,
        metavar="K",
        help="first episode seed, as `eval --seed-offset` (the campaign control starts at K + 1000); shuffles "
        "and pans use it too (default: 100000, the first evaluation seed of kosmos_env/study/seed_ranges.json)",
    )
    p.add_argument("--image-size", type=int, default=128, help="square frame size (default: %(default)s)")
    p.add_argument(
        "--campaign-skills",
        default=DEFAULT_CAMPAIGN_SKILLS,
        help="scripted skills for the campaign, comma-separated; empty to skip (default: %(default)s)",
    )
    p.add_argument(
        "--campaign-seeds", type=int, default=3, help="campaign episodes per skill and task (default: %(default)s)"
    )
    p.add_argument("--gate-json", default=None, help="JSON file with gate thresholds to use instead of the env spec's")
    # --json is a switch here as everywhere else (the report as JSON on stdout); the older
    # `--json FILE` still writes the file, and --json-out FILE says so explicitly
    p.add_argument(
        "--json",
        dest="json_flag",
        nargs="?",
        const=True,
        default=None,
        metavar="FILE",
        help="print every number as JSON instead of the text report (with FILE: write them there, "
        "as --json-out FILE does)",
    )
    p.add_argument("--json-out", dest="json_out", default=None, metavar="FILE", help="also write every number to FILE")
    p.add_argument("--strict", action="store_true", help="exit 1 when an acceptance criterion fails")
    from kosmos_env.plugins import add_global_flag_hints

    add_global_flag_hints(p)  # `eval --allow-import` says the flag goes before the command
    p.set_defaults(func=run)


def json_targets(args: argparse.Namespace) -> tuple[bool, str | None]:
    """(print the report as JSON instead of text, file to write the numbers to): ``--json`` alone is
    the switch; ``--json FILE`` (the older form) and ``--json-out FILE`` write the file."""
    if isinstance(args.json_flag, str):  # the older `--json FILE`: the text report, and the numbers in FILE
        return False, args.json_out or args.json_flag
    return args.json_flag is True, args.json_out


def run(args: argparse.Namespace) -> int:
    from kosmos_env.checks.controls import format_gate_check, gate_check, json_default, load_gate_spec, parse_policies

    from kosmos_env.utils.seed_ranges import evaluation_start

    gate_spec = load_gate_spec(args.env, args.gate_json)
    first_seed = evaluation_start() if args.seed is None else args.seed
    skills = [float(s) for s in args.campaign_skills.split(",") if s.strip()]
    report = gate_check(
        args.env,
        gate_spec,
        parse_policies(args.policies),
        args.tasks.split(",") if args.tasks else None,
        args.seeds,
        first_seed,
        args.image_size,
        skills,
        args.campaign_seeds,
    )
    print_json, json_out = json_targets(args)
    if print_json:
        print(json.dumps(report, indent=2, default=json_default))
    else:
        print(format_gate_check(report))
    if json_out:
        with open(json_out, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2, default=json_default)
    return 1 if args.strict and not all(a["ok"] for a in report["acceptance"].values()) else 0
