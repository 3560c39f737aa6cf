"""Re-judging a finished tabletop campaign with a second judge: 0 rollouts generated, side-by-side table.

Runs (or reuses) the quick-start campaign (4 policies x 4 tasks x 5 seeds = 80 episodes,
state judge = the simulator's ground truth), then ``kosmos-env judge RUN --judge robot_log``
and ``kosmos-env compare --judges RUN campaign robot_log``. Prints what re-judging cost next
to what the campaign cost, and the episode attempts and artifacts the ledger holds before and
after (re-judging must add none).

    python bench/rejudge.py [--out /tmp/rejudge-80] [--save bench/results/rejudge.txt]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("MUJOCO_GL", "egl")

from _report import load_average, save  # noqa: E402  (bench/_report.py)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/kosmos-rejudge-80")
    parser.add_argument("--save", default=None)
    args = parser.parse_args()
    from kosmos_env import cli
    from kosmos_env.campaign.judge_compare import compare_judges, format_comparison
    from kosmos_env.campaign.ledger import Ledger
    from kosmos_env.campaign.rejudge import rejudge

    lines = [f"load average before: {load_average()}"]
    t0 = time.perf_counter()
    argv = [
        "eval",
        "--policy",
        "scripted:skill=1.0",
        "--policy",
        "scripted:skill=0.6",
        "--policy",
        "scripted:skill=0.3",
        "--policy",
        "random",
        "--seeds",
        "5",
        "--workers",
        "2",
        "--no-progress",
        "--out",
        args.out,
    ]
    if cli.main(argv) != 0:
        raise SystemExit("the campaign failed")
    campaign_s = time.perf_counter() - t0
    with Ledger(os.path.join(args.out, "ledger.sqlite"), create=False) as ledger:
        before = (len(ledger.episodes("done")), len(ledger.attempts()), len(ledger.artifacts()))
    report = rejudge(args.out, {"type": "robot_log"})
    with Ledger(os.path.join(args.out, "ledger.sqlite"), create=False) as ledger:
        after = (len(ledger.episodes("done")), len(ledger.attempts()), len(ledger.artifacts()))
    lines += [
        f"campaign: {before[0]} episodes done (eval wall {campaign_s:.1f} s, includes a resume when the folder existed)",
        f"re-judge with robot_log [{report.judge_id}]: {report.judged_now} judged now, {report.already_judged} already, "
        f"of {report.eligible} judged episodes (not judgeable: {report.skipped or 'none'}), {report.seconds:.1f} s",
        f"ledger before / after re-judging: done episodes {before[0]} / {after[0]}, attempts {before[1]} / {after[1]}, "
        f"artifacts {before[2]} / {after[2]}  -> rollouts generated: {report.rollouts_generated}",
        "",
        format_comparison(compare_judges(args.out, "campaign", report.judge_id)),
        "",
        f"load average after: {load_average()}",
    ]
    text = "\n".join(lines)
    print(text)
    save(text, args.save)


if __name__ == "__main__":
    main()
