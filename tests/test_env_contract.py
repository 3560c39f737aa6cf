"""The env's action, observation, step, reward, horizon and task contracts (docs/architecture.md)."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest

from kosmos_env.env import KosmosEnv
from kosmos_env.spec import SpecError, load_spec

NOOP = np.array([0, 0, 0, 0, 0, 0, 1], dtype=np.float32)


def test_observation_and_info(tabletop_env):
    obs, info = tabletop_env.reset(seed=0)
    assert obs["image"].shape == (64, 64, 3) and obs["image"].dtype == np.uint8
    assert obs["instruction"] == "put the carrot on the plate"
    assert set(obs) >= {"ee_pos", "ee_euler", "gripper"}
    assert "frames" not in info  # reset generates nothing: the first frame is obs["image"]
    assert len(info["spec_hash"]) == 64
    obs, reward, terminated, truncated, info = tabletop_env.step(NOOP)
    assert info["frames"].shape == (1, 64, 64, 3)
    np.testing.assert_array_equal(info["frames"][-1], obs["image"])
    assert reward == 0.0 and not terminated and not truncated


def test_render_mode_and_fps():
    env = gymnasium.make("Kosmos-Tabletop-v1", image_size=(64, 64), render_mode="rgb_array")
    obs, _ = env.reset(seed=1)
    frame = env.render()
    np.testing.assert_array_equal(frame, obs["image"])
    assert env.metadata["render_fps"] == 5
    with pytest.raises(ValueError, match="render_mode"):
        KosmosEnv("Kosmos-Tabletop-v1", render_mode="ansi")


@pytest.mark.parametrize(
    "action, message",
    [
        (np.zeros(6, dtype=np.float32), "shape"),
        (np.zeros((2, 7), dtype=np.float32), "shape"),
        (np.zeros(7, dtype=np.int64), "dtype"),
        (np.array([np.nan, 0, 0, 0, 0, 0, 1], dtype=np.float32), "'dx'"),
        (np.array([0, 0, 0.3, 0, 0, 0, 1], dtype=np.float32), "'dz'"),
        (np.array([0, 0, 0, 0, 0, 0, 1.5], dtype=np.float32), "'gripper'"),
        (np.array([0, 0, 0, 0, 0, -9, 1], dtype=np.float32), "'dyaw'"),
        ("left", "numpy array"),
    ],
)
def test_bad_actions_raise_named_errors(tabletop_env, action, message):
    tabletop_env.reset(seed=0)
    with pytest.raises(ValueError, match=message):
        tabletop_env.unwrapped.step(action)


def test_horizon_truncates_and_judges_last_step():
    env = gymnasium.make("Kosmos-Tabletop-v1", image_size=(64, 64), horizon=5)
    env.reset(seed=0)
    rewards = []
    for i in range(5):
        _, reward, terminated, truncated, info = env.step(NOOP)
        rewards.append(reward)
        assert not terminated
        assert truncated == (i == 4)
    assert info["judgment"]["judge"] == "state"
    assert info["judgment"]["success"] is False
    assert info["outcome"] == "failure"
    assert rewards == [0.0] * 5
    with pytest.raises(RuntimeError, match="reset"):
        env.unwrapped.step(NOOP)


def test_a_time_limit_shorter_than_the_horizon_warns_once_and_horizon_judges():
    """gymnasium's max_episode_steps cuts episodes off outside the env: unjudged, reward 0. The env
    warns once (at the second cut-off episode of the same length) with the override that judges."""
    import warnings

    env = gymnasium.make("Kosmos-Tabletop-v1", max_episode_steps=3, image_size=(64, 64))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for episode in range(4):
            env.reset(seed=episode)
            for _ in range(3):
                _, reward, terminated, truncated, info = env.step(NOOP)
            assert truncated and not terminated and reward == 0.0 and "judgment" not in info
        env.reset(seed=9)
    cut_off = [str(w.message) for w in caught if "before the env's horizon" in str(w.message)]
    assert len(cut_off) == 1 and "max_episode_steps=3" in cut_off[0] and "horizon=3" in cut_off[0], cut_off
    # the override the warning names ends the episode in the env, which judges it, and says nothing
    env = gymnasium.make("Kosmos-Tabletop-v1", horizon=3, image_size=(64, 64))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for episode in range(3):
            env.reset(seed=episode)
            for _ in range(3):
                _, _, _, truncated, info = env.step(NOOP)
            assert truncated and info["judgment"]["success"] is False
    assert not [w for w in caught if "before the env's horizon" in str(w.message)]


def test_deferred_judging_marks_pending():
    env = gymnasium.make("Kosmos-Tabletop-v1", image_size=(64, 64), horizon=2, defer_judging=True)
    env.reset(seed=0)
    env.step(NOOP)
    _, reward, _, truncated, info = env.step(NOOP)
    assert truncated and reward == 0.0
    assert info["judgment"]["pending"] is True
    assert info["outcome"] == "pending"
    rollout = env.unwrapped.rollout()
    assert rollout.frames.shape[0] == 3 and rollout.actions.shape == (2, 7)
    assert rollout.ground_truth is not None and "success" in rollout.ground_truth
    assert set(rollout.log) >= {"ee_pos", "gripper_cmd", "gripper_measured"}


def test_tasks_choose_and_switch():
    env = gymnasium.make("Kosmos-Tabletop-v1", image_size=(64, 64), task="spoon_on_towel")
    base = env.unwrapped
    assert base.task_names == ["spoon_on_towel", "carrot_on_plate", "stack_green_on_yellow", "eggplant_in_basket"]
    obs, info = env.reset(seed=0)
    assert obs["instruction"] == "put the spoon on the towel" and info["task"] == "spoon_on_towel"
    obs, info = env.reset(seed=0, options={"task": "eggplant_in_basket"})
    assert obs["instruction"] == "put the eggplant in the basket"
    with pytest.raises(ValueError, match="unknown task"):
        env.reset(options={"task": "fold_laundry"})
    with pytest.raises(ValueError, match="unknown task"):
        gymnasium.make("Kosmos-Tabletop-v1", task="fold_laundry")


def test_layout_depends_on_seed(tabletop_env):
    a, _ = tabletop_env.reset(seed=0)
    b, _ = tabletop_env.reset(seed=1)
    c, _ = tabletop_env.reset(seed=0)
    assert not np.array_equal(a["image"], b["image"])
    np.testing.assert_array_equal(a["image"], c["image"])


def test_measured_gripper_stops_short_when_holding():
    """Closing on an object leaves the fingers apart; closing on nothing shuts them."""
    from kosmos_env.policies import make_policy

    env = gymnasium.make("Kosmos-Tabletop-v1", image_size=(64, 64), task="stack_green_on_yellow")
    obs, _ = env.reset(seed=1)
    policy = make_policy("scripted", skill=1.0)
    policy.reset(obs["instruction"], seed=1)
    for _ in range(12):  # approach, descend, close, start lifting
        obs, *_ = env.step(policy.act(obs))
    log = env.unwrapped.rollout().log
    holding = (log["gripper_cmd"] == 0.0) & (log["gripper_measured"] > 0.2)
    assert holding.any(), "the fingers should stop on the block"
    env.reset(seed=1)
    for _ in range(3):
        obs, *_ = env.step(np.array([0, 0, 0, 0, 0, 0, 0], dtype=np.float32))
    assert obs["gripper"][0] < 0.05, "closing on nothing should shut the fingers"


def test_spec_hash_tracks_result_changing_fields():
    base = load_spec("Kosmos-Tabletop-v1")
    assert base.hash == load_spec("Kosmos-Tabletop-v1").hash
    assert base.with_overrides(image_size=(64, 64)).hash != base.hash
    assert base.with_overrides(horizon=41).hash != base.hash
    assert base.with_overrides(world={"physics_dt": 0.002}).hash != base.hash
    assert base.with_overrides(description="words only").hash == base.hash
    env = KosmosEnv("Kosmos-Tabletop-v1", image_size=(64, 64))
    assert env.spec_hash == base.with_overrides(image_size=(64, 64)).hash


def test_spec_validation_names_the_field():
    base = load_spec("Kosmos-Tabletop-v1")
    with pytest.raises(SpecError, match="horizon"):
        base.with_overrides(horizon=0)
    with pytest.raises(SpecError, match="image_size"):
        base.with_overrides(image_size=(64,))
    raw = base.to_dict()
    raw["surprise"] = 1
    with pytest.raises(SpecError, match="surprise"):
        type(base).from_dict(raw)
    raw = base.to_dict()
    raw["action"]["low"] = raw["action"]["low"][:6]
    with pytest.raises(SpecError, match="action.low"):
        type(base).from_dict(raw)
