"""kosmos_env.rlinf_adapter: RLinf's env-worker contract over Kosmos envs (batched tensors, action
chunks, auto-reset); the last test hands the output to RLinf's own EnvOutput and skips without rlinf."""

from __future__ import annotations

import numpy as np
import pytest

from kosmos_env.utils import obs_encoding

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from kosmos_env.rlinf_adapter import KosmosRLinfEnv  # noqa: E402

CFG = {
    "env_id": "Kosmos-Tabletop-v1",
    "init_params": {"image_size": (32, 32), "horizon": 3},
    "seed": 7,
    "tasks": ["carrot_on_plate", "spoon_on_towel"],
}


@pytest.fixture
def rl_env():
    env = KosmosRLinfEnv(cfg=dict(CFG), num_envs=2, seed_offset=1, total_num_processes=2)
    yield env
    env.close()


def _chunk(env, n_envs: int, chunk: int, seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.as_tensor(rng.uniform(env._low, env._high, size=(n_envs, chunk, 7)).astype(np.float32))


def test_reset_gives_rlinf_observations_encoded_as_obs_encoding(rl_env):
    obs, infos = rl_env.reset()
    assert infos == {}
    assert obs["main_images"].dtype == torch.uint8 and obs["main_images"].shape == (2, 32, 32, 3)
    assert obs["states"].dtype == torch.float32 and obs["states"].shape == (2, 7)
    assert obs["task_descriptions"] == ["put the carrot on the plate", "put the spoon on the towel"]
    # the same seed on a plain env gives the same arrays (env 0 of worker 1: seed 7 + 1 * 2 + 0)
    import gymnasium

    plain = gymnasium.make("Kosmos-Tabletop-v1", image_size=(32, 32), horizon=3)
    raw, _ = plain.reset(seed=9, options={"task": "carrot_on_plate"})
    plain.close()
    assert np.array_equal(obs["main_images"][0].numpy(), raw["image"])
    assert np.array_equal(obs["states"][0].numpy(), obs_encoding.encode_state(raw))


def test_chunk_steps_report_episode_ends_on_the_last_column_and_auto_reset(rl_env):
    rl_env.reset()
    obs_list, rewards, terms, truncs, infos_list = rl_env.chunk_step(_chunk(rl_env, 2, 2, seed=0))
    assert len(obs_list) == 2 and rewards.shape == terms.shape == truncs.shape == (2, 2)
    assert not (terms | truncs).any() and rl_env.elapsed_steps.tolist() == [2, 2]
    # horizon 3: the episode ends on the first column of this chunk, reported on the last
    obs_list, rewards, terms, truncs, infos_list = rl_env.chunk_step(_chunk(rl_env, 2, 2, seed=1))
    assert truncs[:, -1].all() and not truncs[:, 0].any() and not terms.any()
    assert rewards[:, 1].eq(0).all()  # not stepped past its end: no second reward
    last = infos_list[-1]
    assert last["_final_observation"].tolist() == [True, True]
    assert last["final_info"]["episode"]["episode_len"].tolist() == [3, 3]
    assert torch.equal(last["final_info"]["episode"]["return"], rewards.sum(dim=1))
    assert rl_env.elapsed_steps.tolist() == [0, 0]  # auto-reset
    assert obs_list[-1]["states"].shape == (2, 7)


def test_bad_configs_are_refused():
    with pytest.raises(ValueError, match="KosmosRLinfEnv needs cfg.env_id"):
        KosmosRLinfEnv(cfg={}, num_envs=1)
    with pytest.raises(ValueError, match=r"num_envs must be an int >= 1, got 0"):
        KosmosRLinfEnv(cfg=dict(CFG), num_envs=0)
    with pytest.raises(ValueError, match=r"unknown task\(s\) \['fly'\] for Kosmos-Tabletop-v1"):
        KosmosRLinfEnv(cfg={**CFG, "tasks": ["fly"]}, num_envs=1)


def test_rlinf_env_output_takes_a_chunk():
    pytest.importorskip(
        "rlinf", reason="rlinf is not installed (pip install rlinf==0.3.0; not an extra: it pulls a 3.1 GB environment)"
    )
    from omegaconf import OmegaConf
    from rlinf.data.embodied_io_struct import EnvOutput

    # configured as RLinf configures its envs: an OmegaConf DictConfig
    rl_env = KosmosRLinfEnv(cfg=OmegaConf.create(CFG), num_envs=2, seed_offset=1, total_num_processes=2)
    rl_env.reset()
    obs_list, rewards, terms, truncs, infos_list = rl_env.chunk_step(_chunk(rl_env, 2, 3, seed=2))
    infos = infos_list[-1]
    out = EnvOutput(
        obs=obs_list[-1],
        final_obs=infos.get("final_observation"),
        rewards=rewards,
        env_infos=infos,
        dones=terms | truncs,
        terminations=terms,
        truncations=truncs,
    )
    prepared = out.prepare_observations(out.obs)
    assert prepared["main_images"].shape == (2, 32, 32, 3) and prepared["states"].shape == (2, 7)
    assert prepared["task_descriptions"] == ["put the carrot on the plate", "put the spoon on the towel"]
    merged = EnvOutput.merge_env_outputs([out.to_dict(), out.to_dict()])
    assert merged["obs"]["states"].shape == (4, 7) and merged["dones"].shape == (4, 3)
    rl_env.close()
