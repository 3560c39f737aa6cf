"""Issue 43 item 2: remote policies keep their identity, and a busy or abandoned server is the
machinery's state, never the policy's failure.

The attacks, each built for real (servers on 127.0.0.1, real clients, real campaigns):
a server restarted mid-run with another policy (it contributed 9 of 12 episodes under the old
policy's hash, rc 0); a full server (``--max-sessions 1``, two workers: its 503 was counted as a
policy error); a killed client (its session held a slot, the rerun's episodes became policy
errors); resets that never act (they held every slot for 300 s). No test here asserts on elapsed
time: leases are short and configured, and the tests poll the server's state."""

from __future__ import annotations

import http.client
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from kosmos_env import cli
from kosmos_env.campaign.failures import is_infrastructure_failure, policy_identity_change
from kosmos_env.policies import make_policy
from kosmos_env.policies import protocol as P
from kosmos_env.policies.remote import RemotePolicy, policy_info
from tests.support.campaign import ledger_rows, tabletop_eval_argv
from tests.support.faults import attempt_counts
from tests.support.paths import ROOT

TASK = "carrot_on_plate"
INSTR = "put the carrot on the plate"
ORIGINAL = "scripted:skill=1.0"  # the policy a campaign starts with: deterministic, always succeeds


def _policy(arg: str):
    name, _, rest = arg.partition(":")
    kwargs = {k: float(v) for k, v in (kv.split("=") for kv in rest.split(",") if kv)}
    return make_policy(name, **kwargs)


def _serve(arg: str, port: int = 0, factory: bool = False, **kwargs) -> P.PolicyServer:
    policy = _policy(arg)
    return P.PolicyServer(
        policy, policy_info(policy), port=port, factory=(lambda: _policy(arg)) if factory else None, **kwargs
    )  # started by `with`, or by .start()


def _obs():
    return {"image": np.zeros((8, 8, 3), np.uint8), "instruction": INSTR}


def _wait_for(predicate, what: str, deadline_s: float = 60.0) -> None:
    """Poll ``predicate`` until true; the deadline only keeps a broken build from hanging the suite."""
    deadline = time.monotonic() + deadline_s
    while not predicate():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


def _argv(out, url, *extra, seeds=4):
    return tabletop_eval_argv(out, [f"remote:url={url}"], *extra, tasks=(TASK,), seeds=seeds)


def _actions_by_seed(out) -> dict[int, str]:
    """seed -> the content address of the episode's actions, for the done episodes of a campaign."""
    con = sqlite3.connect(Path(out) / "ledger.sqlite")
    try:
        rows = con.execute("SELECT seed, actions FROM episodes WHERE status = 'done'").fetchall()
    finally:
        con.close()
    return {int(seed): actions for seed, actions in rows}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The original policy's episodes, in process: seed -> actions address (content-addressed)."""
    out = tmp_path_factory.mktemp("identity-reference")
    assert cli.main(tabletop_eval_argv(out, [ORIGINAL], tasks=(TASK,), seeds=4)) == 0
    return _actions_by_seed(out)


# -- identity ------------------------------------------------------------------------------------
def test_every_reply_states_the_served_policys_hash():
    """Every endpoint and status, the stdlib's own error pages included, carries the header."""
    with _serve("random") as server:
        expected = policy_info(_policy("random"))["content_hash"]
        host, port = server.httpd.server_address[:2]

        def ask(method, path, body=None, ctype="application/json"):
            conn = http.client.HTTPConnection(host, port, timeout=10)
            try:
                conn.request(method, path, body=body, headers={"Content-Type": ctype} if body is not None else {})
                resp = conn.getresponse()
                resp.read()
                return resp.status, resp.getheader(P.IDENTITY_HEADER)
            finally:
                conn.close()

        reset = json.dumps({"version": 1, "instruction": INSTR, "seed": 0, "session": "s1"}).encode()
        act = P.encode_observation({**_obs(), "session": "s1"})
        replies = [
            ask("GET", "/v1/info"),
            ask("GET", "/v1/nope"),
            ask("POST", "/v1/reset", reset),
            ask("POST", "/v1/act", act, P.CONTENT_TYPE),
            ask("POST", "/v1/renew", json.dumps({"version": 1, "session": "s1"}).encode()),
            ask("POST", "/v1/reset", json.dumps({"version": 1, "instruction": INSTR, "session": "s2"}).encode()),
            ask("POST", "/v1/end", json.dumps({"version": 1, "session": "s1"}).encode()),
            ask("POST", "/v1/renew", json.dumps({"version": 1, "session": "s1"}).encode()),
            ask("POST", "/v1/reset", b"{", "application/json"),
            ask("PUT", "/v1/reset", b"{}"),  # answered by http.server's send_error
        ]
    statuses = [status for status, _ in replies]
    assert statuses == [200, 404, 200, 200, 200, 503, 200, 409, 400, 501], statuses
    assert [stated for _, stated in replies] == [expected] * len(replies)


def test_a_pinned_client_refuses_another_policys_replies_and_keeps_refusing():
    original = policy_info(_policy(ORIGINAL))["content_hash"]
    requests = []
    with _serve("random", log=requests.append) as other:
        client = P.PolicyClient(other.url, timeout=5, policy_hash=original)
        with pytest.raises(P.PolicyIdentityChanged, match=f"changed mid-run.*started with {original[:12]}") as first:
            client.reset(INSTR, 0, session="s")
        assert first.value.transport and is_infrastructure_failure(first.value)
        assert policy_identity_change(RuntimeError("wrapped")) is None
        try:
            raise ValueError("adapter failed") from first.value
        except ValueError as wrapped:
            assert policy_identity_change(wrapped) is first.value
        asked = len(requests)
        with pytest.raises(P.PolicyIdentityChanged):
            client.act(_obs(), session="s")  # sticky: nothing more is asked of the other policy
        with pytest.raises(P.PolicyIdentityChanged):
            client.info()
        assert len(requests) == asked == 1


def test_a_server_that_does_not_state_its_hash_on_every_reply_is_refused():
    with _serve(ORIGINAL) as server:
        server.identity = None  # an older server: /v1/info names a hash, its replies do not
        with pytest.raises(P.RemotePolicyError, match="does not state its policy's content hash on every reply"):
            RemotePolicy(server.url)
    policy = _policy(ORIGINAL)
    with P.PolicyServer(policy, {"name": "anonymous"}) as server:
        with pytest.raises(P.RemotePolicyError, match="does not state a content_hash"):
            RemotePolicy(server.url)


def _run_switching(out, monkeypatch, *extra, after_resets: int = 2):
    """Run a campaign on a server that is restarted serving `random` at the third action after the
    ``after_resets``-th reset (mid-episode); returns (exit code, port)."""
    server = _serve(ORIGINAL, factory=True).start()
    port = server.httpd.server_address[1]
    state = {"server": server, "resets": 0, "acts": 0, "switched": False}
    reset, act = P.PolicyClient.reset, P.PolicyClient.act

    def counting_reset(self, *args, **kwargs):
        state["resets"] += 1
        state["acts"] = 0
        return reset(self, *args, **kwargs)

    def switching_act(self, *args, **kwargs):
        state["acts"] += 1
        if state["resets"] >= after_resets and state["acts"] >= 3 and not state["switched"]:
            state["server"].close()  # the server process goes away mid-episode ...
            state["server"] = _serve("random", port=port).start()  # ... and comes back serving another policy
            state["switched"] = True
        return act(self, *args, **kwargs)

    monkeypatch.setattr(P.PolicyClient, "reset", counting_reset)
    monkeypatch.setattr(P.PolicyClient, "act", switching_act)
    try:
        code = cli.main(_argv(out, server.url, *extra))
    finally:
        monkeypatch.undo()
        state["server"].close()
    assert state["switched"], "the switch never happened"
    return code, port


def _check_stopped_and_untainted(out, code, err, reference) -> dict[int, str]:
    """The campaign stopped in one line, and every episode it recorded is the original policy's."""
    assert code != 0
    lines = [line for line in err.splitlines() if "changed mid-run" in line]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert "rerun the same command" in lines[0]
    done = _actions_by_seed(out)
    assert len(done) < len(reference) and all(reference[seed] == actions for seed, actions in done.items()), done
    attempts = attempt_counts(out)
    assert "error" not in attempts  # not the policy's failure
    assert sum(attempts.get("infra-error", {}).values()) >= 1
    with sqlite3.connect(out / "ledger.sqlite") as con:
        registered = dict(con.execute("SELECT label, content_hash FROM policies").fetchall())
        pending = con.execute("SELECT COUNT(*) FROM episodes WHERE status = 'pending'").fetchone()[0]
    assert list(registered.values()) == [policy_info(_policy(ORIGINAL))["content_hash"]]
    assert pending == len(reference) - len(done)  # the rest wait for a rerun: none leased, none in error
    return done


def test_server_switched_mid_campaign_contributes_no_episode_and_stops_it_in_one_line(
    tmp_path, reference, monkeypatch, capsys
):
    """The attack: the server is restarted serving `random` during the second episode. Before, the
    campaign went on and recorded the other policy's episodes under the original's hash (rc 0)."""
    out = tmp_path / "switched"
    code, port = _run_switching(out, monkeypatch)
    done = _check_stopped_and_untainted(out, code, capsys.readouterr().err, reference)
    assert len(done) == 1  # the first episode, all of whose actions the original policy answered
    # the other policy cannot resume this campaign; the original one, served again, finishes it
    with _serve("random", port=port) as other:
        assert cli.main(_argv(out, other.url)) == 2
    assert "now has content hash" in capsys.readouterr().err
    with _serve(ORIGINAL, port=port) as again:
        assert cli.main(_argv(out, again.url)) == 0
    assert _actions_by_seed(out) == reference


def test_server_switched_mid_lockstep_campaign_stops_it_untainted(tmp_path, reference, monkeypatch, capsys):
    """The same switch under `--lockstep 2`: each lane's client sees it; the lanes' episodes go back."""
    out = tmp_path / "switched-lockstep"
    code, _ = _run_switching(out, monkeypatch, "--lockstep", "2", after_resets=3)
    _check_stopped_and_untainted(out, code, capsys.readouterr().err, reference)


def test_ray_actor_answers_a_switched_server_with_a_fatal_error(tmp_path):
    """The Ray rollout actor's body, run here without Ray: after the switch it stops the campaign
    (a Fatal answer: the driver hands the episode back unrecorded) instead of filing an episode."""
    from kosmos_env.campaign.design import make_config
    from kosmos_env.campaign.ray_executor import EpisodeActor
    from kosmos_env.campaign.ray_messages import Fatal, RolloutReply

    server = _serve(ORIGINAL).start()
    port = server.httpd.server_address[1]
    config = make_config(
        "Kosmos-Tabletop-v1",
        [f"remote:url={server.url}"],
        tasks=[TASK],
        seeds=2,
        image_size=(64, 64),
        video=False,
        spec_overrides={"horizon": 4},
    )
    actor = EpisodeActor(config.to_dict(), "host:1:test")
    try:
        first, second = list(config.episodes())
        assert isinstance(actor.run(first), RolloutReply)
        server.close()
        server = _serve("random", port=port).start()
        answer = actor.run(second)
        assert isinstance(answer, Fatal) and "PolicyChangedMidRun" in answer.error, answer
        assert "changed mid-run" in answer.error and "\n" not in answer.error
    finally:
        actor.close()
        server.close()


# -- back-pressure and leases ----------------------------------------------------------------------
def test_a_full_server_with_two_workers_is_waited_for_never_a_policy_error(tmp_path, reference):
    """The attack: `--max-sessions 1` and `--workers 2` closed 9-11 of 12 episodes as policy errors.
    Here the one slot is also held when the campaign starts, by a client that keeps its session alive
    until the campaign has been refused once and then dies (a killed eval's): the campaign waits for
    its lease to end, then the two workers share the slot; all episodes complete, none in error."""
    with _serve(ORIGINAL, session_lease=2.0) as server:  # no factory: one policy instance, one slot
        squatter = P.PolicyClient(server.url)
        squatter.reset(INSTR, 0, session="abandoned")  # never acts, never ends

        def renew_until_refused():
            deadline = time.monotonic() + 120
            while server.refused == 0 and time.monotonic() < deadline:
                squatter.renew("abandoned")
                time.sleep(0.1)
            squatter.close()  # ... and dies: no renewal from here on

        thread = threading.Thread(target=renew_until_refused, daemon=True)
        thread.start()
        out = tmp_path / "full"
        try:
            assert cli.main(_argv(out, server.url, "--workers", "2")) == 0
        finally:
            thread.join(timeout=130)
        assert server.refused >= 1 and server.expired >= 1  # the campaign waited, the squatter expired
    assert "error" not in attempt_counts(out)  # no attempt of any episode was the policy's failure
    assert _actions_by_seed(out) == reference
    assert {row[1] for row in ledger_rows(out).values()} == {"success"}


def test_a_freed_slot_goes_to_the_longest_waiting_session():
    """A client ending and starting episodes back to back must not starve a waiting one."""
    with _serve("random") as server:  # one slot
        holder, waiter = P.PolicyClient(server.url), P.PolicyClient(server.url)
        holder.reset(INSTR, 0, session="a1")
        with pytest.raises(P.RemotePolicyError, match="503 too_many_sessions.*0 other"):
            waiter.reset(INSTR, 0, session="b1")
        # the holder's next episode ends a1 but queues behind b1
        with pytest.raises(P.RemotePolicyError, match="503 too_many_sessions.*1 other"):
            holder.reset(INSTR, 1, session="a2", previous="a1")
        waiter.reset(INSTR, 0, session="b1")  # the freed slot is the waiter's
        waiter.act(_obs(), session="b1")
        waiter.end("b1")
        holder.reset(INSTR, 1, session="a2")
        holder.close(), waiter.close()


def test_a_waiting_reset_says_so_and_gives_up_as_infrastructure_after_busy_wait():
    with _serve("random", factory=True, max_sessions=1, session_lease=600) as server:
        P.PolicyClient(server.url).reset(INSTR, 0, session="abandoned")
        said = []
        client = P.PolicyClient(server.url, busy_wait=120, say_after=0.0, log=said.append)
        waiting = threading.Thread(target=client.reset, args=(INSTR, 0, "patient"), daemon=True)
        waiting.start()
        _wait_for(lambda: server.refused >= 1, "the patient reset being refused")
        server.session_lease = 0.3  # the operator shortens the lease: the abandoned session goes ...
        waiting.join(timeout=120)
        assert not waiting.is_alive()  # ... and the waiting reset is admitted
        assert server.expired == 1 and said and "is full" in said[0] and server.url in said[0]
        client.close()
    # a slot that stays held (a long lease): the wait is bounded, and its end is the machinery's failure
    with _serve("random", session_lease=600) as server:
        P.PolicyClient(server.url).reset(INSTR, 0, session="holder")
        impatient = P.PolicyClient(server.url, busy_wait=0.3, log=lambda line: None)
        with pytest.raises(P.RemotePolicyError, match=r"too_many_sessions.*waited .* of at most 0.3 s") as gave_up:
            impatient.reset(INSTR, 0, session="impatient")
        assert gave_up.value.transport and is_infrastructure_failure(gave_up.value)
        assert server.refused >= 2  # it asked again before giving up
        impatient.close()


_CLIENT = """
import sys, time
import numpy as np
from kosmos_env.policies.remote import RemotePolicy
policy = RemotePolicy(sys.argv[1])
policy.reset("put the carrot on the plate", seed=0)
policy.act({"image": np.zeros((8, 8, 3), np.uint8), "instruction": "put the carrot on the plate"})
print("ready", flush=True)
time.sleep(600)
"""


def test_a_killed_clients_session_frees_its_slot_and_a_live_idle_one_keeps_its_own():
    """The attack: a killed eval's sessions held their slots (300 s), so the rerun's resets failed.
    Now a session lives one lease after its client's last request or renewal: the killed client's
    goes, while a live client that sent no request for longer than a lease keeps its own."""
    with _serve("random", factory=True, max_sessions=2, session_lease=2.0) as server:
        live = RemotePolicy(server.url, renew_every=0.2, busy_wait=0)
        live.reset(INSTR, seed=3)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        child = subprocess.Popen(
            [sys.executable, "-c", _CLIENT, server.url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert child.stdout.readline().strip() == "ready", child.stderr.read()
            assert server.sessions == 2  # both slots held: a third client would wait
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        _wait_for(lambda: server.sessions == 1, "the killed client's session expiring")
        assert server.expired == 1  # expired by its lease, not ended by anyone
        # the live client's session outlived a full lease without a request: its renewals kept it
        reference = make_policy("random")
        reference.reset(INSTR, seed=3)
        np.testing.assert_array_equal(live.act(_obs()), reference.act(_obs()))
        third = RemotePolicy(server.url, busy_wait=0)
        third.reset(INSTR, seed=0)  # the freed slot
        third.close(), live.close()
        assert server.sessions == 0


def test_resets_that_never_act_expire_and_the_default_lease_is_short():
    """The attack: ten resets never ended held every slot for 300 s (the old idle expiry)."""
    with _serve("random", factory=True, max_sessions=10, session_lease=600) as server:
        squatter = P.PolicyClient(server.url)
        for i in range(10):
            squatter.reset(INSTR, i, session=f"squat-{i}")
        with pytest.raises(P.RemotePolicyError, match="too_many_sessions") as full:
            RemotePolicy(server.url, busy_wait=0).reset(INSTR, seed=0)
        assert full.value.transport
        server.session_lease = 1.0  # a short lease (600 s above only kept the check from racing it)
        _wait_for(lambda: server.sessions == 0, "the never-acting sessions expiring")
        assert server.expired == 10
        client = RemotePolicy(server.url, busy_wait=0)
        client.reset(INSTR, seed=0)
        assert client.act(_obs()).shape == (7,)
        client.close(), squatter.close()
    # the defaults a user gets: a dead client's slots come back within a minute, not five
    from kosmos_env.cli import build_parser

    assert P.SESSION_LEASE <= 60 and build_parser().parse_args(["serve-policy", "random"]).session_lease <= 60
    with P.PolicyServer(make_policy("random")) as server:
        assert server.session_lease <= 60
