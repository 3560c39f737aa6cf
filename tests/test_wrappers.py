"""kosmos_env.wrappers: the documented observation spaces, the obs_encoding contract, and the two
RL libraries (Stable-Baselines3, TorchRL) running unmodified on both tabletop worlds."""

from __future__ import annotations

import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces

from kosmos_env.tasks import load_suite
from kosmos_env.utils import obs_encoding
from kosmos_env.wrappers import KosmosObservation, StackFrames, make_rl_env, wrap_rl_env
from tests.conftest import requires_extra

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # 2 shared cores in CI: one thread each keeps the test file cheap

# short episodes keep every test cheap; the tabletop renders at its spec size (128) and the
# wrapper resizes, the learned world's only size is 64x64
WORLDS = {
    "Kosmos-Tabletop-v1": {"image_size": (64, 64), "horizon": 10},
    "Kosmos-TabletopLearned-v1": {"horizon": 10},
}
TABLETOP_INSTRUCTIONS = tuple(t.instruction for t in load_suite("tabletop").tasks.values())


def _make(env_id: str, **kwargs):
    settings = dict(WORLDS[env_id])
    size = settings.pop("image_size", None)
    return make_rl_env(env_id, image_size=size, **settings, **kwargs)


def _actions(space: spaces.Box, n: int, seed: int) -> list[np.ndarray]:
    space.seed(seed)
    return [space.sample() for _ in range(n)]


@pytest.mark.parametrize("task_encoding", ["onehot", "index"])
def test_observation_space_is_as_documented(task_encoding):
    env = make_rl_env("Kosmos-Tabletop-v1", task_encoding=task_encoding, image_size=(48, 40), horizon=4)
    try:
        raw = env.unwrapped.observation_space
        space = env.observation_space
        assert isinstance(space, spaces.Dict) and list(space.spaces) == ["image", "state", "task"]
        assert space["image"] == spaces.Box(0, 255, (48, 40, 3), dtype=np.uint8)
        low = np.concatenate([raw[k].low for k in obs_encoding.STATE_KEYS])
        high = np.concatenate([raw[k].high for k in obs_encoding.STATE_KEYS])
        assert space["state"] == spaces.Box(low, high, (7,), dtype=np.float32)
        assert np.allclose(space["state"].low, [-2, -2, -2, -np.pi, -np.pi, -np.pi, 0], atol=1e-6)
        k = len(TABLETOP_INSTRUCTIONS)
        expected_task = (
            spaces.Box(0.0, 1.0, (k,), dtype=np.float32) if task_encoding == "onehot" else spaces.Discrete(k)
        )
        assert space["task"] == expected_task
        assert env.action_space == spaces.Box(-1.0, 1.0, (7,), dtype=np.float32)
        # the vocabulary: the suite's instructions in the env's task order, reachable through the wrappers
        assert env.get_wrapper_attr("instructions") == TABLETOP_INSTRUCTIONS
        assert env.get_wrapper_attr("task_names") == tuple(env.unwrapped.task_names)
        assert env.get_wrapper_attr("image_size") == (48, 40)

        obs, _ = env.reset(seed=3)
        seen = [obs]
        for action in _actions(env.action_space, 6, seed=3):
            obs, _, terminated, truncated, _ = env.step(action)
            seen.append(obs)
            if terminated or truncated:
                obs, _ = env.reset()
                seen.append(obs)
        for obs in seen:
            assert obs in space
            assert obs["image"].dtype == np.uint8 and obs["state"].dtype == np.float32
        default = env.unwrapped.task_names.index("carrot_on_plate")
        if task_encoding == "onehot":
            assert obs["task"].dtype == np.float32 and obs["task"].argmax() == default and obs["task"].sum() == 1.0
        else:
            assert isinstance(obs["task"], np.int64) and obs["task"] == default
    finally:
        env.close()


def test_frame_stack_layout_is_oldest_first_along_channels():
    n, seed = 3, 5
    stacked = make_rl_env("Kosmos-Tabletop-v1", image_size=(32, 32), horizon=6, frame_stack=n, rescale_actions=False)
    single = make_rl_env("Kosmos-Tabletop-v1", image_size=(32, 32), horizon=6, frame_stack=1, rescale_actions=False)
    try:
        space = stacked.observation_space
        assert space["image"] == spaces.Box(0, 255, (32, 32, 3 * n), dtype=np.uint8)
        assert space["state"].shape == (7 * n,) and space["state"].dtype == np.float32
        assert np.array_equal(space["state"].low, np.tile(single.observation_space["state"].low, n))
        assert space["task"] == single.observation_space["task"]
        assert stacked.get_wrapper_attr("stack_size") == n

        obs_s, _ = stacked.reset(seed=seed)
        obs_1, _ = single.reset(seed=seed)
        history = [obs_1] * n  # a fresh episode is padded with copies of the reset observation
        for step, action in enumerate(_actions(single.action_space, 5, seed=seed)):
            if step:
                obs_s, *_ = stacked.step(action)
                obs_1, *_ = single.step(action)
                history = history[1:] + [obs_1]
            assert obs_s in space
            assert np.array_equal(obs_s["image"], np.concatenate([h["image"] for h in history], axis=-1))
            assert np.array_equal(obs_s["state"], np.concatenate([h["state"] for h in history]))
            assert np.array_equal(obs_s["task"], obs_1["task"])
            assert np.array_equal(obs_s["image"][..., -3:], obs_1["image"])  # the newest frame is last
    finally:
        stacked.close()
        single.close()


@pytest.mark.parametrize("frame_stack,task_encoding", [(1, "onehot"), (2, "index")])
def test_gymnasium_check_env_passes(frame_stack, task_encoding):
    from gymnasium.utils.env_checker import check_env

    env = make_rl_env(
        "Kosmos-Tabletop-v1", image_size=(64, 64), horizon=5, frame_stack=frame_stack, task_encoding=task_encoding
    )
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(env, skip_render_check=True)  # also remakes the env from env.spec (wrappers included)
        # the checker notes that it checks a wrapped env; anything else is a defect of the wrappers
        problems = [str(w.message) for w in caught if "is different from the unwrapped version" not in str(w.message)]
        assert problems == []
    finally:
        env.close()


@pytest.mark.parametrize("env_id", sorted(WORLDS))
@pytest.mark.parametrize("task_encoding", ["onehot", "index"])
def test_encoding_equals_obs_encoding_of_raw_observations(env_id, task_encoding):
    """The contract a trained-checkpoint policy relies on: same seed and actions, same arrays."""
    settings = dict(WORLDS[env_id])
    size = settings.pop("image_size", None)
    raw = gymnasium.make(env_id, **settings)
    wrapped = make_rl_env(env_id, task_encoding=task_encoding, image_size=size, rescale_actions=False, **settings)
    instructions = wrapped.get_wrapper_attr("instructions")
    onehot = task_encoding == "onehot"
    tasks = iter(["spoon_on_towel", "eggplant_in_basket"])  # a second task after the first episode
    try:
        r_obs, _ = raw.reset(seed=11)
        w_obs, _ = wrapped.reset(seed=11)
        for action in _actions(raw.action_space, 14, seed=11):
            assert np.array_equal(w_obs["image"], obs_encoding.resize_image(r_obs["image"], size))
            assert np.array_equal(w_obs["state"], obs_encoding.encode_state(r_obs))
            assert w_obs["state"].dtype == obs_encoding.encode_state(r_obs).dtype
            assert np.array_equal(
                w_obs["task"], obs_encoding.encode_task(r_obs["instruction"], instructions, onehot=onehot)
            )
            r_obs, r_rew, r_term, r_trunc, _ = raw.step(action)
            w_obs, w_rew, w_term, w_trunc, _ = wrapped.step(action)
            assert (r_rew, r_term, r_trunc) == (w_rew, w_term, w_trunc)
            if r_term or r_trunc:
                options = {"task": next(tasks)}
                r_obs, _ = raw.reset(seed=12, options=options)
                w_obs, _ = wrapped.reset(seed=12, options=options)
        assert obs_encoding.task_index(r_obs["instruction"], instructions) == raw.unwrapped.task_names.index(
            "spoon_on_towel"
        )
    finally:
        raw.close()
        wrapped.close()


def test_rescaled_actions_reach_the_env_bounds_exactly():
    env = make_rl_env("Kosmos-Tabletop-v1", image_size=(32, 32), horizon=5)
    try:
        base = env.unwrapped.action_space
        env.reset(seed=0)
        sent = []
        original_step = env.unwrapped.step

        def spy(action):
            sent.append(np.asarray(action))
            return original_step(action)

        env.unwrapped.step = spy
        for action in (np.ones(7, np.float32), -np.ones(7, np.float32), np.zeros(7, np.float32)):
            env.step(action)  # the env refuses (ValueError) anything outside its own bounds
        assert np.allclose(sent[0], base.high) and np.allclose(sent[1], base.low)
        assert np.allclose(sent[2], (base.low + base.high) / 2)
    finally:
        env.close()


@pytest.mark.slow
@requires_extra("rl")  # stable-baselines3
@pytest.mark.parametrize(
    "env_id,kwargs",
    [
        ("Kosmos-Tabletop-v1", {}),
        ("Kosmos-TabletopLearned-v1", {}),
        ("Kosmos-TabletopLearned-v1", {"frame_stack": 2, "task_encoding": "index"}),
    ],
)
def test_stable_baselines3_ppo_learns_and_predicts(env_id, kwargs):
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = _make(env_id, **kwargs)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sb3_check_env(env)
        assert [str(w.message) for w in caught] == []
        model = PPO("MultiInputPolicy", env, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu", verbose=0)
        # the image is read by SB3's CNN (an image space), not flattened into the MLP
        assert "image" in model.policy.features_extractor.extractors
        assert type(model.policy.features_extractor.extractors["image"]).__name__ == "NatureCNN"
        model.learn(total_timesteps=256)
        assert model.num_timesteps == 256
        obs, _ = env.reset(seed=1)
        for _ in range(3):
            action, _ = model.predict(obs, deterministic=False)
            assert action in env.action_space
            obs, *_ = env.step(action)
    finally:
        env.close()


@pytest.mark.slow
@requires_extra("rl")  # torchrl
@pytest.mark.parametrize(
    "env_id,task_encoding", [("Kosmos-Tabletop-v1", "onehot"), ("Kosmos-TabletopLearned-v1", "index")]
)
def test_torchrl_rollout_matches_its_specs(env_id, task_encoding):
    from torchrl.envs import GymWrapper
    from torchrl.envs.utils import check_env_specs

    env = GymWrapper(_make(env_id, task_encoding=task_encoding))
    try:
        check_env_specs(env, seed=0)
        # TorchRL names a Dict's "state" key "observation" (its convention for the state vector)
        # and reads a Discrete as a one-hot
        keys = set(env.observation_spec.keys())
        assert keys == {"image", "observation", "task"}
        steps = 200
        td = env.rollout(steps, break_when_any_done=False)
        assert td.batch_size == torch.Size([steps])
        assert td["next", "image"].shape == (steps, 64, 64, 3) and td["next", "image"].dtype == torch.uint8
        assert td["next", "observation"].shape == (steps, 7)
        assert td["next", "task"].shape == (steps, len(TABLETOP_INSTRUCTIONS))
        assert env.observation_spec.expand(steps).is_in(td["next"].select(*keys))
        assert env.action_spec.expand(steps, *env.action_spec.shape).is_in(td["action"])
        assert int(td["next", "done"].sum()) == steps // 10  # horizon 10: every tenth step ends an episode
    finally:
        env.close()


class _WithoutStateExtras(gymnasium.ObservationWrapper):
    """A Kosmos env whose observations lack the state extras (as Kosmos-Bridge-v1's do)."""

    def __init__(self, env):
        super().__init__(env)
        self.observation_space = spaces.Dict({k: env.observation_space[k] for k in ("image", "instruction")})

    def observation(self, observation):
        return {k: observation[k] for k in ("image", "instruction")}


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"task_encoding": "words"}, r"task_encoding must be one of \['onehot', 'index'\], got 'words'"),
        ({"frame_stack": 0}, r"frame_stack must be an int >= 1, got 0"),
        ({"frame_stack": 2.0}, r"frame_stack must be an int >= 1, got 2.0"),
        ({"frame_stack": True}, r"frame_stack must be an int >= 1, got True"),
        ({"image_size": (64,)}, r"image_size must be None or \(height, width\) of two positive ints, got \(64,\)"),
        ({"image_size": (0, 64)}, r"image_size must be None or \(height, width\) of two positive ints"),
        ({"image_size": (64.0, 64)}, r"image_size must be None or \(height, width\) of two positive ints"),
        ({"image_size": 64}, r"image_size must be None or \(height, width\) of two positive ints, got 64"),
        ({"rescale_actions": "yes"}, r"rescale_actions must be True or False, got 'yes'"),
    ],
)
def test_bad_arguments_raise_one_line_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message) as info:
        make_rl_env("Kosmos-Tabletop-v1", **kwargs)
    assert "\n" not in str(info.value)


def test_envs_that_cannot_be_encoded_are_refused(tabletop_env):
    with pytest.raises(
        ValueError, match=r"observations have no \['ee_pos', 'ee_euler', 'gripper'\]: the state vector needs"
    ):
        wrap_rl_env(_WithoutStateExtras(tabletop_env))
    cartpole = gymnasium.make("CartPole-v1")
    with pytest.raises(
        ValueError, match=r"KosmosObservation needs a Kosmos env \(Dict observation with 'image' and 'instruction'\)"
    ):
        KosmosObservation(cartpole)
    with pytest.raises(ValueError, match=r"StackFrames needs the Dict\(image, state, task\) of KosmosObservation"):
        StackFrames(tabletop_env, 2)
    with pytest.raises(ValueError, match=r"stack_size must be an int >= 1, got 0"):
        StackFrames(KosmosObservation(tabletop_env), 0)
