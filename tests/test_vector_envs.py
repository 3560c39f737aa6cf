"""``gymnasium.make_vec`` over Kosmos envs: batched spaces, autoreset, seeding, and a vector
rollout equal to N single rollouts (frames, rewards, terminations, judgments).

Async mode uses the ``spawn`` context: MuJoCo's EGL (and CUDA) state does not survive
``fork``, and a process that has rendered once and then forks leaves its children hanging
(measured: an async vector env with the default fork context hangs forever in reset once the
parent process has rendered a tabletop frame). ``vector_kwargs={"context": "spawn"}`` (or
``"forkserver"``) is the documented way; scripts need the usual ``if __name__ == "__main__":``.

Async mode also needs ``shared_memory=False`` (measured with gymnasium 1.4.0): with shared
memory, ``AsyncVectorEnv`` reads its observation buffers once at construction, which is fine
for array spaces (views) but freezes ``Text`` observations: every ``instruction`` comes back as
a string of the charset's first character. The root cause is Gymnasium's
(Farama-Foundation/Gymnasium#1164, the same read-once design); without shared memory the
observations travel through the pipes (a 64x64 frame is 12 KB, negligible next to a step).
"""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

import kosmos_env
import kosmos_env.env
from tests.conftest import requires_extra
from tests.support.vector import info_of, obs_of, seeded_actions

SEEDS = [3, 11]
HORIZON = 4


def _single_rollout(env, seed: int, actions: list[np.ndarray]):
    obs, info = env.reset(seed=seed)
    record = {
        "obs": [obs],
        "frames": [obs["image"][None]],
        "rewards": [],
        "terminated": [],
        "truncated": [],
        "outcome": None,
        "judgment": None,
    }
    for a in actions:
        obs, r, term, trunc, info = env.step(a)
        record["obs"].append(obs)
        record["frames"].append(info["frames"])
        record["rewards"].append(r)
        record["terminated"].append(term)
        record["truncated"].append(trunc)
        if term or trunc:
            record["outcome"], record["judgment"] = info.get("outcome"), info.get("judgment")
            break
    # what autoreset must produce: the next reset without a seed (the env's RNG continues)
    record["autoreset_obs"], _ = env.reset()
    return record


def _vector_rollout(venv, actions_per_env: list[list[np.ndarray]]):
    n = venv.num_envs
    obs, info = venv.reset(seed=SEEDS[:n])
    records = [
        {
            "obs": [obs_of(obs, i)],
            "frames": [obs["image"][i][None]],
            "rewards": [],
            "terminated": [],
            "truncated": [],
            "outcome": None,
            "judgment": None,
        }
        for i in range(n)
    ]
    done = [False] * n
    for t in range(len(actions_per_env[0])):
        batch = np.stack([actions_per_env[i][t] for i in range(n)])
        obs, r, term, trunc, info = venv.step(batch)
        assert obs in venv.observation_space or _obs_in(venv, obs)
        for i in range(n):
            if done[i]:
                # an env that ended earlier (a gate discard) was reset by this step (next-step autoreset)
                if "autoreset_obs" not in records[i]:
                    assert not term[i] and not trunc[i] and r[i] == 0
                    records[i]["autoreset_obs"] = obs_of(obs, i)
                continue
            records[i]["obs"].append(obs_of(obs, i))
            records[i]["frames"].append(info["frames"][i])
            records[i]["rewards"].append(r[i])
            records[i]["terminated"].append(bool(term[i]))
            records[i]["truncated"].append(bool(trunc[i]))
            if term[i] or trunc[i]:
                assert info["_outcome"][i]
                records[i]["outcome"] = info["outcome"][i]
                records[i]["judgment"] = _judgment(info, i)
                done[i] = True
        if all(done):
            break
    # next-step autoreset: the step after the end resets (the action is ignored)
    obs, r, term, trunc, info = venv.step(np.stack([a[0] for a in actions_per_env]))
    for i in range(n):
        if "autoreset_obs" not in records[i]:
            assert not term[i] and not trunc[i] and r[i] == 0
            records[i]["autoreset_obs"] = obs_of(obs, i)
    return records


def _obs_in(venv, obs) -> bool:
    return all(obs_of(obs, i) in venv.single_observation_space for i in range(venv.num_envs))


def _judgment(info, i):
    j = info.get("judgment")
    if j is None or not info["_judgment"][i]:
        return None
    if not isinstance(j, dict):  # a discarded episode's judgment is None: gymnasium stacks an object array
        return j[i]
    return info_of(j, i)


def _same_obs(a, b) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], str):
            assert a[k] == b[k]
        else:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def _compare(vec, single) -> None:
    assert len(vec["obs"]) == len(single["obs"])
    for a, b in zip(vec["obs"], single["obs"], strict=True):
        _same_obs(a, b)
    for a, b in zip(vec["frames"], single["frames"], strict=True):
        np.testing.assert_array_equal(a, b)
    assert [float(x) for x in vec["rewards"]] == [float(x) for x in single["rewards"]]
    assert vec["terminated"] == single["terminated"] and vec["truncated"] == single["truncated"]
    assert vec["outcome"] == single["outcome"]
    if single["judgment"] is not None:
        for key in ("success", "score", "abstained", "pending"):
            if key in single["judgment"]:
                got = vec["judgment"][key]
                assert (got.item() if hasattr(got, "item") else got) == single["judgment"][key], key
    _same_obs(vec["autoreset_obs"], single["autoreset_obs"])


def _check_spaces(venv, single_env) -> None:
    assert venv.single_observation_space == single_env.observation_space
    assert venv.single_action_space == single_env.action_space
    assert venv.observation_space == batch_space(single_env.observation_space, venv.num_envs)
    assert venv.action_space == batch_space(single_env.action_space, venv.num_envs)
    assert venv.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP


# -- tabletop ---------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_tabletop_vector_rollout_equals_single_rollouts(mode):
    kwargs = dict(image_size=(48, 48), horizon=HORIZON)
    vector_kwargs = {"context": "spawn", "shared_memory": False} if mode == "async" else {}
    single = gymnasium.make("Kosmos-Tabletop-v1", **kwargs)
    venv = gymnasium.make_vec(
        "Kosmos-Tabletop-v1", num_envs=2, vectorization_mode=mode, vector_kwargs=vector_kwargs, **kwargs
    )
    try:
        _check_spaces(venv, single)
        actions = [seeded_actions(single.action_space, HORIZON, seed) for seed in SEEDS]
        vec = _vector_rollout(venv, actions)
        again = _vector_rollout(venv, actions)  # deterministic with seeds: a second run is identical
        refs = [_single_rollout(single, seed, actions[i]) for i, seed in enumerate(SEEDS)]
    finally:
        venv.close()
        single.close()
    for i in range(2):
        _compare(vec[i], refs[i])
        _compare(again[i], refs[i])
        assert vec[i]["truncated"][-1] and vec[i]["outcome"] in ("success", "failure")
        assert vec[i]["rewards"][-1] == (1.0 if vec[i]["outcome"] == "success" else 0.0)  # the state judge's score
    # the two envs really differ (different seeds give different scenes)
    assert not np.array_equal(vec[0]["frames"][0], vec[1]["frames"][0])


def test_tabletop_sync_vector_obs_are_in_the_batched_space():
    venv = gymnasium.make_vec(
        "Kosmos-Tabletop-v1", num_envs=3, vectorization_mode="sync", image_size=(32, 32), horizon=2
    )
    try:
        obs, info = venv.reset(seed=0)  # one int seeds env i with 0 + i
        assert obs in venv.observation_space
        assert obs["image"].shape == (3, 32, 32, 3) and obs["image"].dtype == np.uint8
        assert isinstance(obs["instruction"], tuple) and len(obs["instruction"]) == 3
        assert "frames" not in info  # a reset generates no frames; the first one is obs["image"]
        with pytest.raises(ValueError, match="(?i)nan"):
            venv.step(np.full((3, 7), np.nan, np.float32))  # the action contract holds in each sub-env
        obs, rew, term, trunc, info = venv.step(np.zeros((3, 7), np.float32))
        assert obs in venv.observation_space and rew.shape == (3,) and rew.dtype == np.float64
        assert "gate" in info and info["_gate"].all()
        assert not trunc.any()
        obs, rew, term, trunc, info = venv.step(np.zeros((3, 7), np.float32))
        assert trunc.all() and set(info["outcome"]) <= {"success", "failure"}
        assert info["judgment"]["_success"].all()
    finally:
        venv.close()


class _TextEnv(gymnasium.Env):
    """The smallest env with a Text observation, to show Gymnasium's shared-memory behaviour."""

    def __init__(self):
        self.observation_space = gymnasium.spaces.Dict(
            {"instruction": gymnasium.spaces.Text(max_length=32, charset=kosmos_env.env.INSTRUCTION_CHARSET)}
        )
        self.action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return {"instruction": "put the carrot on the plate"}, {}

    def step(self, action):
        return {"instruction": "put the carrot on the plate"}, 0.0, False, False, {}


@pytest.mark.slow
def test_async_shared_memory_freezes_text_observations_gymnasium_bug():
    """Why Kosmos envs refuse shared_memory=True in async mode (tests/test_faults_inputs.py checks the
    refusal): Gymnasium freezes Text observations. Fails (and the refusal can go) once it is fixed."""
    venv = gymnasium.vector.AsyncVectorEnv([_TextEnv, _TextEnv], shared_memory=True, context="spawn")
    try:
        obs, _ = venv.reset(seed=0)
    finally:
        venv.close()
    assert set(obs["instruction"][0]) == {kosmos_env.env.INSTRUCTION_CHARSET[0]}, obs["instruction"][0][:40]


# -- Cosmos 3 (tiny random pipeline) ----------------------------------------------------------
def _cosmos_kwargs(horizon: int = 2):
    from kosmos_env.testing.cosmos_tiny import tiny_bridge_spec, tiny_pipeline

    return dict(
        env_spec=tiny_bridge_spec(size=32, horizon=horizon),
        world_kwargs={"pipeline": tiny_pipeline()},
        judge="state",
        defer_judging=True,
    )


@pytest.mark.slow
@requires_extra("models")  # a tiny Cosmos 3 pipeline
def test_cosmos_sync_vector_rollout_equals_single_rollouts():
    kwargs = _cosmos_kwargs(horizon=2)
    single = gymnasium.make("Kosmos-Bridge-v1", **kwargs)
    venv = gymnasium.make_vec("Kosmos-Bridge-v1", num_envs=2, vectorization_mode="sync", **kwargs)
    try:
        _check_spaces(venv, single)
        assert venv.single_action_space.shape == (4, 7)
        actions = [seeded_actions(single.action_space, 2, seed) for seed in SEEDS]
        vec = _vector_rollout(venv, actions)
        refs = [_single_rollout(single, seed, actions[i]) for i, seed in enumerate(SEEDS)]
    finally:
        venv.close()
        single.close()
    for i in range(2):
        _compare(vec[i], refs[i])
        assert vec[i]["frames"][1].shape == (4, 32, 48, 3)  # all frames of a step are in info["frames"]
        # gate semantics kept: a rejected generation ends the episode as discarded, else judging is deferred
        assert vec[i]["outcome"] in ("pending", "discarded")
        if vec[i]["outcome"] == "pending":
            assert vec[i]["judgment"]["pending"] and vec[i]["rewards"][-1] == 0.0
    assert not np.array_equal(vec[0]["frames"][1], vec[1]["frames"][1])
