"""The heavy version of the fault suite's kill test: many SIGKILLs of a process-pool campaign.

Runs an uninterrupted reference campaign (the real ``kosmos-env eval``, 2 pool workers), then the
same campaign in a fresh folder SIGKILLed ``--kills`` times at seeded random moments after each
run started, checking after every kill that no process of the killed tree survives, and once
more to the end. Prints what the test suite asserts on a small scale (episodes lost, recorded
twice, left in error, stray processes: all must be 0, and the finished ledger must equal the
reference) and the wall-clock of the killed runs against the reference's as a ratio.

    python bench/fault_kills.py [--kills 30] [--seeds 6] [--out bench/results/fault_kills.txt]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _report import load_average, save  # noqa: E402  bench/_report.py: the script's folder is on sys.path

from tests.support.faults import (  # noqa: E402
    attempt_counts,
    descendants,
    eval_argv,
    runs_started,
    spawn_cli,
    wait_gone,
)
from tests.support.campaign import ledger_rows  # noqa: E402

POLICY = "tests.support.campaign:SlowScripted:delay=0.0"
os.environ.setdefault("KOSMOS_ENV_ALLOW_IMPORT", "1")  # POLICY is a module:Class name: the explicit opt-in


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=30)
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--seed", type=int, default=18, help="seed of the kill moments")
    ap.add_argument("--out", default=None, help="also write the report to this file")
    args = ap.parse_args()
    lines = [f"load average before: {load_average()}"]
    argv = lambda out: eval_argv(  # noqa: E731
        out,
        "--workers",
        "2",
        "--executor",
        "process",
        policies=(POLICY,),  # noqa: E731
        seeds=args.seeds,
    )
    with tempfile.TemporaryDirectory() as tmp:
        ref_dir, out = Path(tmp) / "reference", Path(tmp) / "killed"
        t0 = time.time()
        proc = spawn_cli(argv(ref_dir))
        _, err = proc.communicate()
        reference_s = time.time() - t0
        if proc.returncode != 0:
            print(err[-3000:], file=sys.stderr)
            return 1
        reference = ledger_rows(ref_dir)
        rng = random.Random(args.seed)
        kills = strays = 0
        t0 = time.time()
        for i in range(args.kills):
            proc = spawn_cli(argv(out))
            while runs_started(out) <= i and proc.poll() is None:
                time.sleep(0.02)
            moment = time.time() + rng.uniform(0.0, 4.0)
            tree: set[int] = set()
            while time.time() < moment and proc.poll() is None:
                tree |= descendants(proc.pid)
                time.sleep(0.05)
            if proc.poll() is not None:
                break
            tree |= descendants(proc.pid)
            os.kill(proc.pid, signal.SIGKILL)
            proc.communicate()
            kills += 1
            left = wait_gone(tree, timeout=60)
            strays += len(left)
            for pid in left:
                os.kill(pid, signal.SIGKILL)
        proc = spawn_cli(argv(out))
        _, err = proc.communicate()
        killed_s = time.time() - t0
        rows = ledger_rows(out)
        attempts = attempt_counts(out)
        ok = attempts.get("ok", {})
        lost = sum(1 for eid in reference if rows.get(eid, ("",))[0] != "done")
        twice = sum(1 for n in ok.values() if n > 1)
        errors = sum(1 for r in rows.values() if r[1] == "error")
        lines += [
            f"campaign: 1 policy x 1 task x {args.seeds} seeds, 2 pool workers, 64x64; final run exit {proc.returncode}",
            f"kills landed: {kills} of {args.kills} (seed {args.seed})",
            f"episodes planned {len(reference)}, lost {lost}, recorded twice {twice}, in error {errors}, "
            f"stray processes after kills {strays}",
            f"finished ledger equals the uninterrupted reference: {rows == reference}",
            f"abandoned attempts taken over: {sum(attempts.get('abandoned', {}).values())}",
            f"wall clock: reference {reference_s:.1f} s, killed runs + final {killed_s:.1f} s "
            f"(ratio {killed_s / reference_s:.2f})",
            f"load average after: {load_average()}",
        ]
    text = "\n".join(lines)
    print(text)
    save(text, args.out)
    return 0 if (lost, twice, errors, strays) == (0, 0, 0, 0) and rows == reference else 1


if __name__ == "__main__":
    sys.exit(main())
