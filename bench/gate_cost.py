"""Cost of the action-consistency gate next to a tabletop env step, measured in the same run.

Runs scripted episodes on Kosmos-Tabletop-v1 with the gate off, timing every ``env.step``;
then replays the gate (the spec's thresholds) on exactly those steps' inputs, timing every
``check``. Interleaving by episode keeps machine load comparable for both. Prints both means
and their ratio (the acceptance bar is < 10%).

    python bench/gate_cost.py [--episodes 8] [--image-size 128] [--out bench/results/gate_cost.txt]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from _report import save  # bench/_report.py: the script's folder is on sys.path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--image-size", type=int, default=128)
    p.add_argument("--out", default=None, help="also write the report to this file")
    args = p.parse_args()

    import gymnasium

    import kosmos_env  # noqa: F401
    from kosmos_env.gate import ConsistencyGate
    from kosmos_env.policies import make_policy

    size = (args.image_size, args.image_size)
    env = gymnasium.make("Kosmos-Tabletop-v1", image_size=size, gate={"enabled": False})
    base = env.unwrapped
    gate = ConsistencyGate.from_spec(base.kosmos_spec.to_dict()["gate"])
    tasks = base.task_names
    step_times, gate_times = [], []
    for ep in range(args.episodes):
        policy = make_policy("scripted", skill=[1.0, 0.6, 0.3][ep % 3])
        obs, _ = env.reset(seed=ep, options={"task": tasks[ep % len(tasks)]})
        policy.reset(obs["instruction"], seed=ep)
        calls = []
        prev = obs["image"]
        done = False
        while not done:
            action = policy.act(obs)
            t0 = time.perf_counter()
            obs, _, terminated, truncated, info = env.step(action)
            step_times.append(time.perf_counter() - t0)
            rollout_log = {"ee_pos": obs["ee_pos"][None]}
            calls.append((prev, info["frames"], action[None], rollout_log))
            prev = obs["image"]
            done = terminated or truncated
        gate.reset()
        for prev_frame, frames, actions, log in calls:
            t0 = time.perf_counter()
            gate.check(prev_frame, frames, actions, base.world.calibration, log)
            gate_times.append(time.perf_counter() - t0)
    env.close()

    step_ms, gate_ms = 1e3 * np.mean(step_times), 1e3 * np.mean(gate_times)
    lines = [
        f"gate cost on Kosmos-Tabletop-v1 at {size[0]}x{size[1]} ({len(step_times)} steps, {args.episodes} episodes, "
        f"scripted skills 1.0/0.6/0.3; {platform.processor() or platform.machine()}, Python {platform.python_version()})",
        f"env.step (gate off): mean {step_ms:.3f} ms, median {1e3 * np.median(step_times):.3f} ms",
        f"gate.check:          mean {gate_ms:.3f} ms, median {1e3 * np.median(gate_times):.3f} ms, "
        f"p95 {1e3 * np.percentile(gate_times, 95):.3f} ms",
        f"ratio gate / env step (means): {gate_ms / step_ms:.3f}  (acceptance: < 0.10); "
        f"ratio of medians: {np.median(gate_times) / np.median(step_times):.3f}",
    ]
    text = "\n".join(lines)
    print(text)
    save(text, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
