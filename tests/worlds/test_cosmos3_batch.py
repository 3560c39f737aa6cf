"""Batched Cosmos 3 calls: N requests through one denoising loop equal N single pipeline calls."""

import os

import gymnasium as gym
import numpy as np
import pytest

import kosmos_env  # noqa: F401
from kosmos_env.testing.cosmos_tiny import tiny_bridge_spec, tiny_pipeline
from tests.conftest import requires_extra

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytestmark = [pytest.mark.slow, requires_extra("models")]


def _requests(world, prompts, seeds):
    import torch

    rng = np.random.default_rng(0)
    out = []
    for prompt, seed in zip(prompts, seeds, strict=True):
        image = rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)
        actions = rng.normal(0.0, 0.3, (4, 10)).astype(np.float32)
        out.append(
            lambda image=image, actions=actions, prompt=prompt, seed=seed: world.call_kwargs(
                image, actions, prompt, torch.Generator().manual_seed(seed)
            )
        )
    return out


def test_batched_call_equals_single_calls_per_request():
    import torch

    from kosmos_env.worlds.cosmos3 import Cosmos3World
    from kosmos_env.worlds.cosmos3_batch import generate_batch

    torch.set_num_threads(1)
    pipe = tiny_pipeline()
    world = Cosmos3World(tiny_bridge_spec(), pipeline=pipe)
    world.load()
    # prompts of different token lengths exercise the padded, masked text prefixes
    make = _requests(world, ["put the carrot on the plate", "open the drawer"], [7, 8])
    singles = [np.asarray(pipe(**m()).video) for m in make]
    batched, report = generate_batch(pipe, [m() for m in make])
    assert report.batched and report.size == 2
    for single, batch in zip(singles, batched, strict=True):
        assert batch.shape == single.shape
        np.testing.assert_allclose(batch, single, atol=1e-4)
    # the requests differ (seeds and inputs matter), so equality above is not trivial
    assert np.abs(singles[0] - singles[1]).max() > 0.01
    # a request's output does not depend on its batch-mates (its own generator seeds it)
    alone, _ = generate_batch(pipe, [make[1]()])
    np.testing.assert_allclose(alone[0], batched[1], atol=1e-4)


def test_mismatched_sampler_settings_are_refused():
    from kosmos_env.worlds.cosmos3 import Cosmos3World
    from kosmos_env.worlds.cosmos3_batch import generate_batch

    pipe = tiny_pipeline()
    world = Cosmos3World(tiny_bridge_spec(), pipeline=pipe)
    a, b = (m() for m in _requests(world, ["open the drawer"] * 2, [1, 2]))
    b["num_inference_steps"] = 3
    with pytest.raises(ValueError, match="must share 'num_inference_steps'"):
        generate_batch(pipe, [a, b])


def test_vector_env_batches_world_calls_and_matches_single_envs():
    spec = tiny_bridge_spec(env_chunk=4, model_chunk=4, horizon=1)
    kwargs = dict(env_spec=spec, judge="state", defer_judging=True, world_kwargs={"pipeline": tiny_pipeline()})
    envs = gym.make_vec("Kosmos-Bridge-v1", num_envs=2, vectorization_mode="vector_entry_point", **kwargs)
    action = np.zeros((2, 4, 7), np.float32)
    action[:, :, 0], action[:, :, 6] = [[0.01], [-0.01]], 1.0
    envs.reset(seed=[5, 6])
    _, _, _, truncated, infos = envs.step(action)
    assert envs.batcher.batches == [(2, True)]  # both episodes' chunks in one batched call
    assert truncated.all()
    for i, seed in enumerate([5, 6]):
        env = gym.make("Kosmos-Bridge-v1", **kwargs)
        env.reset(seed=seed)
        _, _, _, _, info = env.step(action[i])
        diff = np.abs(info["frames"].astype(int) - infos["frames"][i].astype(int))
        assert diff.max() <= 1  # uint8 rounding of float-tolerance differences
        env.close()
    envs.close()
