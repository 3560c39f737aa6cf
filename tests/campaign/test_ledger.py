"""Campaign building blocks: frozen design, ledger leases, write-once artifacts, cost accounting."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
import time
import zipfile

import numpy as np
import pytest

from kosmos_env.campaign.artifacts import ArtifactStore, npz_bytes
from kosmos_env.campaign.cost import PriceTable, busy_wall_seconds, cost_summary
from kosmos_env.campaign.design import env_seed, make_config, policy_label
from kosmos_env.campaign.ledger import ConfigMismatchError, Ledger, make_owner, owner_alive
from kosmos_env.hashing import sha256_file


def _config(**kw):
    args = dict(
        policies=["scripted:skill=1.0", "random"],
        tasks=["carrot_on_plate", "spoon_on_towel"],
        seeds=3,
        image_size=(64, 64),
        video=False,
    )
    args.update(kw)
    return make_config("Kosmos-Tabletop-v1", **args)


# -- design ---------------------------------------------------------------------------------
def test_design_is_paired_and_keyed_idempotently():
    cfg = _config(repeats=2)
    keys = cfg.episodes()
    assert len(keys) == cfg.n_episodes == 2 * 2 * 3 * 2
    assert len({k.episode_id for k in keys}) == len(keys)
    # every policy sees exactly the same (task, seed, repeat) cells with the same env seed
    cells = {}
    for k in keys:
        cells.setdefault(k.policy, set()).add((k.task, k.seed, k.repeat, k.env_seed))
    assert cells["scripted:skill=1.0"] == cells["random"]
    assert keys[0].episode_id == "scripted:skill=1.0|carrot_on_plate|0|0"
    assert env_seed(4, 0) == 4 and env_seed(4, 1) != 4 and env_seed(4, 1) == env_seed(4, 1)


def test_config_hash_tracks_what_changes_results_only():
    a = _config()
    assert a.config_hash == _config().config_hash
    assert a.config_hash != _config(seeds=4).config_hash
    assert a.config_hash != _config(image_size=(32, 32)).config_hash  # spec hash changes
    assert a.spec_hash != _config(image_size=(32, 32)).spec_hash
    assert a.config_hash != _config(policies=["scripted:skill=0.9", "random"]).config_hash
    assert a.config_hash != _config(judge="robot_log").config_hash
    # a round trip through the ledger's JSON keeps the hash
    from kosmos_env.campaign.design import CampaignConfig

    assert CampaignConfig.from_dict(json.loads(json.dumps(a.to_dict()))).config_hash == a.config_hash


def test_config_rejects_bad_input():
    with pytest.raises(ValueError, match="given twice"):
        _config(policies=["random", "random"])
    with pytest.raises(ValueError, match="unknown task"):
        _config(tasks=["fly_to_moon"])
    with pytest.raises(ValueError, match="seeds"):
        _config(seeds=0)
    with pytest.raises(ValueError, match="unknown judge"):
        _config(judge="oracle_of_delphi")
    assert policy_label("scripted", {"skill": 0.6, "a": "x"}) == "scripted:a=x,skill=0.6"


# -- ledger -----------------------------------------------------------------------------------
@pytest.fixture
def ledger(tmp_path):
    led = Ledger(tmp_path / "ledger.sqlite")
    assert led.initialise(_config()) is True
    yield led
    led.close()


def test_ledger_refuses_a_different_config(ledger):
    assert ledger.initialise(_config()) is False  # same config: resume
    with pytest.raises(ConfigMismatchError, match=r"seeds: \[0, 1, 2\] \(existing\) vs \[0, 1, 2, 3\]"):
        ledger.initialise(_config(seeds=4))
    assert ledger.counts()["planned"] == 12


def test_claims_never_hand_out_an_episode_twice(ledger):
    got = []
    while (key := ledger.claim("h:1:a", 60, 3)) is not None:
        got.append(key.episode_id)
    assert len(got) == len(set(got)) == 12
    assert [k.episode_id for k in _config().episodes()] == got  # claim order is the design order
    assert ledger.counts()["leased"] == 12


def test_lease_renew_expiry_and_takeover(ledger, monkeypatch):
    me, other = make_owner("me"), "otherhost:123:x"
    key = ledger.claim(other, 60, 3)
    assert ledger.renew(key.episode_id, other, 60)
    assert not ledger.renew(key.episode_id, me, 60)  # not my lease
    # a live lease on another host is not taken over; an expired one is
    nxt = ledger.claim(me, 60, 3)
    assert nxt.episode_id != key.episode_id
    ledger.conn.execute("UPDATE episodes SET lease_expires = ? WHERE episode_id = ?", (time.time() - 1, key.episode_id))
    taken = ledger.claim(me, 60, 3)
    assert taken.episode_id == key.episode_id
    assert not ledger.renew(key.episode_id, other, 60)  # the old owner learns it lost the lease
    row = {r["episode_id"]: r for r in ledger.episodes()}[key.episode_id]
    assert row["owner"] == me and row["attempts"] == 2
    assert [a["status"] for a in ledger.attempts(key.episode_id)] == ["abandoned"]


def test_dead_owner_lease_is_taken_over_at_once(ledger):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    import socket

    dead = f"{socket.gethostname()}:{proc.pid}:w"
    assert not owner_alive(dead) and owner_alive(make_owner())
    key = ledger.claim(dead, 3600, 3)
    assert ledger.claim(make_owner(), 3600, 3).episode_id == key.episode_id  # stale before pending


def test_failures_retry_then_record_error(ledger):
    me = make_owner()
    key = ledger.claim(me, 60, 2)
    assert ledger.fail(key.episode_id, me, "Traceback: boom 1", 2) == "pending"
    again = ledger.claim(me, 60, 2)
    assert again.episode_id == key.episode_id
    assert ledger.fail(key.episode_id, me, "Traceback: boom 2", 2) == "done"
    row = {r["episode_id"]: r for r in ledger.episodes()}[key.episode_id]
    assert row["outcome"] == "error" and "boom 2" in row["error"] and row["attempts"] == 2
    assert ledger.fail(key.episode_id, me, "late", 2) == "lost"


def test_first_completion_wins(ledger):
    a, b = "h:1:a", "h:2:b"
    key = ledger.claim(a, 60, 3)
    ledger.conn.execute("UPDATE episodes SET lease_expires = 0 WHERE episode_id = ?", (key.episode_id,))
    assert ledger.claim(b, 60, 3).episode_id == key.episode_id
    record = {"outcome": "success", "success": True, "score": 1.0, "timings": {"world": 0.1}, "actions": "x.npy"}
    assert ledger.complete(key.episode_id, b, record) is True
    assert ledger.complete(key.episode_id, a, dict(record, outcome="failure", success=False)) is False
    row = {r["episode_id"]: r for r in ledger.episodes()}[key.episode_id]
    assert row["outcome"] == "success" and row["worker"] == b and row["success"] is True


def test_concurrent_claimers_share_without_duplicates(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as led:
        led.initialise(_config(seeds=10))
    taken: list[str] = []
    lock = threading.Lock()

    def worker(i):
        with Ledger(path, create=False) as led:
            owner = f"h:{i}:t"
            while (key := led.claim(owner, 60, 3)) is not None:
                led.complete(key.episode_id, owner, {"outcome": "failure", "success": False})
                with lock:
                    taken.append(key.episode_id)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(taken) == len(set(taken)) == 40
    with Ledger(path, create=False) as led:
        assert led.counts()["done"] == 40


# -- artifacts --------------------------------------------------------------------------------
def test_artifacts_are_content_addressed_and_written_once(tmp_path):
    store = ArtifactStore(tmp_path)
    sha, rel, size = store.put_bytes(b"hello", "bin")
    assert rel == f"artifacts/sha256/{sha[:2]}/{sha}.bin" and size == 5
    path = store.path(rel)
    mtime = path.stat().st_mtime_ns
    assert store.put_bytes(b"hello", "bin") == (sha, rel, 5)
    assert path.stat().st_mtime_ns == mtime  # not rewritten
    assert sha256_file(path) == sha
    assert store.files() == [rel]
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp-")]


def test_npz_bytes_are_deterministic_and_loadable():
    log = {"ee_pos": np.arange(6.0).reshape(2, 3), "gt_success": np.array([False, True])}
    a = npz_bytes(log)
    time.sleep(1.1)  # a zip entry timestamp would change the bytes
    assert npz_bytes(log) == a
    with np.load(io.BytesIO(a), allow_pickle=False) as z:
        assert z["gt_success"].tolist() == [False, True]
    assert zipfile.ZipFile(io.BytesIO(a)).infolist()[0].date_time == (1980, 1, 1, 0, 0, 0)


# -- cost ---------------------------------------------------------------------------------------
def test_price_table_parses_and_prices_stages(tmp_path):
    table = PriceTable.parse('{"accelerator_per_hour": {"cpu": 0.36, "h100": 3.6}, "world": "h100", "judge": "h100"}')
    assert table.price_per_second("world") == pytest.approx(0.001)
    assert table.device("policy") == "cpu" and table.device("overhead") == "h100"
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(table.to_dict()))
    assert PriceTable.parse(str(path)) == table
    with pytest.raises(ValueError, match="does not price"):
        PriceTable.from_dict({"accelerator_per_hour": {"cpu": 0}, "world": "h100"})
    with pytest.raises(ValueError, match="unknown price table field"):
        PriceTable.from_dict({"accelerator_per_hour": {"cpu": 0}, "wrld": "cpu"})
    with pytest.raises(FileNotFoundError):
        PriceTable.parse("no/such/file.json")


def test_cost_summary_splits_judge_money():
    rows = [
        {
            "timings": {"policy": 1.0, "world": 10.0, "gate": 0.0, "judge": 5.0, "io": 0.0, "total": 17.0},
            "finished": 100.0 + i,
        }
        for i in range(4)
    ]
    table = PriceTable.from_dict(
        {"accelerator_per_hour": {"cpu": 0.0, "h100": 3600.0}, "world": "h100", "judge": "h100", "policy": "cpu"}
    )
    cost = cost_summary(rows, [{"started": 90.0, "finished": 110.0}, {"started": 95.0, "finished": 105.0}], table)
    assert cost["seconds_per_stage"]["world"] == 40.0 and cost["seconds_per_stage"]["overhead"] == 4.0
    assert cost["wall_seconds"] == 20.0  # overlapping runs are counted once
    assert cost["rollouts_per_hour"] == pytest.approx(4 / 20 * 3600)
    money = cost["money"]
    assert money["campaign"] == pytest.approx(40 + 20 + 4)  # world + judge + overhead (on the world's device)
    assert money["judge"]["campaign"] == pytest.approx(20) and money["judge"]["share"] == pytest.approx(20 / 64)
    assert money["per_rollout"] == pytest.approx(16)
    assert busy_wall_seconds([{"started": 0.0, "finished": None}], [3.0, 7.0]) == 7.0


def test_heartbeat_keeps_a_long_episode_leased(tmp_path):
    from kosmos_env.campaign.worker import Heartbeat

    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as led:
        led.initialise(_config())
        me, other = "otherhost:1:me", "otherhost:2:other"
        key = led.claim(me, 0.3, 3)
        with Heartbeat(str(path), key.episode_id, me, 0.3) as hb:
            time.sleep(0.8)  # longer than the lease: only renewals keep it
            assert led.claim(other, 0.3, 3).episode_id != key.episode_id
        assert not hb.lost
        time.sleep(0.4)  # no more renewals: the lease expires and is taken over
        assert led.claim(other, 0.3, 3).episode_id == key.episode_id


def _open_new_ledger(path: str, barrier) -> str:
    from kosmos_env.campaign.ledger import Ledger

    barrier.wait()  # every process opens the brand-new ledger at the same moment
    with Ledger(path) as ledger:
        return ledger.conn.execute("PRAGMA journal_mode").fetchone()[0]


def test_processes_creating_one_ledger_at_once_all_succeed(tmp_path):
    """Switching a new ledger to WAL takes an exclusive lock SQLite does not wait for; set-up is
    serialised, so processes starting on the same new folder never see 'database is locked'."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    n = 4
    with ctx.Manager() as manager:
        barrier = manager.Barrier(n)
        with ctx.Pool(n) as pool:
            for attempt in range(8):  # the race is timing-dependent: run it on several new folders
                path = tmp_path / f"c{attempt}" / "ledger.sqlite"
                path.parent.mkdir()
                modes = pool.starmap(_open_new_ledger, [(str(path), barrier)] * n)
                assert modes == ["wal"] * n
