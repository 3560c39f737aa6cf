"""The Bridge gate on the real can episode and the negatives derived from it.

Replays Kosmos-Bridge-v1's gate (its spec's ``gate`` section, the ``world.camera`` model at
the frame size, the shipped commands consistent with the video integrated from their start
pose) over the real 37-frame episode, its frozen, panned and time-shuffled copies, and the real
frames paired with the commands permuted in time (10 seeded permutations). Reports the share of
world calls that pass and whether the episode passes (the env stops at the first rejection),
with 4 actions per call as the env runs and 1 per call, at several frame sizes.

    python bench/bridge_gate_real.py [--out bench/results/bridge_gate_real.txt]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys

import numpy as np

from _report import load_average, save  # bench/_report.py: the script's folder is on sys.path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None, help="also write the report to this file")
    args = p.parse_args()
    import cv2

    from kosmos_env.checks.bridge_gate import load_reference_commands, replay_gate
    from kosmos_env.checks.bridge_reference import load_real_episode, negative
    from kosmos_env.spec import load_spec
    from kosmos_env.worlds.bridge_camera import bridge_calibration

    spec = load_spec("Kosmos-Bridge-v1")
    ref = load_reference_commands()
    ep = load_real_episode()
    sources = {"real": ep.frames, **{k: negative(k, ep).frames for k in ("frozen", "panned", "shuffled")}}
    lines = [
        f"command: python bench/{os.path.basename(__file__)} " + " ".join(sys.argv[1:]),
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, load {load_average()}",
        f"gate: Kosmos-Bridge-v1 (spec {spec.hash[:12]}) gate section, world.camera {spec.world['camera']['setup']}, "
        f"commands {ref['episode']} reference ({len(ref['actions'])} actions)",
        "",
    ]
    for size in ((192, 256), (480, 640)):
        cal = bridge_calibration(spec.world["camera"], size)
        frames = {
            k: np.stack([cv2.resize(f, (size[1], size[0]), interpolation=cv2.INTER_AREA) for f in v])
            for k, v in sources.items()
        }
        for chunk in (4, 1):
            lines.append(f"[{size[0]}x{size[1]}, {chunk} action(s) per call]")
            for kind, fr in frames.items():
                out = replay_gate(spec.gate, fr, ref["actions"], cal, ref["start_ee_pos"], chunk=chunk)
                checks = sorted(set(out["check"].tolist()) - {"ok"})
                lines.append(
                    f"  {kind:<9} calls pass {out['passed'].mean():6.1%} ({int(out['passed'].sum())}/{len(out['passed'])}), "
                    f"episode {'PASSES' if out['passed'].all() else 'rejected'}"
                    f"{' (' + ', '.join(checks) + ')' if checks else ''}"
                )
            rng = np.random.default_rng(0)
            passed, episodes = [], []
            for _ in range(10):
                perm = ref["actions"][rng.permutation(len(ref["actions"]))]
                out = replay_gate(spec.gate, frames["real"], perm, cal, ref["start_ee_pos"], chunk=chunk)
                passed.append(out["passed"].mean())
                episodes.append(out["passed"].all())
            lines.append(
                f"  real frames, commands permuted in time (10 permutations): calls pass {np.mean(passed):6.1%}, "
                f"episodes pass {np.mean(episodes):6.1%}"
            )
            lines.append("")
    text = "\n".join(lines)
    print(text)
    save(text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
