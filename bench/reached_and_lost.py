"""How many episodes reach success and lose it again before the horizon: why training ends no episode early.

Rolls a checkpoint (default: the chosen recipe pilot's last) on the recipe's tuning units
``(task, 325000 + 1000 * task_index + j)``, ``j < 25``, in the simulator with the oracle signal
(``info["progress"]`` is the ground truth after every step), and counts episodes that succeed at
some step, at the horizon, and at some step but not at the horizon::

    MUJOCO_GL=egl python bench/reached_and_lost.py --out bench/results/train_recipe/reached_and_lost.txt
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

TASKS = ("spoon_on_towel", "carrot_on_plate", "stack_green_on_yellow", "eggplant_in_basket")
PILOT = "bench/results/train_recipe/pilots/s10_d100_ppo_e8_ls16_cw2/ppo/ppo_update_0048.safetensors"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", default=PILOT, help="regenerate it with bench/train_recipe_pilot.py")
    p.add_argument("--units", type=int, default=25, help="tuning units per task")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    import gymnasium
    import torch

    import kosmos_env  # noqa: F401
    from _report import load_average, save
    from kosmos_env.policies import make_policy

    torch.set_num_threads(1)
    env = gymnasium.make("Kosmos-Tabletop-v1", image_size=(64, 64), reward={"mode": "oracle"}, gate={"enabled": False})
    policy = make_policy("ckpt", path=args.checkpoint)
    some = end = lost = n = 0
    for i, task in enumerate(TASKS):
        for j in range(args.units):
            seed = 325000 + 1000 * i + j
            obs, _ = env.reset(seed=seed, options={"task": task})
            policy.reset(obs["instruction"], seed=seed)
            reached = False
            while True:
                obs, _, terminated, truncated, info = env.step(policy.act(obs))
                reached = reached or info["progress"] >= 0.5
                if terminated or truncated:
                    break
            final = bool(info["ground_truth"]["success"])
            n, some, end, lost = n + 1, some + reached, end + final, lost + (reached and not final)
    env.close()
    text = (
        f"# bench/reached_and_lost.py --checkpoint {args.checkpoint} --units {args.units}\n"
        f"# tuning units 325000 + 1000*task + [0, {args.units}); load average {load_average()}\n"
        f"episodes {n}: succeeded at some step {some}, at the horizon (step 40) {end}, "
        f"reached success and lost it again {lost}\n"
    )
    print(text, end="")
    save(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
