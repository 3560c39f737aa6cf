"""The scripted baselines give a known ground-truth ranking on the tabletop (issue 2 acceptance)."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest

from kosmos_env.policies import make_policy
from kosmos_env.policies.scripted import ScriptedPolicy
from kosmos_env.rollouts import run_episode

TASKS = ["spoon_on_towel", "carrot_on_plate", "stack_green_on_yellow", "eggplant_in_basket"]


def success_rate(policy, task: str, seeds: range, size: int = 128) -> float:
    env = gymnasium.make("Kosmos-Tabletop-v1", task=task, image_size=(size, size))
    wins = [bool(run_episode(env, policy, seed).judgment["success"]) for seed in seeds]
    env.close()
    return float(np.mean(wins))


@pytest.mark.slow
@pytest.mark.parametrize("task", TASKS)
def test_skill_sweep_is_monotone_and_scripted_solves_the_task(task):
    # 12 seeds keep the suite inside CI's budget on a loaded 2-core machine (25 seeds took ~4 min a
    # task there); the margins between skills are wide enough that the ordering holds at 12
    seeds = range(12)
    rates = {skill: success_rate(ScriptedPolicy(skill=skill), task, seeds) for skill in (1.0, 0.6, 0.3, 0.0)}
    random_rate = success_rate(make_policy("random"), task, seeds)
    print(f"{task}: " + ", ".join(f"skill {s}: {r:.2f}" for s, r in rates.items()) + f", random: {random_rate:.2f}")
    assert rates[1.0] >= 0.8
    assert random_rate <= 0.1
    assert rates[1.0] >= rates[0.6] >= rates[0.3] >= rates[0.0]


def test_scripted_sees_only_the_observation():
    """The policy localises objects from pixels: it matches the simulator within a centimetre."""
    env = gymnasium.make("Kosmos-Tabletop-v1", task="carrot_on_plate")
    obs, _ = env.reset(seed=3)
    world = env.unwrapped.world
    policy = ScriptedPolicy(skill=1.0)
    policy.reset(obs["instruction"], seed=3)
    carrot = policy.locate(obs["image"], [0.95, 0.45, 0.05], 0.012)
    truth = world.data.xpos[world._object_body][:2]
    assert np.linalg.norm(carrot[0] - truth) < 0.01
    # without the simulator, a camera-only view of another task's scene is still handled
    with pytest.raises(ValueError, match="does not know"):
        policy.reset("fold the laundry")


def test_scripted_is_seeded():
    env = gymnasium.make("Kosmos-Tabletop-v1", task="spoon_on_towel", image_size=(64, 64))
    a = run_episode(env, ScriptedPolicy(skill=0.5), seed=4).rollout.actions
    b = run_episode(env, ScriptedPolicy(skill=0.5), seed=4).rollout.actions
    np.testing.assert_array_equal(a, b)


def test_skill_bounds():
    with pytest.raises(ValueError, match="skill"):
        ScriptedPolicy(skill=1.5)
