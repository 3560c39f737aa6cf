"""True success of policy-pool manifest entries on TUNING units: does the held-out population span
the success range the study needs (issue 41: about 0.1-0.8)? Never reads an evaluation seed.

    MUJOCO_GL=egl nice -n 10 python bench/world_v2_spread.py --names r1_bc r1_D_u48 --units-per-task 5

Units are ``325000 + 1000*task + [0, n)``, the first of the recipe pilots' tuning units, so a
number here sits beside the pilots' 100-unit numbers (``tuning_success`` in the manifest). True
success: the simulator's state judge at step 40, deterministic policy (``training.evaluate.TRUTH``).
Each policy's result is written as soon as it is measured; a rerun skips the names already there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
ROOT = Path(__file__).resolve().parents[1]
TASKS = ("spoon_on_towel", "carrot_on_plate", "stack_green_on_yellow", "eggplant_in_basket")
TUNE_SEED = 325000


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", default="bench/results/world_v2/policy_pools.json")
    ap.add_argument("--names", nargs="+", required=True, help="manifest entry names to measure")
    ap.add_argument("--units-per-task", type=int, default=5)
    ap.add_argument("--out", default="bench/results/world_v2/tuning_spread.json")
    args = ap.parse_args(argv)

    import torch

    from kosmos_env.policies import make_policy, parse_policy_arg
    from kosmos_env.stats import wilson
    from kosmos_env.training.evaluate import TRUTH, rollout_units
    from kosmos_env.training.world_data import load_manifest
    from kosmos_env.utils.seed_ranges import check_seeds

    torch.set_num_threads(1)
    manifest = load_manifest(ROOT / args.manifest)
    entries = {e["name"]: (pool, e) for pool, es in manifest["pools"].items() for e in es}
    unknown = [n for n in args.names if n not in entries]
    if unknown:
        print(f"error: {unknown[0]} is not an entry of {args.manifest}", file=sys.stderr)
        return 2
    units = [(t, TUNE_SEED + 1000 * i + j) for i, t in enumerate(TASKS) for j in range(args.units_per_task)]
    check_seeds([s for _, s in units], "tuning", "spread units")
    out = ROOT / args.out
    results = json.loads(out.read_text()) if out.is_file() else {"units": None, "policies": {}}
    results["units"] = f"{TUNE_SEED} + 1000*task + [0, {args.units_per_task}) ({len(units)} units, tuning range)"
    for name in args.names:
        if name in results["policies"] and results["policies"][name]["units"] == len(units):
            continue
        pool, entry = entries[name]
        t0 = time.perf_counter()
        pname, kwargs = parse_policy_arg(entry["spec"])
        rows = rollout_units(lambda pname=pname, kwargs=kwargs: make_policy(pname, **kwargs), TRUTH, units)
        wins = sum(bool(r["true_success"]) for r in rows)
        iv = wilson(wins, len(rows))
        results["policies"][name] = {
            "pool": pool,
            "successes": wins,
            "units": len(rows),
            "rate": wins / len(rows),
            "wilson95": [round(iv.lower, 3), round(iv.upper, 3)],
            "seconds": round(time.perf_counter() - t0, 1),
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1) + "\n")
        r = results["policies"][name]
        print(
            f"{name} ({pool}): {wins}/{len(rows)} = {r['rate']:.2f} [{iv.lower:.2f}, {iv.upper:.2f}], {r['seconds']:.0f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
