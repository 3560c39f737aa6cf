"""LeRobot adapter: observation -> batch conversion, and a randomly initialised ACT policy built from
a config (no download) running a tabletop episode end to end when LeRobot is importable."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

torch = pytest.importorskip("torch")

from kosmos_env.policies.lerobot_policy import observation_to_batch  # noqa: E402

LEROBOT_MISSING = (
    "lerobot is not importable here: no lerobot release installs beside this project's torch 2.13 "
    "(0.3.3-0.4.4 pin torch<2.8 or <2.11; 0.3.2 allows torch 2.13 but pins gymnasium<1.0). "
    "Run this test in an environment with lerobot; tests/policies/test_lerobot_remote.py serves a real LeRobot policy from "
    "its own environment (scripts/build_lerobot_venv.sh) and evaluates it here through remote:."
)


def _obs():
    image = np.zeros((4, 6, 3), np.uint8)
    image[0, 0] = (255, 0, 51)
    return {
        "image": image,
        "instruction": "put the carrot on the plate",
        "ee_pos": np.array([0.1, 0.2, 0.3], np.float32),
        "ee_euler": np.array([0.0, -0.5, 1.0], np.float32),
        "gripper": np.array([0.8], np.float32),
    }


def test_observation_to_batch_layout_and_scaling():
    batch = observation_to_batch(_obs())
    img = batch["observation.image"]
    assert tuple(img.shape) == (1, 3, 4, 6) and img.dtype == torch.float32
    # channels first, [0, 255] -> [0, 1]: pixel (0, 0) = (1.0, 0.0, 0.2)
    np.testing.assert_allclose(img[0, :, 0, 0].numpy(), [1.0, 0.0, 0.2], atol=1e-7)
    assert float(img[0, :, 1:, :].abs().sum()) == 0.0
    np.testing.assert_allclose(batch["observation.state"].numpy(), [[0.1, 0.2, 0.3, 0.0, -0.5, 1.0, 0.8]], atol=1e-7)
    assert batch["task"] == ["put the carrot on the plate"]


def test_observation_to_batch_resizes_and_checks_state():
    batch = observation_to_batch(_obs(), image_key="observation.images.top", image_shape=(3, 8, 12), state_dim=7)
    assert tuple(batch["observation.images.top"].shape) == (1, 3, 8, 12)
    with pytest.raises(ValueError, match="expects 6"):
        observation_to_batch(_obs(), state_dim=6)
    with pytest.raises(ValueError, match="missing"):
        observation_to_batch({"image": _obs()["image"], "instruction": "x"})
    only_pos = observation_to_batch(_obs(), state_from=("ee_pos",), task_key=None)
    assert tuple(only_pos["observation.state"].shape) == (1, 3) and "task" not in only_pos


def _tiny_act(image_hw=(64, 64)):
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy

    config = ACTConfig(
        input_features={
            "observation.image": PolicyFeature(type=FeatureType.VISUAL, shape=(3, *image_hw)),
            "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(7,)),
        },
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(7,))},
        pretrained_backbone_weights=None,
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        n_encoder_layers=1,
        n_decoder_layers=1,
        chunk_size=5,
        n_action_steps=5,
        use_vae=False,
        device="cpu",
    )
    # small action statistics keep random outputs inside the tabletop's action box
    stats = {
        "observation.image": {"mean": torch.zeros(3, 1, 1), "std": torch.ones(3, 1, 1)},
        "observation.state": {"mean": torch.zeros(7), "std": torch.ones(7)},
        "action": {"mean": torch.tensor([0.0] * 6 + [0.5]), "std": torch.tensor([0.001] * 6 + [0.01])},
    }
    torch.manual_seed(0)
    try:  # LeRobot 0.3: normalisation inside the policy
        return ACTPolicy(config, dataset_stats=stats), None, None
    except TypeError:  # LeRobot 0.4: normalisation in processor pipelines
        from lerobot.policies.factory import make_pre_post_processors

        pre, post = make_pre_post_processors(config, dataset_stats=stats)
        return ACTPolicy(config), pre, post


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("lerobot") is None, reason=LEROBOT_MISSING)
def test_lerobot_act_from_config_runs_a_tabletop_episode(tmp_path):
    import gymnasium

    import kosmos_env  # noqa: F401
    from kosmos_env.policies import make_policy

    act, pre, post = _tiny_act()
    policy = make_policy("lerobot", policy=act, preprocessor=pre, postprocessor=post)
    assert policy.name == "lerobot-act" and policy.image_key == "observation.image" and policy.state_dim == 7

    env = gymnasium.make("Kosmos-Tabletop-v1", image_size=(64, 64), horizon=12)
    obs, _ = env.reset(seed=0)
    policy.reset(obs["instruction"], seed=0)
    actions = []
    for _ in range(12):
        action = policy.act(obs)
        assert action.shape == (7,) and action.dtype == np.float32
        actions.append(action)
        obs, reward, terminated, truncated, info = env.step(action)
    assert truncated and info["outcome"] in ("success", "failure")
    actions = np.stack(actions)
    assert np.all(np.abs(actions[:, :6] - 0.0) < 0.05) and np.all((actions[:, 6] > 0.3) & (actions[:, 6] < 0.7))
    # ACT's own queue: one chunk of 5 serves 5 steps, so steps 0-4 come from one forward pass
    assert not np.allclose(actions[0], actions[1])

    # saved and reloaded from a local directory: same weights, same hash, same first action
    act.save_pretrained(tmp_path)
    again = make_policy("lerobot", path=str(tmp_path), preprocessor=pre, postprocessor=post)
    assert again.content_hash() == policy.content_hash()
    obs, _ = env.reset(seed=0)
    policy.reset(obs["instruction"], seed=0)
    again.reset(obs["instruction"], seed=0)
    np.testing.assert_allclose(again.act(obs), policy.act(obs), atol=1e-6)
    env.close()


def test_missing_lerobot_checkpoint_gives_a_clear_error(tmp_path):
    from kosmos_env.policies import make_policy
    from kosmos_env.worlds.base import MissingWeightsError

    with pytest.raises(MissingWeightsError, match="no LeRobot checkpoint"):
        make_policy("lerobot", path=str(tmp_path))
    with pytest.raises(ValueError, match="exactly one of"):
        make_policy("lerobot")
