"""`kosmos-env verify` samples what a forger cannot choose (issue 43, item 3): plain `verify` replays a
sample drawn with a salt of its own (printed, repeatable with --replay-salt) and says how likely k
forged episodes are to escape it; on a generated world `--rerun N` re-runs the policies in the recorded
world; results.json's cost, timing, worker and version fields are checked against the ledger and
labelled self-reported; and nothing is contacted over the network unless --allow-network."""

from __future__ import annotations

import itertools
import json
import shutil
import socket
import sqlite3
from math import comb
from pathlib import Path

import numpy as np
import pytest

from kosmos_env import cli
from kosmos_env.campaign import verify_campaign
from kosmos_env.campaign.artifacts import ArtifactStore, npz_bytes
from kosmos_env.campaign.bundle import write_bundle
from tests.support.faults import TWO_POLICIES
from tests.support.publish_bundles import edit_results, rehash

# every column of an episode that is its evidence or follows from it (the forger moves them all)
EVIDENCE = (
    "outcome",
    "success",
    "score",
    "judge",
    "judgment",
    "gate",
    "ground_truth",
    "steps",
    "timings",
    "video",
    "actions",
    "log",
    "provenance",
)


@pytest.fixture(scope="module")
def learned_campaign(tmp_path_factory):
    """``tiny_campaign``'s policies on the learned world, one seed: scripted succeeds, random fails."""
    out = tmp_path_factory.mktemp("learned") / "camp"
    argv = ["eval", "--env", "Kosmos-TabletopLearned-v1", "--tasks", "carrot_on_plate", "--seeds", "1"]
    argv += ["--seed-offset", "0", "--no-video", "--no-progress", "--out", str(out)]
    for policy in TWO_POLICIES:
        argv += ["--policy", policy]
    assert cli.main(argv) == 0
    return out


def _copy(src, tmp_path, name="c") -> Path:
    return Path(shutil.copytree(src, tmp_path / name))


def _sql(out, sql, *params):
    con = sqlite3.connect(out / "ledger.sqlite")
    try:
        rows = con.execute(sql, params).fetchall()
        con.commit()
        return rows
    finally:
        con.close()


def _swap_all_evidence(out, a="scripted:skill=1.0", b="random") -> list[str]:
    """On every seed, give ``b``'s episode ``a``'s evidence and the other way round (outcomes,
    judgments, ground truth, actions, logs, timings, provenance), then rebuild the bundle: every
    hash agrees and every outcome re-derives from the evidence stored beside it. Returns the
    episode ids of ``b`` (now listed with ``a``'s successes)."""
    cols = ", ".join(EVIDENCE)
    moved = []
    for (seed,) in _sql(out, "SELECT DISTINCT seed FROM episodes ORDER BY seed"):
        rows = {
            policy: (eid, values)
            for policy, eid, *values in _sql(
                out, f"SELECT policy, episode_id, {cols} FROM episodes WHERE seed = ?", seed
            )
        }
        (eid_a, ev_a), (eid_b, ev_b) = rows[a], rows[b]
        sets = ", ".join(f"{c} = ?" for c in EVIDENCE)
        _sql(out, f"UPDATE episodes SET {sets} WHERE episode_id = ?", *ev_b, eid_a)
        _sql(out, f"UPDATE episodes SET {sets} WHERE episode_id = ?", *ev_a, eid_b)
        moved.append(eid_b)
    write_bundle(out)
    return moved


def _forge_with_a_rehashed_log(out) -> str:
    """A random failure turned into a success everywhere: outcome, judgment, ground truth, and a
    robot log that agrees, stored under its own hash; the bundle rebuilt."""
    eid, log_rel, judgment, truth = _sql(
        out,
        "SELECT episode_id, log, judgment, ground_truth FROM episodes WHERE policy = 'random' ORDER BY ord LIMIT 1",
    )[0]
    judgment, truth = json.loads(judgment), json.loads(truth)
    judgment.update(success=True, score=1.0, rationale="carrot rests on the plate and is released")
    truth.update(success=True, reason="carrot rests on the plate and is released")
    with np.load(out / log_rel) as z:
        log = {k: z[k] for k in z.files}
    log["gt_success"] = np.ones_like(log["gt_success"])
    sha, rel, size = ArtifactStore(out).put_bytes(npz_bytes(log), "npz")
    _sql(
        out,
        "UPDATE episodes SET outcome = 'success', success = 1, score = 1.0, judgment = ?, ground_truth = ?, log = ? "
        "WHERE episode_id = ?",
        json.dumps(judgment),
        json.dumps(truth),
        rel,
        eid,
    )
    _sql(out, "INSERT INTO artifacts (sha256, relpath, size, kind, created) VALUES (?, ?, ?, 'log', 0)", sha, rel, size)
    write_bundle(out)
    return eid


# -- attacks that passed plain `verify` ---------------------------------------------------------------


def test_plain_verify_catches_a_forgery_with_rehashed_robot_logs(tmp_path, tiny_campaign, capsys):
    out = _copy(tiny_campaign, tmp_path)
    eid = _forge_with_a_rehashed_log(out)
    assert verify_campaign(out, replay=0).ok  # the judge re-run agrees with the forged log: only a replay tells
    capsys.readouterr()
    # plain verify: its default sample covers every episode of a campaign this small
    assert cli.main(["verify", str(out)]) == 1
    printed = capsys.readouterr().out
    assert f"PROBLEM: {eid}: replay: its stored robot log is not what replaying" in printed, printed
    assert "replay sample: 4 of 4 episodes, salt " in printed


def test_plain_verify_catches_all_evidence_swapped_between_two_policies(tmp_path, tiny_campaign, capsys):
    out = _copy(tiny_campaign, tmp_path)
    moved = _swap_all_evidence(out)
    assert verify_campaign(out, replay=0).ok  # hashes, judgments, logs: all consistent
    assert verify_campaign(out, replay="all", rerun_policies=False).ok  # the actions replay on their seeds
    capsys.readouterr()
    assert cli.main(["verify", str(out)]) == 1
    printed = capsys.readouterr().out
    for eid in moved:
        assert f"PROBLEM: {eid}: replay: its stored actions are not what policy 'random' takes" in printed, printed


def test_rerun_on_the_learned_world_catches_evidence_swapped_between_policies(tmp_path, learned_campaign, capsys):
    out = _copy(learned_campaign, tmp_path)
    capsys.readouterr()
    assert cli.main(["verify", str(out), "--rerun", "all"]) == 0  # the genuine campaign re-runs as stored
    printed = capsys.readouterr().out
    assert "2 took the stored actions bit for bit, 2 ended with the stored outcome" in printed, printed

    moved = _swap_all_evidence(out)
    # plain verify cannot tell, and says what it took on trust and how to check it
    assert cli.main(["verify", str(out)]) == 0
    err = capsys.readouterr().err
    assert "is generated, not simulated" in err and "evidence moved between policies passes" in err, err
    assert "--rerun N" in err
    assert cli.main(["verify", str(out), "--rerun", "all"]) == 1
    printed = capsys.readouterr().out
    for eid in moved:
        assert f"PROBLEM: {eid}: re-run: its stored first action is not what policy 'random' takes" in printed, printed
    assert "expected: the same seed gives the same generation" in printed


def test_results_cost_timing_worker_and_version_fields_are_checked_and_labelled_self_reported(
    tmp_path, tiny_campaign, capsys
):
    def price(results):
        results["campaign"]["price_table"] = {"currency": "USD", "per_hour": {"cpu": 0.01}}

    def cost(results):
        results["aggregated"]["cost"]["rollouts_per_hour"] *= 10

    def timings(results):
        results["per_episode"][0]["timings"]["policy"] = 0.0001

    def worker(results):
        results["per_episode"][0]["worker"] = "h100-node:1:feed"
        results["campaign"]["worker_threads"][0]["worker"] = "h100-node:1:feed"

    for i, change in enumerate((price, cost, timings, worker)):
        out = _copy(tiny_campaign, tmp_path, f"c{i}")
        edit_results(out, change)  # the manifest re-hashed: only the content can tell
        problems = verify_campaign(out).problems
        assert any("self-reported fields differ from the ledger" in p for p in problems), (change.__name__, problems)
    # the same fields in episodes.parquet: the worker and the timing columns
    import pyarrow as pa
    import pyarrow.parquet as pq

    for column, value in (("worker", "h100-node:1:feed"), ("t_policy", 0.0001)):
        out = _copy(tiny_campaign, tmp_path, f"parquet-{column}")
        table = pq.read_table(out / "episodes.parquet")
        values = table.column(column).to_pylist()
        values[0] = value
        table = table.set_column(
            table.schema.get_field_index(column), column, pa.array(values, table.schema.field(column).type)
        )
        pq.write_table(table, out / "episodes.parquet")
        rehash(out, "episodes.parquet")
        assert "episodes.parquet disagrees with the ledger" in verify_campaign(out).problems, column
    capsys.readouterr()
    assert cli.main(["verify", str(tiny_campaign), "--replay", "0"]) == 0
    printed = capsys.readouterr().out
    line = next(ln for ln in printed.splitlines() if ln.startswith("self-reported"))
    for name in ("package_version", "price_table", "cost", "timings", "worker", "worker_threads"):
        assert name in line, line


# -- the sample ------------------------------------------------------------------------------------------


def test_escape_probability_is_the_hypergeometric_chance_of_an_empty_draw():
    from kosmos_env.campaign.rederive import escape_probability

    assert escape_probability(10, 3, 1) == pytest.approx(comb(9, 3) / comb(10, 3)) == pytest.approx(0.7)
    assert escape_probability(10, 3, 2) == pytest.approx(56 / 120)
    assert escape_probability(10, 10, 1) == 0.0 and escape_probability(10, 0, 4) == 1.0
    assert escape_probability(10, 3, 0) == 1.0 and escape_probability(10, 8, 3) == 0.0
    # against counting every possible sample
    for total, size, forged in ((7, 3, 2), (9, 4, 3), (6, 2, 1)):
        draws = list(itertools.combinations(range(total), size))
        clean = sum(1 for d in draws if not set(d) & set(range(forged)))
        assert escape_probability(total, size, forged) == pytest.approx(clean / len(draws))
    assert escape_probability(1000, 50, 100) == pytest.approx(comb(900, 50) / comb(1000, 50))


def test_the_fewest_false_outcomes_that_reorder_the_ranking():
    from kosmos_env.campaign.rederive import flips_to_reorder

    def s(successes, failures):
        return {"successes": successes, "failures": failures}

    # 8/10 over 5/10: three outcomes (any mix of A's successes and B's failures) tie them
    assert flips_to_reorder({"A": s(8, 2), "B": s(5, 5)}, ["A", "B"]) == (3, "A", "B")
    # 2/2 over 0/2: one false success and one false failure make it 1/2 against 1/2
    assert flips_to_reorder({"A": s(2, 0), "B": s(0, 2)}, ["A", "B"]) == (2, "A", "B")
    # unequal sizes: 9/10 over 1/2: one false failure of the smaller one (2/2 against 9/10) reorders them
    assert flips_to_reorder({"A": s(9, 1), "B": s(1, 1)}, ["A", "B"]) == (1, "A", "B")
    # the closest neighbours decide; tied rates and undecided policies are passed over
    per = {"A": s(9, 1), "B": s(5, 5), "C": s(4, 6), "D": s(4, 6), "E": s(0, 0)}
    assert flips_to_reorder(per, ["A", "B", "C", "D", "E"]) == (1, "B", "C")
    assert flips_to_reorder({"A": s(3, 3), "B": s(3, 3)}, ["A", "B"]) is None


def test_verify_prints_the_escape_chances_of_its_sample(tmp_path, tiny_campaign, capsys):
    capsys.readouterr()
    assert cli.main(["verify", str(tiny_campaign), "--replay", "1", "--replay-salt", "s1", "--no-rerun-policies"]) == 0
    printed = capsys.readouterr().out
    assert "replay sample: 1 of 4 episodes, salt s1" in printed and "--replay 1 --replay-salt s1" in printed
    # C(3,1)/C(4,1), C(2,1)/C(4,1), C(1,1)/C(4,1); 2 false outcomes make scripted 1/2 against random 1/2
    assert "k=1 75.0%, k=2 50.0%, k=3 25.0%" in printed, printed
    assert "k=2 (the fewest false outcomes that could put 'scripted:skill=1.0' above 'random') 50.0%" in printed
    assert "policies not re-run: " in printed  # --no-rerun-policies: said, with what it leaves uncaught


def test_the_salt_repeats_a_sample_and_other_salts_draw_others(tmp_path, tiny_campaign):
    from kosmos_env.campaign.rederive import sample_rows

    first = verify_campaign(tiny_campaign, replay=2, replay_salt="pinned", rerun_policies=False)
    again = verify_campaign(tiny_campaign, replay=2, replay_salt="pinned", rerun_policies=False)
    assert first.sample["salt"] == "pinned" and first.sample["size"] == 2
    assert first.sample["episodes"] == again.sample["episodes"]
    rows = [
        {"episode_id": e["episode_id"]} for e in json.loads((tiny_campaign / "results.json").read_text())["per_episode"]
    ]
    assert first.sample["episodes"] == [r["episode_id"] for r in sample_rows(rows, 2, 0, "pinned")]
    drawn = {tuple(r["episode_id"] for r in sample_rows(rows, 2, 0, f"salt-{i}")) for i in range(12)}
    assert len(drawn) >= 3  # 6 possible pairs: different salts draw different samples
    # without a salt, verify draws its own, fresh each time
    one = verify_campaign(tiny_campaign, replay=1, rerun_policies=False)
    two = verify_campaign(tiny_campaign, replay=1, rerun_policies=False)
    assert len(one.sample["salt"]) == 16 and one.sample["salt"] != two.sample["salt"]


def test_bad_rerun_and_salt_values_are_one_line(tiny_campaign, capsys):
    for argv in (["--rerun", "some"], ["--replay-salt", " "], ["--replay-seed", "7"]):
        capsys.readouterr()
        assert cli.main(["verify", str(tiny_campaign), *argv]) == 2
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert len(err) == 1 and argv[0] in err[0], err


# -- re-runs on a world that is not reproducible -----------------------------------------------------------


def test_a_sampled_worlds_reruns_are_judged_by_the_direction_of_their_disagreements():
    from kosmos_env.campaign.rederive import RERUN_SAMPLED, RerunOutcome, judge_reruns, sign_test_p

    assert sign_test_p(0, 0) == 1.0 and sign_test_p(3, 3) == 1.0
    assert sign_test_p(8, 0) == pytest.approx(2 / 2**8) and sign_test_p(5, 1) == pytest.approx(2 * 7 / 64)

    def rerun(i, recorded, outcome, policy="p"):
        return RerunOutcome(f"{policy}|{i}", policy, recorded, outcome, diverged_at=3)

    # honest: disagreements either way, as a world that samples gives
    honest = [rerun(i, "success", "failure") for i in range(3)] + [rerun(i, "failure", "success") for i in range(3, 6)]
    problems, notes = judge_reruns(honest, RERUN_SAMPLED, first_frame_ungenerated=False)
    assert problems == [] and len(notes) == 6
    # forged: ten recorded successes the policy does not reproduce, none the other way
    forged = [rerun(i, "success", "failure") for i in range(10)] + [rerun(10, "failure", "failure")]
    problems, _ = judge_reruns(forged, RERUN_SAMPLED, first_frame_ungenerated=False)
    assert len(problems) == 1 and "policy 'p'" in problems[0] and "10 recorded successes failed" in problems[0]


# -- no network unless asked ----------------------------------------------------------------------------


@pytest.fixture
def remote_campaign(tmp_path):
    """A finished campaign of a remote policy; its server is gone once the campaign is done."""
    from kosmos_env.policies import make_policy
    from kosmos_env.policies.protocol import PolicyServer
    from kosmos_env.policies.remote import policy_info
    from tests.support.faults import eval_argv

    policy = make_policy("scripted", skill=1.0)
    server = PolicyServer(policy, policy_info(policy)).start()
    url = f"http://127.0.0.1:{server.httpd.server_address[1]}"
    out = tmp_path / "remote"
    try:
        assert cli.main(eval_argv(out, policies=(f"remote:url={url}",), seeds=1)) == 0
    finally:
        server.close()
    return out, url


def test_verify_contacts_no_remote_policy_unless_allowed(remote_campaign, monkeypatch, capsys):
    out, url = remote_campaign
    attempts = []
    real_connect = socket.socket.connect

    def connect(sock, address, *args):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            attempts.append(address)
            raise ConnectionRefusedError(f"test: no network ({address})")
        return real_connect(sock, address, *args)

    def create_connection(address, *args, **kwargs):
        attempts.append(address)
        raise ConnectionRefusedError(f"test: no network ({address})")

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    capsys.readouterr()
    assert cli.main(["verify", str(out), "--replay", "all"]) == 0
    captured = capsys.readouterr()
    assert attempts == [], attempts  # the URL its ledger names was never contacted
    assert "replay sample: 1 of 1 episodes" in captured.out  # the stored actions still replay in the world
    assert f"served at {url}" in captured.err and "--allow-network" in captured.err, captured.err
    # asked to, verify does contact it (the server is gone: the policy is not re-run, said so)
    assert cli.main(["verify", str(out), "--replay", "all", "--allow-network"]) == 0
    assert attempts, "--allow-network did not reach the remote policy"
    assert "cannot be built here" in capsys.readouterr().err
