"""Kosmos-Bridge-v1 end to end on CPU with a tiny random Cosmos 3 pipeline (the real diffusers class)."""

import os

import gymnasium as gym
import numpy as np
import pytest

import kosmos_env  # noqa: F401
from kosmos_env.testing.cosmos_tiny import tiny_bridge_spec, tiny_pipeline
from tests.conftest import requires_extra

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytestmark = [pytest.mark.slow, requires_extra("models")]


def make_env(spec, pipe):
    return gym.make(
        "Kosmos-Bridge-v1", env_spec=spec, judge="state", defer_judging=True, world_kwargs={"pipeline": pipe}
    )


def actions(k, dx=0.01, grip=1.0):
    a = np.zeros((k, 7), np.float32)
    a[:, 0], a[:, 5], a[:, 6] = dx, 0.05, grip
    return a


def rollout(env, seed, steps, dx=0.01):
    obs, info = env.reset(seed=seed)
    frames = [obs["image"]]
    last = None
    for _ in range(steps):
        obs, reward, terminated, truncated, last = env.step(actions(4, dx))
        frames.extend(last["frames"])
    return np.stack(frames), obs, reward, terminated, truncated, last


def test_bridge_env_end_to_end_and_seeded(monkeypatch):
    from diffusers import Cosmos3OmniPipeline

    pipe = tiny_pipeline()
    calls = []
    real_call = Cosmos3OmniPipeline.__call__

    def counting_call(self, *args, **kwargs):  # count, then run the real __call__
        calls.append(kwargs["action"])
        return real_call(self, *args, **kwargs)

    monkeypatch.setattr(Cosmos3OmniPipeline, "__call__", counting_call)
    # the gate off: a random tiny model's frames are rightly discarded by it (image collapse), and
    # this test is about the pipeline's plumbing and seeding over whole episodes
    spec = tiny_bridge_spec(horizon=3, gate={"enabled": False})
    env = make_env(spec, pipe)
    assert env.unwrapped.spec_hash == spec.hash
    h, w = spec.image_size
    assert (h, w) == (48, 64)  # the tiny spec keeps the registered 4:3 scene
    assert env.observation_space["image"].shape == (h, w, 3)
    assert env.action_space.shape == (4, 7)

    frames_a, obs, reward, terminated, truncated, info = rollout(env, seed=11, steps=3)
    assert len(calls) == 3
    assert calls[0].domain_name == "bridge_orig_lerobot" and calls[0].mode == "forward_dynamics"
    assert tuple(calls[0].raw_actions.shape) == (4, 10)
    assert frames_a.shape == (1 + 3 * 4, h, w, 3) and frames_a.dtype == np.uint8
    assert obs["image"].shape == (h, w, 3) and obs["image"].dtype == np.uint8
    assert obs["instruction"] == "move the can to the left"
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert info["outcome"] == "pending"
    assert env.observation_space.contains(obs)
    # the generated frames are new images, not copies of the conditioning frame
    assert not np.array_equal(frames_a[1], frames_a[0])

    world = env.unwrapped.world
    assert world.timings["calls"] == 3 and len(world.timings["call_seconds"]) == 3
    assert world.timings["load_seconds"] is not None

    frames_b, *_ = rollout(env, seed=11, steps=3)
    np.testing.assert_array_equal(frames_a, frames_b)  # same seed -> identical frames
    frames_c, *_ = rollout(env, seed=12, steps=1)
    assert not np.array_equal(frames_a[1:5], frames_c[1:5])  # another seed -> other noise
    frames_d, *_ = rollout(env, seed=11, steps=1, dx=-0.02)
    assert not np.array_equal(frames_a[1:5], frames_d[1:5])  # the actions condition the frames
    env.close()


def test_padding_to_the_model_chunk():
    # env chunk 2 inside a model chunk of 4: one call per step, padded with hold actions, 2 frames kept
    env = make_env(tiny_bridge_spec(env_chunk=2, model_chunk=4, horizon=2), tiny_pipeline())
    env.reset(seed=0)
    a = np.zeros((2, 7), np.float32)
    a[:, 6] = 1.0
    _, _, _, truncated, info = env.step(a)
    assert info["frames"].shape == (2, 48, 64, 3)
    _, _, _, truncated, info = env.step(a)
    assert truncated
    assert env.unwrapped.world.timings["calls"] == 2
