"""Reward modes as spec fields: terminal (evaluation, today's hashes), progress (a step judge's
potential-based shaping), oracle (the simulator's ground truth), terminate_on_success, and the
one-line errors for settings an env cannot honour."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch

import kosmos_env  # noqa: F401  (registers the env ids)
from kosmos_env.errors import SpecError
from kosmos_env.judges.vision_frame import TASKS, load_classifier, predict
from kosmos_env.policies import make_policy
from kosmos_env.spec import load_spec
from kosmos_env.worlds.base import WorldStep

torch.set_num_threads(1)

PROGRESS = {"mode": "progress", "step_judge": {"type": "vision_frame"}}


def _episode(env, seed: int, policy="scripted", skill=1.0):
    pol = make_policy(policy, skill=skill) if policy == "scripted" else make_policy(policy)
    obs, info = env.reset(seed=seed)
    pol.reset(obs["instruction"], seed=seed)
    steps = [(obs, 0.0, False, False, info)]
    while True:
        obs, r, term, trunc, info = env.step(pol.act(obs))
        steps.append((obs, r, term, trunc, info))
        if term or trunc:
            return steps


def test_default_reward_keeps_every_registered_hash_and_new_settings_change_it():
    for env_id in ("Kosmos-Tabletop-v1", "Kosmos-TabletopLearned-v1", "Kosmos-Bridge-v1"):
        spec = load_spec(env_id)
        assert "reward" not in spec.to_dict() and "reward" not in spec.canonical()
        assert spec.reward == {"mode": "terminal", "terminate_on_success": False}
        assert spec.with_overrides(reward={"mode": "terminal"}).hash == spec.hash
    spec = load_spec("Kosmos-TabletopLearned-v1")
    hashes = {
        spec.hash,
        spec.with_overrides(reward=PROGRESS).hash,
        spec.with_overrides(reward=dict(PROGRESS, terminate_on_success=True)).hash,
        spec.with_overrides(reward=dict(PROGRESS, terminate_on_success=True, success_threshold=0.9)).hash,
    }
    assert len(hashes) == 4
    # the filled-in default threshold is part of the hash: writing it out changes nothing
    assert (
        spec.with_overrides(reward=dict(PROGRESS, success_threshold=0.5)).hash
        == spec.with_overrides(reward=PROGRESS).hash
    )


def test_progress_without_a_step_judge_takes_the_worlds_default_and_moves_no_registered_hash():
    """Both tabletop worlds default to the frame classifier the training code uses; the filled-in spec
    is the one that names it, so its hash is too, and specs without a progress reward are untouched."""
    for env_id in ("Kosmos-Tabletop-v1", "Kosmos-TabletopLearned-v1"):
        spec = load_spec(env_id)
        bare = spec.with_overrides(reward={"mode": "progress"})
        assert bare.reward["step_judge"] == {"type": "vision_frame"}
        assert bare.hash == spec.with_overrides(reward=PROGRESS).hash != spec.hash
    env = gymnasium.make("Kosmos-TabletopLearned-v1", reward={"mode": "progress"}, horizon=2)
    _, info = env.reset(seed=3)
    _, _, _, _, info = env.step(np.array([0, 0, 0, 0, 0, 0, 1], dtype=np.float32))
    assert 0.0 <= info["progress"] <= 1.0


def test_progress_reward_is_the_step_judges_potential_difference_on_the_learned_world():
    env = gymnasium.make("Kosmos-TabletopLearned-v1", reward=PROGRESS, horizon=12)
    steps = _episode(env, seed=5)
    model = load_classifier()
    frames = np.stack([s[0]["image"] for s in steps])
    # the step judge reads only the world's frames: recompute its probabilities from the observations
    expected = predict(model, frames, [TASKS.index("carrot_on_plate")] * len(frames))
    progress = [s[4]["progress"] for s in steps]
    np.testing.assert_allclose(progress, expected, rtol=0, atol=1e-6)
    rewards = np.array([s[1] for s in steps[1:]])
    np.testing.assert_allclose(rewards, np.diff(expected), atol=1e-6)
    assert abs(rewards.sum() - (expected[-1] - expected[0])) < 1e-5
    last = steps[-1]
    assert last[3] and not last[2]  # no termination on success: the horizon ends it
    assert last[4]["judgment"]["judge"] == "robot_log"  # the spec's judge still gives the verdict
    assert len(steps) == 13


def test_terminate_on_success_ends_at_the_first_step_over_the_threshold():
    env = gymnasium.make(
        "Kosmos-Tabletop-v1",
        image_size=(64, 64),
        judge="vision_frame",
        reward=dict(PROGRESS, terminate_on_success=True, success_threshold=0.5),
    )
    steps = _episode(env, seed=1)
    progress = [s[4]["progress"] for s in steps]
    assert steps[-1][2] and not steps[-1][3]
    assert steps[-1][4]["terminated_by"] == "success"
    assert progress[-1] >= 0.5 and all(p < 0.5 for p in progress[:-1])
    assert len(steps) - 1 < env.unwrapped.kosmos_spec.horizon
    assert steps[-1][4]["judgment"] is not None  # judged as any finished episode
    # threshold 1.0 cannot be crossed by a sigmoid below 1: the same episode runs to the horizon
    env = gymnasium.make(
        "Kosmos-Tabletop-v1",
        image_size=(64, 64),
        judge="vision_frame",
        horizon=25,
        reward=dict(PROGRESS, terminate_on_success=True, success_threshold=1.0),
    )
    steps = _episode(env, seed=1)
    assert steps[-1][3] and not steps[-1][2] and len(steps) == 26


def test_success_patience_waits_for_consecutive_steps_over_the_threshold():
    reward = dict(PROGRESS, terminate_on_success=True, success_threshold=0.5, success_patience=3)
    env = gymnasium.make("Kosmos-Tabletop-v1", image_size=(64, 64), judge="vision_frame", reward=reward)
    steps = _episode(env, seed=1)
    over = [s[4]["progress"] >= 0.5 for s in steps[1:]]
    assert steps[-1][2] and steps[-1][4]["terminated_by"] == "success"
    assert over[-3:] == [True, True, True]
    # no earlier run of three: the env stopped at the first one
    assert not any(all(over[i : i + 3]) for i in range(len(over) - 3))


def test_threshold_rule_scores_the_first_crossing():
    from kosmos_env.training.threshold import TuningEpisode, choose_threshold, first_crossing, threshold_table

    assert first_crossing(np.array([0.2, 0.9, 0.1, 0.8, 0.8]), 0.7, 1) == 1
    assert first_crossing(np.array([0.2, 0.9, 0.1, 0.8, 0.8]), 0.7, 2) == 4
    assert first_crossing(np.array([0.2, 0.9, 0.1]), 0.95, 1) is None
    # a judge that flickers to "success" while the object is still held (step 1), then truly (3, 4)
    held_flicker = TuningEpisode(
        "carrot_on_plate", 0, "p", np.array([0.1, 0.9, 0.2, 0.9, 0.9]), np.array([False, False, False, True, True])
    )
    never = TuningEpisode("carrot_on_plate", 1, "p", np.array([0.1, 0.2, 0.1, 0.3, 0.2]), np.zeros(5, bool))
    table = threshold_table([held_flicker, never], candidates=(0.5, 0.95), patiences=(1, 2))
    row = {(r["threshold"], r["patience"]): r for r in table}
    assert row[(0.5, 1)]["precision"] == 0.0 and row[(0.5, 2)]["precision"] == 1.0
    assert row[(0.95, 1)]["crossed"] == 0 and row[(0.95, 1)]["f1"] == 0.0
    assert choose_threshold(table) == (0.5, 2)


def test_oracle_reward_reads_the_simulators_ground_truth():
    env = gymnasium.make(
        "Kosmos-Tabletop-v1", image_size=(64, 64), reward={"mode": "oracle", "terminate_on_success": True}
    )
    steps = _episode(env, seed=2)
    rewards = [s[1] for s in steps[1:]]
    assert steps[-1][2] and steps[-1][4]["terminated_by"] == "success"
    assert steps[-1][4]["ground_truth"]["success"] is True
    assert rewards[-1] == 1.0 and sum(rewards) == 1.0 and all(r == 0.0 for r in rewards[:-1])
    assert steps[-1][4]["judgment"]["success"] is True  # the state judge agrees with the truth
    # a policy that never succeeds earns nothing
    env = gymnasium.make("Kosmos-Tabletop-v1", image_size=(64, 64), horizon=8, reward={"mode": "oracle"})
    steps = _episode(env, seed=2, policy="random")
    assert [s[1] for s in steps[1:]] == [0.0] * 8 and steps[-1][3]


class _FreezeAfter:
    """The simulator, except that from step ``after`` on the frame stops changing (a world model that froze)."""

    def __init__(self, inner, after: int):
        self.inner, self.after, self._t, self._last = inner, after, 0, None

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def reset(self, task, rng):
        self._t = 0
        start = self.inner.reset(task, rng)
        self._last = start.frame
        return start

    def step(self, actions):
        result = self.inner.step(actions)
        self._t += 1
        if self._t > self.after:
            result = WorldStep(frames=self._last[None].copy(), state=result.state, log=result.log)
        self._last = result.frames[-1]
        return result


def test_a_discarded_episode_returns_nothing():
    from kosmos_env.worlds import make_world

    spec = load_spec("Kosmos-Tabletop-v1").with_overrides(image_size=(64, 64), reward=PROGRESS)
    env = gymnasium.make(
        "Kosmos-Tabletop-v1", image_size=(64, 64), reward=PROGRESS, world_model=_FreezeAfter(make_world(spec), after=16)
    )
    steps = _episode(env, seed=1)
    last = steps[-1]
    assert last[2] and last[4]["terminated_by"] == "gate" and last[4]["outcome"] == "discarded"
    earned = sum(s[1] for s in steps[1:-1])
    assert abs(earned) > 1e-3  # the scripted policy had moved the judge's probability before the freeze
    assert abs(sum(s[1] for s in steps[1:])) < 1e-6  # the discard step takes it all back
    # the next episode starts its potential afresh
    obs, info = env.reset(seed=1)
    assert info["progress"] == pytest.approx(steps[0][4]["progress"], abs=1e-7)


@pytest.mark.parametrize(
    "env_id, kwargs, message",
    [
        ("Kosmos-TabletopLearned-v1", {"reward": {"mode": "bogus"}}, "unknown reward.mode 'bogus'"),
        ("Kosmos-TabletopLearned-v1", {"reward": dict(PROGRESS, success_threshold=1.5)}, "must be a number in [0, 1]"),
        ("Kosmos-TabletopLearned-v1", {"reward": dict(PROGRESS, success_threshold=-0.1)}, "must be a number in [0, 1]"),
        (
            "Kosmos-TabletopLearned-v1",
            {"reward": {"mode": "terminal", "terminate_on_success": True}},
            "needs a per-step success signal",
        ),
        ("Kosmos-Bridge-v1", {"reward": {"mode": "progress"}}, "'cosmos3' world has no default step judge"),
        (
            "Kosmos-TabletopLearned-v1",
            {"reward": {"mode": "oracle", "terminate_on_success": True}},
            "has none; use reward.mode 'progress'",
        ),
        (
            "Kosmos-TabletopLearned-v1",
            {"reward": dict(PROGRESS, step_judge={"type": "robot_log"})},
            "cannot score single frames",
        ),
        ("Kosmos-Tabletop-v1", {"reward": dict(PROGRESS, terminate_on_success=True)}, "image_size=(64, 64)"),
        ("Kosmos-TabletopLearned-v1", {"reward": dict(PROGRESS, bogus=1)}, "unknown reward field(s) ['bogus']"),
        ("Kosmos-TabletopLearned-v1", {"reward": dict(PROGRESS, success_patience=0)}, "integer in [1, 1000]"),
        (
            "Kosmos-TabletopLearned-v1",
            {"reward": {"mode": "terminal", "success_patience": 2}},
            "'progress' or 'oracle' only",
        ),
    ],
)
def test_settings_an_env_cannot_honour_are_one_clear_error(env_id, kwargs, message):
    with pytest.raises(SpecError) as err:
        gymnasium.make(env_id, **kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_world_without_a_step_judge_for_its_tasks_is_refused():
    # Bridge's tasks are not the frame judge's: no step judge, so no progress reward or termination
    spec = load_spec("Kosmos-Bridge-v1")
    from kosmos_env.env import KosmosEnv

    class _Dummy:  # never stepped: the check runs at construction
        frames_per_action, calibration = 1, None

        def state_space(self):
            return {}

        def close(self):
            pass

    with pytest.raises(SpecError, match="no step judge for this world's tasks"):
        KosmosEnv(
            env_spec=spec,
            world_model=_Dummy(),
            image_size=[64, 64],
            reward=dict(PROGRESS, terminate_on_success=True),
            judge="state",
        )


def test_an_episode_ended_after_one_step_is_abstained_on_by_the_robot_log_judge():
    # threshold 0 ends the episode on its first step; one pose carries no event to judge
    env = gymnasium.make(
        "Kosmos-TabletopLearned-v1", reward=dict(PROGRESS, terminate_on_success=True, success_threshold=0.0)
    )
    env.reset(seed=0)
    _, _, terminated, _, info = env.step(np.array([0, 0, 0, 0, 0, 0, 1], np.float32))
    assert terminated and info["terminated_by"] == "success"
    assert info["judgment"]["success"] is None and "needs at least 2" in info["judgment"]["rationale"]
    assert info["outcome"] == "abstained"
