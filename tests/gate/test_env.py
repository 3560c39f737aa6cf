"""The gate inside the env: a failing verdict ends the episode as *discarded*, never as failed.

Uses the real MuJoCo tabletop (64x64) through gymnasium.make, with a world wrapper that
freezes or pans the frames the way a misbehaving world model would.
"""

from __future__ import annotations

import cv2
import gymnasium
import numpy as np
import pytest

import kosmos_env  # noqa: F401  (registers the env ids)
from kosmos_env.policies import make_policy
from kosmos_env.rollouts import run_episode
from kosmos_env.spec import load_spec
from kosmos_env.worlds import make_world
from kosmos_env.worlds.base import WorldStep


class MisbehavingWorld:
    """Wraps the tabletop; from step ``after`` on, returns a frozen or panned copy of the last frame."""

    def __init__(self, inner, mode: str, after: int = 0):
        self.inner, self.mode, self.after = inner, mode, after
        self.frames_per_action = inner.frames_per_action
        self.calibration = inner.calibration
        self._t = 0
        self._last = None

    def state_space(self):
        return self.inner.state_space()

    def load(self):
        self.inner.load()

    def reset(self, task, rng):
        self._t = 0
        start = self.inner.reset(task, rng)
        self._last = start.frame
        return start

    def step(self, actions):
        result = self.inner.step(actions)
        self._t += 1
        if self._t > self.after:
            h, w = self._last.shape[:2]
            if self.mode == "frozen":
                frame = self._last.copy()
            else:
                m = np.float32([[1, 0, 4.0 * w / 64], [0, 1, 0]])
                frame = cv2.warpAffine(self._last, m, (w, h), borderMode=cv2.BORDER_REPLICATE)
            result = WorldStep(frames=frame[None], state=result.state, log=result.log)
        self._last = result.frames[-1]
        return result

    def evaluate(self):
        return self.inner.evaluate()

    def close(self):
        self.inner.close()


def make(world=None):
    kwargs = {"image_size": (64, 64), "task": "carrot_on_plate"}
    if world is not None:
        kwargs["world_model"] = world
    return gymnasium.make("Kosmos-Tabletop-v1", **kwargs)


def test_spec_enables_the_gate_and_true_episodes_are_not_discarded():
    env = make()
    assert env.unwrapped.kosmos_spec.gate["enabled"] is True
    result = run_episode(env, make_policy("scripted", skill=1.0), seed=3)
    assert result.outcome in ("success", "failure")
    assert result.outcome == "success"
    assert result.gate is not None and result.gate["passed"] is True
    assert result.timings["gate"] > 0
    env.close()


@pytest.mark.parametrize("mode", ["frozen", "pan"])
def test_failing_gate_terminates_and_discards(mode):
    spec = load_spec("Kosmos-Tabletop-v1").with_overrides(image_size=(64, 64))
    env = make(MisbehavingWorld(make_world(spec), mode, after=2))
    obs, _ = env.reset(seed=0)
    move = np.array([0.04, 0.0, -0.02, 0, 0, 0, 1], np.float32)
    for _ in range(2):  # the world behaves for two steps
        obs, reward, terminated, truncated, info = env.step(move)
        assert not terminated and info["gate"]["passed"]
    obs, reward, terminated, truncated, info = env.step(move)
    assert terminated and not truncated and reward == 0.0
    assert info["outcome"] == "discarded" and env.unwrapped.outcome == "discarded"
    assert info["judgment"] is None  # a discarded episode is not judged, hence never a failure
    gate = info["gate"]
    assert gate["passed"] is False and gate["check"] in ("frozen", "camera_motion")
    assert gate["reason"] and gate["episode_frames"] == [3] and gate["frames"] == [0]
    assert "frozen_min_changed_px" in gate["thresholds"] and 0.0 <= gate["score"] <= 1.0
    assert env.unwrapped.rollout().meta["outcome"] == "discarded"
    with pytest.raises(RuntimeError):
        env.step(move)
    # reset starts a clean episode (the gate's episode state is reset too)
    env.reset(seed=1)
    _, _, terminated, _, info = env.step(np.array([0, 0, 0, 0, 0, 0, 1], np.float32))
    assert not terminated and info["gate"]["passed"]
    env.close()


def test_gate_can_be_switched_off_by_override():
    spec = load_spec("Kosmos-Tabletop-v1").with_overrides(image_size=(64, 64))
    env = gymnasium.make(
        "Kosmos-Tabletop-v1",
        image_size=(64, 64),
        gate={"enabled": False},
        world_model=MisbehavingWorld(make_world(spec), "frozen"),
    )
    env.reset(seed=0)
    _, _, terminated, _, info = env.step(np.array([0.04, 0, 0, 0, 0, 0, 1], np.float32))
    assert not terminated and "gate" not in info
    env.close()
