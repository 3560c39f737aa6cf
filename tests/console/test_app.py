"""The console app through its HTTP interface (no browser): pages, read-only access, artifacts by
hash only, the token on cancel, broken folders, escaping, comparison across spec hashes, and the
W&B feed during a campaign."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the console extra is not installed (pip install 'kosmos-env[console]')")
pytest.importorskip("httpx", reason="the console extra is not installed (pip install 'kosmos-env[console]')")

from fastapi.testclient import TestClient

from kosmos_env import cli
from kosmos_env.campaign.control import cancel_requested, control_state
from kosmos_env.campaign.design import make_config
from kosmos_env.campaign.ledger import Ledger
from kosmos_env.console.app import create_app
from kosmos_env.console.campaigns import folder_key
from tests.support.campaign import planned_ledger
from tests.support.publish_bundles import campaign

TOKEN = "test-token-0123456789abcdef"
EVIL = '<script>document.body.dataset.pwned="1"</script>'


def _client(*roots, **kwargs) -> TestClient:
    app = create_app([str(r) for r in roots], TOKEN, analysis_options={"n_boot": 200, "n_splits": 50}, **kwargs)
    return TestClient(app, base_url="http://127.0.0.1")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    return campaign(tmp_path_factory, "a")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_pages_of_a_finished_campaign_read_only(finished, tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(finished, root / "a")
    ledger = root / "a" / "ledger.sqlite"
    before = _digest(ledger)
    key = folder_key(root / "a")
    reference = tmp_path / "reference.csv"
    reference.write_text("task,policy,reference\ncarrot_on_plate,scripted:skill=1.0,0.9\ncarrot_on_plate,random,0.1\n")
    c = _client(root, reference=reference)
    page = c.get("/")
    assert page.status_code == 200 and f'data-key="{key}"' in page.text
    assert "Kosmos-Tabletop-v1" in page.text and "scripted:skill=1.0" in page.text
    live = c.get(f"/c/{key}/live.json").json()
    assert live["queue"]["done"] == live["planned"] == 6 and live["queue"]["pending"] == 0
    assert [r["policy"] for r in live["ranking"]][0] == "scripted:skill=1.0"
    assert set(live["seconds_per_rollout"]) >= {"policy", "world", "gate", "judge", "io", "overhead", "total"}
    for _ in range(100):  # background verification of the finished folder
        if c.get(f"/c/{key}/live.json").json()["state"] != "running" and "finished" in c.get("/").text:
            break
        time.sleep(0.05)
    assert c.get(f"/c/{key}").status_code == 200
    eps = c.get(f"/c/{key}/episodes", params={"policy": "random"})
    assert eps.status_code == 200 and "3 matching episode(s)" in eps.text
    assert c.get(f"/c/{key}/episodes", params={"seed": "x"}).status_code == 400
    ep = c.get(f"/c/{key}/episodes/0")
    assert ep.status_code == 200 and "<video" in ep.text and "verified (bytes hash to the name)" in ep.text
    assert "Gate verdict per world call" in ep.text and 'id="provenance"' in ep.text
    an = c.get(f"/c/{key}/analysis")
    assert an.status_code == 200 and "split-half repeatability" in an.text.lower() and "<svg" in an.text
    assert "Agreement with the reference" in an.text and "reference.csv" in an.text
    assert _digest(ledger) == before, "serving pages changed the ledger"


def test_artifacts_only_by_content_hash_from_the_store(finished, tmp_path):
    root = tmp_path / "a"
    shutil.copytree(finished, root)
    (root / "secret.txt").write_text("not an artifact")
    key = folder_key(root)
    c = _client(root)
    con = sqlite3.connect(root / "ledger.sqlite")
    sha, rel = con.execute("SELECT sha256, relpath FROM artifacts WHERE kind = 'video' LIMIT 1").fetchone()
    con.close()
    ok = c.get(f"/c/{key}/artifacts/{sha}.mp4")
    assert ok.status_code == 200 and hashlib.sha256(ok.content).hexdigest() == sha
    assert ok.headers["content-type"] == "video/mp4"
    refused = [
        f"/c/{key}/artifacts/..%2F..%2Fsecret.txt",
        f"/c/{key}/artifacts/..%2Fledger.sqlite",
        f"/c/{key}/artifacts/{sha}.sqlite",
        f"/c/{key}/artifacts/{sha.upper()}.mp4",
        f"/c/{key}/artifacts/{'0' * 64}.mp4",
        f"/c/{key}/artifacts/%2Fetc%2Fpasswd",
        f"/c/{key}/artifacts/{sha}.mp4%2F..%2F..%2Fsecret.txt",
    ]
    for url in refused:
        r = c.get(url)
        assert r.status_code in (400, 404), (url, r.status_code)
        assert b"not an artifact" not in r.content and b"SQLite format" not in r.content
    assert c.get("/c/../../secret.txt").status_code == 404


def test_cancel_needs_the_token_and_is_recorded(tmp_path):
    planned_ledger(tmp_path / "c1")
    key = folder_key(tmp_path / "c1")
    c = _client(tmp_path)
    assert c.post(f"/c/{key}/cancel").status_code == 403
    assert c.post(f"/c/{key}/cancel", headers={"X-Console-Token": TOKEN[:-1] + "x"}).status_code == 403
    assert c.get(f"/c/{key}/cancel").status_code == 405  # never through GET
    with Ledger(tmp_path / "c1" / "ledger.sqlite", create=False) as ledger:
        assert not cancel_requested(ledger)
    r = c.post(f"/c/{key}/cancel", headers={"X-Console-Token": TOKEN})
    assert r.status_code == 200 and r.json()["cancelled"]
    with Ledger(tmp_path / "c1" / "ledger.sqlite", create=False) as ledger:
        assert cancel_requested(ledger) and control_state(ledger)["by"].startswith("console ")
    assert c.get(f"/c/{key}/live.json").json()["state"] == "cancelled"


def test_broken_folders_show_an_error_and_the_rest_is_served(finished, tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(finished, root / "good")
    (root / "corrupt").mkdir()
    (root / "corrupt" / "ledger.sqlite").write_bytes(b"this is not a database" * 100)
    (root / "nomata").mkdir()
    sqlite3.connect(root / "nomata" / "ledger.sqlite").execute(
        "CREATE TABLE meta (key TEXT, value TEXT)"
    ).connection.commit()
    c = _client(root, tmp_path / "missing")
    page = c.get("/")
    assert page.status_code == 200
    assert page.text.count('data-state="error"') == 3  # corrupt, no config, missing root
    assert "folder not found" in page.text
    bad = c.get(f"/c/{folder_key(root / 'corrupt')}")
    assert bad.status_code == 500 and 'id="error"' in bad.text and "not a readable campaign ledger" in bad.text
    assert c.get(f"/c/{folder_key(root / 'good')}").status_code == 200
    assert c.get("/c/ffffffffffff").status_code == 404


def test_untrusted_labels_are_escaped(tmp_path):
    planned_ledger(tmp_path / "evil", labels=(EVIL, "random"))
    c = _client(tmp_path)
    key = folder_key(tmp_path / "evil")
    for url in ("/", f"/c/{key}", f"/c/{key}/episodes", f"/c/{key}/episodes/0"):
        text = c.get(url).text
        assert EVIL not in text, url
        if url != f"/c/{key}":  # the live view writes labels from its events with textContent
            assert "&lt;script&gt;" in text, url
    assert c.get(f"/c/{key}/live.json").json()["ranking"][1]["policy"] in (EVIL, "random")


def test_compare_refuses_different_spec_hashes(finished, tmp_path):
    shutil.copytree(finished, tmp_path / "a1")
    shutil.copytree(finished, tmp_path / "a2")
    cfg = planned_ledger(tmp_path / "other")
    con = sqlite3.connect(tmp_path / "other" / "ledger.sqlite")
    data = json.loads(con.execute("SELECT value FROM meta WHERE key = 'config'").fetchone()[0])
    data["spec_hash"] = "f" * 64
    con.execute("UPDATE meta SET value = ? WHERE key = 'config'", (json.dumps(data),))
    con.commit()
    con.close()
    assert cfg.spec_hash != "f" * 64
    c = _client(tmp_path)
    same = c.get("/compare", params={"a": folder_key(tmp_path / "a1"), "b": folder_key(tmp_path / "a2")})
    assert same.status_code == 200 and 'id="compare"' in same.text and "+0.000" in same.text
    diff = c.get("/compare", params={"a": folder_key(tmp_path / "a1"), "b": folder_key(tmp_path / "other")})
    assert diff.status_code == 409 and "never ranked together" in diff.text


def test_loopback_console_refuses_foreign_host_headers(tmp_path):
    planned_ledger(tmp_path / "c1")
    app = create_app([str(tmp_path)], TOKEN)
    assert TestClient(app, base_url="http://localhost:8321").get("/").status_code == 200
    assert TestClient(app, base_url="http://attacker.example").get("/").status_code == 421


def test_serve_refuses_a_remote_host_without_the_flag(capsys, tmp_path):
    assert cli.main(["serve", str(tmp_path), "--host", "0.0.0.0", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--allow-remote" in err[0]


def test_wandb_feed_logs_episodes_while_the_campaign_runs(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from kosmos_env.campaign.runner import run_campaign
    from kosmos_env.publish.wandb_logger import LedgerFeed

    for var, sub in (
        ("WANDB_DIR", "wandb"),
        ("WANDB_DATA_DIR", "data"),
        ("WANDB_CACHE_DIR", "cache"),
        ("WANDB_CONFIG_DIR", "config"),
        ("WANDB_ARTIFACT_DIR", "artifacts"),
    ):
        (tmp_path / sub).mkdir()
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    config = make_config(
        "Kosmos-Tabletop-v1",
        ["scripted:skill=1.0"],
        tasks=["carrot_on_plate"],
        seeds=2,
        image_size=[64, 64],
        video=False,
    )
    out = tmp_path / "camp"
    feed = LedgerFeed(out, min_interval=0.0)
    seen = []

    def progress():
        feed.poll()
        seen.append(len(feed.logged))

    results = run_campaign(config, out, progress=False, on_progress=progress)
    run_dir = feed.finish(results)
    assert any(0 < n < config.n_episodes for n in seen), seen  # logged during the run, not only at the end
    assert len(feed.logged) == config.n_episodes
    (table,) = (Path(run_dir) / "files" / "media" / "table").glob("episodes_*.table.json")
    assert len(json.loads(table.read_text())["data"]) == config.n_episodes


def test_static_report_has_the_analysis_section(finished, tmp_path):
    from kosmos_env.report.render import write_report

    shutil.copytree(finished, tmp_path / "a")
    paths = write_report(tmp_path / "a", thumbnails=False)
    html = paths["html"].read_text()
    low = html.lower()  # section titles gained a "Secondary:" prefix (issue 32): match them case-blind
    assert 'id="analysis"' in html and "split-half repeatability" in low and "minimum detectable difference" in low
    assert "<svg" in html and "<script" not in html  # plots inline, still no script
    assert "Statistical analysis" in paths["markdown"].read_text()


def test_live_numbers_come_from_the_ledger(tmp_path):
    import os
    import socket

    planned_ledger(tmp_path / "c1", seeds=3)  # 2 policies x 3 seeds = 6 episodes
    path = tmp_path / "c1" / "ledger.sqlite"
    timings = json.dumps({"policy": 1.0, "world": 2.0, "gate": 0.0, "judge": 1.0, "io": 0.0, "total": 4.0})
    with Ledger(path, create=False) as ledger:
        ledger.set_meta("price_table", json.dumps({"accelerator_per_hour": {"cpu": 3.6}}))
        ledger.start_run(f"{socket.gethostname()}:{os.getpid()}:main", "in-process", 1, [])
        now = time.time()  # episodes finished during this run (after its start)
        with ledger.transaction() as conn:
            ords = [r[0] for r in conn.execute("SELECT ord FROM episodes ORDER BY ord")]
            for o, outcome in zip(ords[:3], ("success", "failure", "discarded"), strict=True):
                conn.execute(
                    "UPDATE episodes SET status = 'done', outcome = ?, success = ?, timings = ?, finished = ? "
                    "WHERE ord = ?",
                    (outcome, {"success": 1, "failure": 0}.get(outcome), timings, now, o),
                )
            conn.execute(
                "UPDATE episodes SET status = 'leased', owner = ?, lease_expires = ? WHERE ord = ?",
                (f"{socket.gethostname()}:{os.getpid()}:w0", now + 60, ords[3]),
            )
    d = _client(tmp_path).get(f"/c/{folder_key(tmp_path / 'c1')}/live.json").json()
    assert d["state"] == "running" and d["queue"] == {"pending": 2, "leased": 1, "done": 3}
    assert d["outcomes"]["discarded"] == 1 and d["timed"] == 3
    assert d["seconds_per_rollout"]["world"] == pytest.approx(2.0) and d["seconds_per_rollout"]["overhead"] == 0.0
    money = d["money"]  # 3 rollouts x 4 s x 0.001 per s; the judge holds 1 s of each 4
    assert money["total"] == pytest.approx(0.012) and money["judge_share"] == pytest.approx(0.25)
    assert d["rollouts_per_hour"] > 0 and d["eta_seconds"] > 0
    top = d["ranking"][0]
    assert top["policy"] == "scripted:skill=1.0" and top["successes"] == 1 and top["decided"] == 1
    assert 0 < top["wilson"][0] < 1 == top["wilson"][1]


def test_a_cancelled_worker_claims_nothing_and_a_rerun_clears_the_cancel(tmp_path):
    from kosmos_env.campaign.control import clear_cancel, request_cancel
    from kosmos_env.campaign.ledger import make_owner
    from kosmos_env.campaign.worker import work

    config = planned_ledger(tmp_path / "c1")
    path = tmp_path / "c1" / "ledger.sqlite"
    with Ledger(path, create=False) as ledger:
        assert request_cancel(ledger, "test") and not request_cancel(ledger, "test")  # the second is a no-op
    assert work(tmp_path / "c1", config, make_owner("w0")) == 0  # the loop stops before its first claim
    with Ledger(path, create=False) as ledger:
        assert ledger.counts()["pending"] == 6 and ledger.attempts() == []
        assert clear_cancel(ledger, "rerun") and not cancel_requested(ledger)
        assert [r[0] for r in ledger.conn.execute("SELECT action FROM control ORDER BY id")] == ["cancel", "resume"]


def test_warm_up_is_kept_out_of_rate_and_eta(tmp_path):
    """A run that spends 400 s loading models before its first episode, then finishes one episode
    a second: the rate is 3600/h (4 episodes in the 4 s after the first), not 5 in 404 s, and the
    400 s are reported as warm-up."""
    planned_ledger(tmp_path / "c1", seeds=3)  # 6 episodes
    path = tmp_path / "c1" / "ledger.sqlite"
    t0 = 1_700_000_000.0
    with Ledger(path, create=False) as ledger:
        run_id = ledger.start_run("elsewhere:1:main", "in-process", 1, [])
        with ledger.transaction() as conn:
            conn.execute("UPDATE runs SET started = ?, finished = ? WHERE run_id = ?", (t0, t0 + 404.0, run_id))
            ords = [r[0] for r in conn.execute("SELECT ord FROM episodes ORDER BY ord")]
            for i, o in enumerate(ords[:5]):
                conn.execute(
                    "UPDATE episodes SET status = 'done', outcome = ?, success = ?, finished = ? WHERE ord = ?",
                    ("success" if i % 2 == 0 else "failure", int(i % 2 == 0), t0 + 400.0 + i, o),
                )
    d = _client(tmp_path).get(f"/c/{folder_key(tmp_path / 'c1')}/live.json").json()
    assert d["warmup_seconds"] == pytest.approx(400.0)
    assert d["rollouts_per_hour"] == pytest.approx(3600.0)
    assert d["run"]["episodes"] == 5 and d["remaining"] == 1
    hist = d["history"]
    assert hist[-1]["done"] == 5 and hist[-1]["successes"] == 3 and hist[-1]["decided"] == 5
    assert [h["done"] for h in hist] == sorted(h["done"] for h in hist)  # cumulative
    assert sum(h["per_minute"] * (hist[0]["t"]) / 60 for h in hist) == pytest.approx(5.0)  # equal slices


def test_tables_download_as_csv_and_parquet_and_refuse_unknown_formats(finished, tmp_path):
    import csv
    import io

    shutil.copytree(finished, tmp_path / "a")
    key = folder_key(tmp_path / "a")
    c = _client(tmp_path)
    con = sqlite3.connect(tmp_path / "a" / "ledger.sqlite")
    n_eps = con.execute("SELECT COUNT(*) FROM episodes").fetchone()[0]
    con.close()
    for url, n_rows in ((f"/c/{key}/episodes", n_eps), (f"/c/{key}/table", 4), (f"/c/{key}/pair", 3), ("/", 2)):
        r = c.get(url, params={"format": "csv"})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv"), url
        assert "attachment" in r.headers["content-disposition"]
        assert len(list(csv.DictReader(io.StringIO(r.text)))) == n_rows, url
        assert c.get(url, params={"format": "xlsx"}).status_code == 400
    r = c.get(f"/c/{key}/disagree")  # only the campaign's own judge: says how to add another
    assert r.status_code == 200 and 'id="no-judges"' in r.text and "kosmos-env judge" in r.text
    icon = c.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml" and b"<svg" in icon.content
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        r = c.get(f"/c/{key}/table", params={"format": "parquet"})
        assert r.status_code == 501 and "pyarrow" in r.text and len(r.text.strip().splitlines()) == 1
    else:
        import builtins

        real = builtins.__import__

        def no_pyarrow(name, *args, **kwargs):
            if name.startswith("pyarrow"):
                raise ImportError(name)
            return real(name, *args, **kwargs)

        builtins.__import__ = no_pyarrow
        try:
            r = c.get(f"/c/{key}/table", params={"format": "parquet"})
        finally:
            builtins.__import__ = real
        assert r.status_code == 501 and "pyarrow" in r.text and len(r.text.strip().splitlines()) == 1


class _PageTables(HTMLParser):
    """The analysis page's tables (by their data-table name: header and rows of cell text) and the
    download links under them."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.links: list[str] = []
        self._name = self._row = self._cell = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table" and "data-table" in attrs:
            self._name = attrs["data-table"]
            self.tables[self._name] = []
        elif tag == "tr" and self._name:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = ""
        elif tag == "a" and "download" in attrs:
            self.links.append(attrs["href"])

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append(self._cell)
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables[self._name].append(self._row)
            self._row = None
        elif tag == "table":
            self._name = None


def test_every_analysis_table_downloads_as_the_page_shows_it(finished, tmp_path):
    import csv
    import io
    from urllib.parse import parse_qs, urlsplit

    shutil.copytree(finished, tmp_path / "runs" / "a")
    key = folder_key(tmp_path / "runs" / "a")
    reference = tmp_path / "reference.csv"  # so the page has its agreement table too
    reference.write_text("task,policy,reference\ncarrot_on_plate,scripted:skill=1.0,0.9\ncarrot_on_plate,random,0.1\n")
    c = _client(tmp_path / "runs", reference=reference)
    page = _PageTables()
    page.feed(c.get(f"/c/{key}/analysis").text)
    assert {"per_policy", "pairwise", "ranking", "agreement"} <= set(page.tables)
    csv_links = {parse_qs(urlsplit(u).query)["table"][0]: u for u in page.links if u.endswith("format=csv")}
    assert set(csv_links) == set(page.tables)  # every table on the page links its download
    assert len(page.links) == 2 * len(page.tables)  # CSV and parquet
    for name, rows in page.tables.items():
        r = c.get(csv_links[name])
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv"), name
        assert f"a-{name}.csv" in r.headers["content-disposition"]
        assert list(csv.reader(io.StringIO(r.text))) == rows, name  # header and every cell as shown
    try:
        import pyarrow.parquet as pq
    except ImportError:
        pq = None
    if pq is not None:
        r = c.get(f"/c/{key}/analysis", params={"table": "per_policy", "format": "parquet"})
        got = pq.read_table(io.BytesIO(r.content))
        assert [got.column_names] + [list(row.values()) for row in got.to_pylist()] == page.tables["per_policy"]
    r = c.get(f"/c/{key}/analysis", params={"table": "nope", "format": "csv"})
    assert r.status_code == 404 and "per_policy" in r.text and len(r.text.strip().splitlines()) == 1
    assert c.get(f"/c/{key}/analysis", params={"table": "per_policy", "format": "xlsx"}).status_code == 400
    planned_ledger(tmp_path / "runs" / "empty")  # nothing finished: no analysis, one line saying so
    r = c.get(f"/c/{folder_key(tmp_path / 'runs' / 'empty')}/analysis", params={"table": "per_policy", "format": "csv"})
    assert r.status_code == 409 and "No finished episode" in r.text


def test_rationales_in_plain_words_from_the_judges_stored_fields():
    from kosmos_env.console.episode_view import plain_rationale

    def log_judgment(success, **events):
        extras = {
            "held": False,
            "lifted": False,
            "carried": False,
            "released": False,
            "empty_grasps": 0,
            "idle_fraction": 0.1,
            "idle": False,
            "n_grasps": 1,
            "z": 0.0,
            **events,
        }
        return {
            "judge": "robot_log",
            "success": success,
            "extras": extras,
            "rationale": f"failure: events {[k for k in ('held', 'lifted') if extras[k]] or ['none']}, Z = -0.25",
        }

    none = plain_rationale(log_judgment(False, empty_grasps=1, z=-0.25))
    assert none.startswith("Failure: the robot never held an object.") and "1 of those closed on nothing" in none
    assert "events [" not in none and "Z = -0.25" in none
    part = plain_rationale(log_judgment(False, held=True, lifted=True, z=2.0))
    assert "held an object in its gripper and lifted it, but never carried" in part and "never let go" in part
    split = plain_rationale(log_judgment(False, held=True, lifted=True, carried=True, released=True, z=4.0))
    assert "not all within one and the same grasp" in split
    assert plain_rationale(log_judgment(True, held=True, lifted=True, carried=True, released=True)).startswith(
        "Success:"
    )
    # a judge without structured fields keeps its own words
    assert plain_rationale({"judge": "vlm", "rationale": "the carrot is on the plate"}) == "the carrot is on the plate"


def test_distance_to_goal_uses_the_objects_logged_position_when_there_is_one(tmp_path):
    import numpy as np

    from kosmos_env.campaign.artifacts import ArtifactStore
    from kosmos_env.console.episode_view import distance_svg

    store = ArtifactStore(tmp_path)
    steps = 5
    obj = np.column_stack([np.linspace(0.5, 0.3, steps), np.zeros(steps), np.full(steps, 0.02)]).astype(np.float32)
    ee = obj + np.float32(0.05)
    for log, expect in (({"ee_pos": ee}, "gripper to goal"), ({"ee_pos": ee, "object_pos": obj}, "object to goal")):
        buf = tmp_path / "log.npz"
        np.savez(buf, **log)
        _, rel, _ = store.put_file(buf, "npz")
        ep = {
            "log": rel,
            "ground_truth": {
                "target_pos": [0.3, 0.0, 0.0],
                "object_pos": obj[-1].tolist(),
                "reason": "carrot rests on the plate",
            },
        }
        svg, note = distance_svg(tmp_path, ep)
        assert svg is not None and expect in svg and 'data-scrub="1"' in svg
        assert "0.020 m from the goal" in note  # the simulator's final state: 2 cm above the goal point
        assert ("not the object's" in note) == ("object_pos" not in log)
    assert distance_svg(tmp_path, {"log": rel, "ground_truth": None})[0] is None  # no state: said, not drawn


def test_provenance_never_shows_a_secret_from_a_command_line():
    from kosmos_env.console.episode_view import provenance

    argv = json.dumps(
        [
            "eval",
            "--policy",
            "remote:url=http://h:1,token=s3cr3t-a",
            "--judge",
            json.dumps({"type": "vlm", "api_key": "s3cr3t-b"}),
            "--hf-token",
            "s3cr3t-c",
            "--seeds",
            "3",
        ]
    )
    rows = dict(provenance({"episode_id": "e"}, {}, None, [{"run_id": "r1", "argv": argv}]))
    shown = rows["eval run r1"]
    assert "s3cr3t" not in shown and shown.count("(redacted)") == 3 and "--seeds" in shown
    assert rows["kosmos-env version"].startswith("not recorded") and rows["world weights hash"].startswith(
        "not recorded"
    )
