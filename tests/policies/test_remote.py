"""RemotePolicy against a loopback server: same actions as in process, chunks, and the CLI server."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import gymnasium
import numpy as np
import pytest

import kosmos_env  # noqa: F401  (registers the env ids)
from kosmos_env.policies import make_policy, parse_policy_arg
from kosmos_env.policies.base import ActionQueue, ChunkedPolicy, Policy, as_action_rows
from kosmos_env.policies.protocol import PolicyServer
from kosmos_env.policies.remote import RemotePolicy, policy_info


def _episode(env, policy, seed):
    obs, _ = env.reset(seed=seed)
    policy.reset(obs["instruction"], seed=seed)
    actions, done = [], False
    while not done:
        action = policy.act(obs)
        actions.append(np.array(action, copy=True))
        obs, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    return np.stack(actions), reward, info["outcome"], env.unwrapped.rollout().frames


def test_tabletop_episode_through_remote_policy_matches_in_process():
    env = gymnasium.make("Kosmos-Tabletop-v1", image_size=(64, 64))
    local = make_policy("scripted", skill=0.6)
    served = make_policy("scripted", skill=0.6)
    with PolicyServer(served, policy_info(served)) as server:
        assert server.url.startswith("http://127.0.0.1:")
        remote = make_policy("remote", url=server.url, timeout=10)
        assert isinstance(remote, RemotePolicy) and remote.name == "remote:scripted"
        assert remote.content_hash() == local.content_hash()
        for seed in (0, 1):
            a_local, r_local, out_local, f_local = _episode(env, local, seed)
            a_remote, r_remote, out_remote, f_remote = _episode(env, remote, seed)
            assert a_local.shape[0] == env.unwrapped.kosmos_spec.horizon or out_local == out_remote
            np.testing.assert_array_equal(a_remote, a_local)  # bit-identical float32
            assert (r_remote, out_remote) == (r_local, out_local)
            np.testing.assert_array_equal(f_remote, f_local)
        remote.close()
    env.close()


class CountingChunks(Policy):
    """Returns chunks of ``k`` actions whose dx encodes (plan number, index in chunk)."""

    name = "counting-chunks"

    def __init__(self, k=4):
        self.k, self.plans = k, 0

    def reset(self, instruction, seed=None):
        self.plans = 0

    def act(self, obs):
        self.plans += 1
        chunk = np.zeros((self.k, 7), np.float32)
        chunk[:, 0] = [self.plans * 0.01 + i * 0.001 for i in range(self.k)]
        chunk[:, 6] = 1.0
        return chunk


def test_chunked_policy_feeds_a_chunk_one_action_at_a_time_and_replans_when_empty():
    inner = CountingChunks(k=4)
    policy = ChunkedPolicy(inner)
    policy.reset("x")
    dx = [float(policy.act({})[0]) for _ in range(10)]
    expected = [p * 0.01 + i * 0.001 for p in (1, 2, 3) for i in range(4)][:10]
    np.testing.assert_allclose(dx, expected, rtol=0, atol=1e-7)
    assert inner.plans == 3 and policy.plans == 3
    policy.reset("x")  # reset empties the queue
    assert len(policy.queue) == 0 and float(policy.act({})[0]) == pytest.approx(0.01)

    # execute=2: only the first two actions of each chunk, then re-plan
    policy = ChunkedPolicy(CountingChunks(k=4), execute=2)
    policy.reset("x")
    dx = [float(policy.act({})[0]) for _ in range(5)]
    np.testing.assert_allclose(dx, [0.01, 0.011, 0.02, 0.021, 0.03], atol=1e-7)
    assert policy.content_hash() != ChunkedPolicy(CountingChunks(k=4)).content_hash()

    # an env with action_chunk 3 gets (3, 7) blocks across chunk boundaries
    policy = ChunkedPolicy(CountingChunks(k=4), chunk=3)
    policy.reset("x")
    first, second = policy.act({}), policy.act({})
    assert first.shape == (3, 7)
    np.testing.assert_allclose(second[:, 0], [0.013, 0.02, 0.021], atol=1e-7)


def test_chunked_policy_in_a_tabletop_episode_over_the_wire():
    class TowardsPlus(CountingChunks):
        def act(self, obs):
            assert obs["image"].shape == (64, 64, 3) and obs["ee_pos"].shape == (3,)
            chunk = super().act(obs)
            chunk[:, 0] = 0.01
            return chunk

    env = gymnasium.make("Kosmos-Tabletop-v1", image_size=(64, 64), horizon=10)
    served = TowardsPlus(k=4)
    with PolicyServer(served, policy_info(served)) as server:
        remote = RemotePolicy(server.url)
        policy = ChunkedPolicy(remote)
        obs, _ = env.reset(seed=0)
        policy.reset(obs["instruction"], seed=0)
        x0 = float(obs["ee_pos"][0])
        for _ in range(10):
            obs, _, terminated, truncated, _ = env.step(policy.act(obs))
        assert truncated and policy.plans == 3 and served.plans == 3  # ceil(10 / 4)
        assert float(obs["ee_pos"][0]) > x0 + 0.03  # the commanded +x motion happened
        remote.close()
    env.close()


def test_action_queue_and_rows_validation():
    q = ActionQueue()
    q.extend(np.ones(7, np.float32))
    q.extend(np.zeros((2, 7), np.float32))
    assert len(q) == 3 and q.pop()[0] == 1.0 and q.take(2).shape == (2, 7)
    with pytest.raises(IndexError):
        q.pop()
    with pytest.raises(ValueError, match=r"\(k, 7\)"):
        as_action_rows(np.zeros((2, 6)))


def test_remote_policy_argument_parses_urls():
    name, kwargs = parse_policy_arg("remote:url=http://127.0.0.1:8765,timeout=5")
    assert name == "remote" and kwargs == {"url": "http://127.0.0.1:8765", "timeout": 5}


@pytest.mark.slow
def test_serve_policy_cli_serves_a_policy_on_loopback():
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kosmos_env.cli", "serve-policy", "random:seed=5", "--port", "0", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        line = ""
        while time.monotonic() < deadline and "serving" not in line:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                pytest.fail(f"serve-policy exited early: {proc.stderr.read()}")
        url = line.rsplit(" at ", 1)[1].strip()
        assert url.startswith("http://127.0.0.1:")
        remote = make_policy("remote", url=url)
        local = make_policy("random", seed=5)
        assert remote.content_hash() == local.content_hash()
        obs = {"image": np.zeros((32, 32, 3), np.uint8), "instruction": "put the carrot on the plate"}
        remote.reset(obs["instruction"], seed=9)
        local.reset(obs["instruction"], seed=9)
        for _ in range(3):
            np.testing.assert_array_equal(remote.act(obs), local.act(obs))
        remote.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
