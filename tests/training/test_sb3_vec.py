"""``kosmos_env.training.sb3_vec``: the batched SB3 ``VecEnv`` gives SB3 what ``DummyVecEnv`` of
``make_training_env`` envs gives it (spaces, observations, rewards, dones, infos, terminal
observations, seeded task draws, same-step autoreset), while its sub-envs step as one batch.

Short episodes (horizon 3) on the learned world, 3 sub-envs, frame stack 2, one torch thread.
Object state, rewards and dones are bit-identical to single envs (README, "Vector envs"); frames
may differ by one grey level on a few pixels, so images are compared within 2 levels.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import requires_extra

pytestmark = requires_extra("rl")  # stable-baselines3

ENV = "Kosmos-TabletopLearned-v1"
N = 3
HORIZON = 3
STACK = 2
SIZE = (64, 64)
KW = {"horizon": HORIZON}
SEED = 5  # task-drawing seed: sub-env i draws with seed * 1000 + i, as finetune_ppo's env i
LAYOUT_SEED = 7  # VecEnv.seed: sub-env i's first reset gets 7 + i


@pytest.fixture(autouse=True)
def _one_thread():
    import torch

    torch.set_num_threads(1)


def _batched(n: int = N, **kw):
    from kosmos_env.training.sb3_vec import make_sb3_vec_env

    args = {"image_size": SIZE, "frame_stack": STACK, "tasks": None, "seed": SEED, "env_kwargs": KW, **kw}
    return make_sb3_vec_env(ENV, n, **args)


def _dummy(n: int = N, seed: int = SEED):
    from stable_baselines3.common.vec_env import DummyVecEnv

    from kosmos_env.training.ppo import make_training_env

    return DummyVecEnv(
        [
            lambda i=i: make_training_env(
                ENV, image_size=SIZE, frame_stack=STACK, tasks=None, seed=seed * 1000 + i, env_kwargs=KW
            )
            for i in range(n)
        ]
    )


@pytest.fixture
def pair():
    batched, dummy = _batched(), _dummy()
    yield batched, dummy
    batched.close()
    dummy.close()


def _assert_obs_match(got: dict, want: dict, where: str) -> None:
    assert set(got) == set(want) == {"image", "state", "task"}, where
    for key in ("state", "task"):
        assert got[key].dtype == want[key].dtype and got[key].shape == want[key].shape, (where, key)
        np.testing.assert_array_equal(got[key], want[key], err_msg=f"{where}: {key}")
    assert got["image"].dtype == want["image"].dtype == np.uint8 and got["image"].shape == want["image"].shape, where
    diff = np.abs(got["image"].astype(np.int16) - want["image"].astype(np.int16))
    assert diff.max() <= 2, f"{where}: image differs by {diff.max()} grey levels"
    assert (diff > 0).mean() < 0.01, f"{where}: {(diff > 0).sum()} pixels differ"


def _untimed(judgment: dict) -> dict:
    return {k: v for k, v in judgment.items() if k != "seconds"}


def test_spaces_equal_the_dummy_vec_env_path(pair):
    batched, dummy = pair
    assert batched.num_envs == dummy.num_envs == N
    assert batched.observation_space == dummy.observation_space
    assert batched.action_space == dummy.action_space
    assert batched.observation_space["image"].shape == (*SIZE, 3 * STACK)
    assert batched.observation_space["state"].shape == (7 * STACK,)
    assert batched.batched, "a vector_entry_point env must step through step_some (one batched world pass)"
    assert batched.get_attr("instructions") == dummy.get_attr("instructions")
    assert batched.render_mode == dummy.render_mode


def test_episodes_with_autoreset_match_single_envs(pair):
    """Same seeds, same actions: first observations, rewards, dones, infos, terminal observations
    and the tasks drawn at each (auto)reset match N single wrapped envs, over two episodes each."""
    batched, dummy = pair
    batched.seed(LAYOUT_SEED)
    dummy.seed(LAYOUT_SEED)
    _assert_obs_match(batched.reset(), dummy.reset(), "reset")
    assert [i["task"] for i in batched.reset_infos] == [i["task"] for i in dummy.reset_infos]

    rng = np.random.default_rng(0)
    dones_seen = 0
    for t in range(2 * HORIZON + 1):
        actions = rng.uniform(-1, 1, size=(N, 7)).astype(np.float32)
        obs, rewards, dones, infos = batched.step(actions)
        want_obs, want_rewards, want_dones, want_infos = dummy.step(actions)
        _assert_obs_match(obs, want_obs, f"step {t}")
        assert rewards.dtype == want_rewards.dtype and dones.dtype == want_dones.dtype
        np.testing.assert_array_equal(rewards, want_rewards, err_msg=f"step {t}")
        np.testing.assert_array_equal(dones, want_dones, err_msg=f"step {t}")
        for i, (got, want) in enumerate(zip(infos, want_infos, strict=True)):
            assert set(got) == set(want), (t, i)
            assert got["TimeLimit.truncated"] == want["TimeLimit.truncated"]
            for key in ("task", "outcome", "ground_truth", "terminated_by"):
                assert got.get(key) == want.get(key), (t, i, key)
            if "judgment" in want:  # the verdict, without its wall-clock seconds
                assert _untimed(got["judgment"]) == _untimed(want["judgment"]), (t, i)
            assert ("terminal_observation" in got) == bool(dones[i])
            if dones[i]:
                dones_seen += 1
                _assert_obs_match(got["terminal_observation"], want["terminal_observation"], f"terminal {t}/{i}")
                # the horizon truncates: SB3's bootstrapping flag is set
                assert got["TimeLimit.truncated"] is True
                # the new episode's task, drawn from the lane's seeded generator
                assert batched.reset_infos[i]["task"] == dummy.reset_infos[i]["task"]
    # every sub-env finished two episodes (steps HORIZON and 2 * HORIZON) and was reset in the same step
    assert dones_seen == 2 * N
    # every step ran as one batched world call of all N sub-envs
    sizes = [size for size, _ in batched.vec.batcher.batches]
    assert len(sizes) == 2 * HORIZON + 1 and set(sizes) == {N}


def test_tasks_drawn_per_reset_from_seeded_generators():
    """Each sub-env draws its task at every reset from default_rng(seed * 1000 + i): a restricted
    list is honoured, and the same seed draws the same sequence."""
    tasks = ["carrot_on_plate", "spoon_on_towel"]

    def drawn(seed: int) -> list[list[str]]:
        vec = _batched(n=2, tasks=tasks, seed=seed)
        try:
            vec.seed(0)
            vec.reset()
            seen = [[info["task"] for info in vec.reset_infos]]
            for _ in range(3 * HORIZON):
                _, _, dones, _ = vec.step(np.zeros((2, 7), np.float32))
                if dones.any():
                    seen.append([info["task"] for info in vec.reset_infos])
            return seen
        finally:
            vec.close()

    first = drawn(1)
    assert len(first) == 4 and {t for row in first for t in row} <= set(tasks)
    assert drawn(1) == first
    want = [
        [tasks[int(rng.integers(len(tasks)))] for _ in range(4)]
        for rng in (np.random.default_rng(1000 + i) for i in range(2))
    ]
    assert [[row[i] for row in first] for i in range(2)] == want


def test_sync_vector_env_steps_lanes_in_turn_with_the_same_results():
    """Over a plain SyncVectorEnv (no step_some) the lanes step one after another: same results."""
    import gymnasium

    from kosmos_env.training.ppo import _task_sampler_class
    from kosmos_env.training.sb3_vec import KosmosVecEnv
    from kosmos_env.wrappers import wrap_rl_env

    sampler = _task_sampler_class()
    vec = gymnasium.make_vec(ENV, num_envs=2, vectorization_mode="sync", image_size=SIZE, **KW)
    names = list(vec.envs[0].unwrapped.task_names)  # tasks=None: the suite's, in the env's order
    plain = KosmosVecEnv(
        vec, lambda sub, i: wrap_rl_env(sampler(sub, names, SEED * 1000 + i), image_size=SIZE, frame_stack=STACK)
    )
    batched = _batched(n=2)
    try:
        assert not plain.batched and plain.observation_space == batched.observation_space
        plain.seed(LAYOUT_SEED)
        batched.seed(LAYOUT_SEED)
        _assert_obs_match(plain.reset(), batched.reset(), "reset")
        actions = np.full((2, 7), 0.3, np.float32)
        for t in range(HORIZON + 1):
            got, want = plain.step(actions), batched.step(actions)
            _assert_obs_match(got[0], want[0], f"step {t}")
            np.testing.assert_array_equal(got[1], want[1])
            np.testing.assert_array_equal(got[2], want[2])
    finally:
        plain.close()
        batched.close()


def test_vec_env_methods(pair):
    from gymnasium.wrappers import RescaleAction
    from stable_baselines3.common.monitor import Monitor

    from kosmos_env.wrappers import StackFrames

    batched, dummy = pair
    assert batched.env_is_wrapped(Monitor) == dummy.env_is_wrapped(Monitor) == [False] * N
    assert batched.env_is_wrapped(RescaleAction) == [True] * N
    assert batched.env_is_wrapped(StackFrames, indices=[1]) == [True]
    assert batched.get_attr("task_names", indices=[0, 2]) == dummy.get_attr("task_names", indices=[0, 2])
    batched.set_attr("kosmos_mark", 3, indices=1)
    assert batched.envs[1].kosmos_mark == 3 and not hasattr(batched.envs[0], "kosmos_mark")
    assert batched.env_method("get_wrapper_attr", "stack_size") == [STACK] * N
    assert batched.has_attr("instructions")
    # SB3's seed semantics: seed + i at the next reset only
    assert batched.seed(11) == [11, 12, 13]
    first = batched.reset()
    batched.seed(11)
    np.testing.assert_array_equal(batched.reset()["state"], first["state"])
    # per-env reset options reach the env (here: the task), once
    batched.set_options([{"task": "spoon_on_towel"}] * N)
    batched.reset()
    assert [i["task"] for i in batched.reset_infos] == ["spoon_on_towel"] * N


def test_a_failing_step_raises_and_leaves_no_result_behind():
    vec = _batched(n=2)
    try:
        with pytest.raises(RuntimeError, match="reset"):
            vec.step(np.zeros((2, 7), np.float32))  # no reset yet: the env refuses
        assert all(sub.ready is None for sub in vec._subs)
        vec.reset()
        _, _, dones, _ = vec.step(np.zeros((2, 7), np.float32))  # usable afterwards
        assert not dones.any()
    finally:
        vec.close()


def test_bad_arguments_are_refused():
    from kosmos_env.training.sb3_vec import make_sb3_vec_env, task_seeds

    with pytest.raises(ValueError, match="unknown task"):
        make_sb3_vec_env(ENV, 2, image_size=SIZE, frame_stack=1, tasks=["fly_to_mars"], seed=0, env_kwargs=KW)
    with pytest.raises(ValueError, match="n_envs"):
        make_sb3_vec_env(ENV, 0, image_size=SIZE, frame_stack=1, tasks=None, seed=0)
    with pytest.raises(ValueError, match="one per sub-env"):
        task_seeds([1, 2], 3)
    assert task_seeds(2, 3) == [2000, 2001, 2002] and task_seeds([4, 9], 2) == [4, 9]


def test_ppo_learns_over_it_with_the_kosmos_network():
    from stable_baselines3 import PPO

    from kosmos_env.policies.checkpoint import NetConfig
    from kosmos_env.training.sb3 import KosmosActorCritic

    vec = _batched(n=2)
    try:
        net = NetConfig(frame_stack=STACK, n_tasks=len(vec.get_attr("instructions")[0]))
        model = PPO(
            KosmosActorCritic,
            vec,
            n_steps=8,
            batch_size=8,
            n_epochs=1,
            policy_kwargs={"net_config": net.to_dict()},
            seed=0,
            device="cpu",
            verbose=0,
        )
        before = [p.detach().clone() for p in model.policy.net.parameters()]
        model.learn(32)
        assert model.num_timesteps == 32
        after = list(model.policy.net.parameters())
        assert any(not np.array_equal(a.detach().numpy(), b.numpy()) for a, b in zip(after, before, strict=True))
    finally:
        vec.close()


def test_finetune_ppo_trains_through_the_batched_vec_env(tmp_path):
    import json

    from kosmos_env.policies.checkpoint import read_checkpoint_meta
    from kosmos_env.training.ppo import PPOConfig, default_vec_env, finetune_ppo

    assert default_vec_env(ENV) == "batched" and default_vec_env("Kosmos-Tabletop-v1") == "dummy"
    paths = finetune_ppo(
        ENV,
        None,
        reward="terminal",
        total_steps=16,
        n_envs=2,
        seed=SEED,
        out_dir=tmp_path,
        checkpoint_every=1,
        env_kwargs=KW,
        config=PPOConfig(n_steps=4, batch_size=8, n_epochs=1, critic_warmup=0),
        progress=False,
        vec_env="batched",
    )
    assert len(paths) == 2 and read_checkpoint_meta(paths[-1])["env_steps"] == 16
    curve = json.loads((tmp_path / "curve.json").read_text())
    assert curve["meta"]["training"]["vec_env"] == "batched"
    # 16 steps of 2 envs over horizon 3: every env finished two episodes, each 3 steps long
    assert [int(r["length"]) for r in _read_csv(tmp_path / "curve.csv")] == [3, 3, 3, 3]
    with pytest.raises(ValueError, match="vec_env must be one of"):
        finetune_ppo(ENV, None, total_steps=4, n_envs=1, out_dir=tmp_path / "x", vec_env="subproc", progress=False)


def _read_csv(path):
    import csv

    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))
