"""Issue 31 item 1: one policy server shared by several workers or lockstep lanes keeps every
episode's state apart (a session per episode), so N workers score what one worker and the
in-process policy score; a server that cannot hold another session refuses it in one line; a
malformed request gets an error status, never a dropped connection."""

from __future__ import annotations

import http.client
import json
import struct

import numpy as np
import pytest

from kosmos_env import cli
from kosmos_env.policies import make_policy
from kosmos_env.policies.protocol import PolicyClient, PolicyServer, RemotePolicyError
from kosmos_env.policies.remote import RemotePolicy, policy_info
from tests.support.campaign import tabletop_eval_argv

TASK = "carrot_on_plate"
SEEDS = 3
INSTR = "put the carrot on the plate"


def _argv(out, policy, *extra):
    return tabletop_eval_argv(out, [policy], *extra, tasks=(TASK,), seeds=SEEDS)


def _episodes(out):
    results = json.loads((out / "results.json").read_text())
    return sorted((e["seed"], e["outcome"], e["steps"]) for e in results["per_episode"])


def _server(name="random", **kwargs):
    policy = make_policy(name, **({"skill": 1.0} if name == "scripted" else {}))
    return PolicyServer(policy, policy_info(policy), **kwargs)  # started by `with`


def test_two_workers_through_one_server_score_as_one_worker_and_in_process(tmp_path):
    """The attack: `scripted:skill=1.0` through one server with --workers 2 scored 1/6 (the
    workers reset each other's episode); with sessions it scores what 1 worker and in-process do."""
    with _server("scripted", factory=lambda: make_policy("scripted", skill=1.0)) as server:
        url = f"remote:url={server.url}"
        assert cli.main(_argv(tmp_path / "w2", url, "--workers", "2")) == 0
        assert cli.main(_argv(tmp_path / "w1", url, "--workers", "1")) == 0
        assert cli.main(_argv(tmp_path / "lock2", url, "--lockstep", "2")) == 0  # lanes: allowed now
    assert cli.main(_argv(tmp_path / "local", "scripted:skill=1.0")) == 0
    local = _episodes(tmp_path / "local")
    assert {o for _, o, _ in local} == {"success"}  # the skilled policy succeeds: a mix-up would show
    assert _episodes(tmp_path / "w2") == local
    assert _episodes(tmp_path / "w1") == local
    assert _episodes(tmp_path / "lock2") == local


def _obs():
    return {"image": np.zeros((8, 8, 3), np.uint8), "instruction": INSTR}


def test_interleaved_episodes_keep_their_own_state():
    """Two clients interleave reset/act on one server: each client's actions equal what a private
    policy of its own answers (the old server answered with whichever episode was reset last)."""
    with _server(factory=lambda: make_policy("random")) as server:
        a, b = RemotePolicy(server.url), RemotePolicy(server.url)
        ref_a, ref_b = make_policy("random"), make_policy("random")
        a.reset(INSTR, seed=1), ref_a.reset(INSTR, seed=1)
        b.reset(INSTR, seed=2), ref_b.reset(INSTR, seed=2)
        for _ in range(3):
            np.testing.assert_array_equal(a.act(_obs()), ref_a.act(_obs()))
            np.testing.assert_array_equal(b.act(_obs()), ref_b.act(_obs()))
        assert server.sessions == 2
        a.close(), b.close()
        assert server.sessions == 0  # closing ends the session: its instance is free again


def test_a_server_with_one_instance_refuses_a_second_concurrent_session():
    with _server() as server:  # no factory: one policy instance
        first, second = RemotePolicy(server.url), RemotePolicy(server.url, busy_wait=0)
        first.reset(INSTR, seed=0)
        first.act(_obs())
        other = PolicyClient(server.url)  # another process's client: refused (503), no wait asked for
        with pytest.raises(RemotePolicyError, match="503 too_many_sessions.*maximum \\(1\\)") as refused:
            other.reset(INSTR, 0, session="other")
        assert refused.value.transport  # a full server is the machinery's state, never the policy's failure
        other.close()
        # in this process, the one slot is this process's own: waiting could never end, so it is refused at once
        with pytest.raises(RemotePolicyError, match="this process already holds 1") as refused:
            second.reset(INSTR, seed=0)
        assert refused.value.transport
        first.reset(INSTR, seed=1)  # the same client's next episode ends its previous one: accepted
        first.close()
        second.reset(INSTR, seed=0)  # free again
        second.act(_obs())
        second.close()


def test_an_expired_session_is_refused_not_served_with_another_state():
    with _server(factory=lambda: make_policy("random"), session_idle=0.05) as server:
        client = PolicyClient(server.url)
        client.reset(INSTR, 0, session="s1")
        import time

        time.sleep(0.2)
        with pytest.raises(RemotePolicyError, match="409 unknown_session"):
            client.act(_obs(), session="s1")
        with pytest.raises(RemotePolicyError, match="400 bad_request.*'session'"):
            client.reset(INSTR, 0, session="x" * 500)
        client.close()


def test_a_server_without_sessions_is_refused_by_the_client(monkeypatch):
    with _server() as server:
        monkeypatch.setattr(
            PolicyServer,
            "handle_info",
            lambda self: (
                200,
                "application/json",
                json.dumps({"protocol": "kosmos-policy", "version": 1, "policy": self.info}).encode(),
            ),
        )
        with pytest.raises(RemotePolicyError, match="does not keep per-episode sessions"):
            RemotePolicy(server.url)


def test_list_typed_dtype_gets_a_400_not_a_dropped_connection():
    """Found: a list as an array's dtype made the server drop the connection unanswered."""
    header = json.dumps(
        {
            "version": 1,
            "kind": "observation",
            "fields": {"instruction": "x"},
            "arrays": [{"name": "image", "dtype": ["<u1"], "shape": [1, 1, 3]}],
        }
    ).encode()
    body = b"KPOL" + struct.pack("<I", len(header)) + header + b"\0\0\0"
    with _server() as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.httpd.server_address[1], timeout=10)
        conn.request("POST", "/v1/act", body=body, headers={"Content-Type": "application/x-kosmos-policy"})
        response = conn.getresponse()
        answer = json.loads(response.read())
        conn.close()
    assert response.status == 400 and answer["error"]["code"] == "bad_request"
    assert "dtype ['<u1']" in answer["error"]["message"]


def test_serve_policy_binds_loopback_by_default_and_bounds_sessions():
    from kosmos_env.cli import build_parser

    args = build_parser().parse_args(["serve-policy", "scripted"])
    assert args.host == "127.0.0.1" and args.max_sessions >= 1 and args.session_lease > 0
    with pytest.raises(ValueError, match="max_sessions"):
        PolicyServer(make_policy("random"), factory=lambda: make_policy("random"), max_sessions=0)


def test_a_session_being_built_does_not_stall_the_others():
    """The factory (a model load, for a large policy) runs outside the session table's lock: an
    act of a live session is answered while another session's instance is still being built."""
    import threading

    release, building = threading.Event(), threading.Event()

    def factory():
        building.set()
        assert release.wait(30), "the test never released the build"
        return make_policy("random")

    with _server(factory=factory, max_sessions=2) as server:
        # a: 5 s timeout, so a stalled act fails the test instead of hanging it
        a, b = RemotePolicy(server.url, timeout=5.0), RemotePolicy(server.url, timeout=30)
        a.reset(INSTR, seed=0)  # takes the server's first instance: no build
        opener = threading.Thread(target=lambda: b.reset(INSTR, seed=1))
        opener.start()
        assert building.wait(30)
        try:
            assert a.act(_obs()).shape == (7,)  # answered while b's instance is being built
            with pytest.raises(RemotePolicyError, match="too_many_sessions"):
                RemotePolicy(server.url, busy_wait=0).reset(INSTR)  # the slot being built counts
        finally:
            release.set()
            opener.join(30)
        assert b.act(_obs()).shape == (7,) and server.sessions == 2
        a.close(), b.close()
