"""The console in Debian's headless chromium, driven by playwright (DevTools protocol).

The campaigns page lists a finished campaign; a campaign started during the test shows its
done-count rising on the live view without a reload; the cancel control stops it and a rerun
completes it with every episode recorded exactly once; an episode page plays its video and
shows the judge's votes and verified hashes; a request for a path outside the store is
refused. Screenshots go to ``test-artifacts/`` (git-ignored).

Needs ``chromium`` (Debian: ``apt-get install -y chromium``) and the console extra (playwright's
Python package; its own browser download is never used); skips without them.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the console extra is not installed (pip install 'kosmos-env[console]')")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (console extra)")

from kosmos_env import cli  # noqa: E402
from kosmos_env.campaign import verify_campaign  # noqa: E402
from kosmos_env.console.campaigns import folder_key  # noqa: E402
from kosmos_env.console.server import ConsoleServer  # noqa: E402
from tests.support.browser import needs_chromium, save_screenshot  # noqa: E402
from tests.support.campaign import SLOW, tabletop_eval_argv  # noqa: E402
from tests.support.paths import ROOT  # noqa: E402

TOKEN = "browser-test-token-0123456789"
FUSION = '{"type": "fusion", "judges": ["state", "robot_log"]}'
SEEDS = 4  # the live campaign: 2 policies x 1 task x SEEDS episodes, >= 1.6 s each (40 steps x 0.04 s)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("allow_test_policy_import"),  # SLOW is a module:Class policy
    needs_chromium,
]


def _live_argv(out: Path) -> list[str]:
    return tabletop_eval_argv(out, [f"{SLOW}:delay=0.04,skill=1.0", f"{SLOW}:delay=0.04,skill=0.3"], seeds=SEEDS)


def _planned(out: Path) -> bool:
    if not (out / "ledger.sqlite").exists():
        return False
    try:
        con = sqlite3.connect(f"file:{out / 'ledger.sqlite'}?mode=ro", uri=True)
        try:
            return con.execute("SELECT COUNT(*) FROM meta WHERE key = 'config'").fetchone()[0] == 1
        finally:
            con.close()
    except sqlite3.Error:  # tables not created yet
        return False


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    rc = cli.main(
        tabletop_eval_argv(root / "finished", ["scripted:skill=1.0", "random"], "--judge", FUSION, seeds=1, video=True)
    )
    assert rc == 0
    server = ConsoleServer(
        [root], port=0, token=TOKEN, poll_seconds=0.25, analysis_options={"n_boot": 200, "n_splits": 50}
    ).start_in_thread()
    yield root, server
    server.stop()


def test_campaigns_page_lists_the_finished_campaign(console, page):
    root, server = console
    key = folder_key(root / "finished")
    page.goto(server.url)
    row = page.locator(f'tr[data-key="{key}"]')
    assert row.get_attribute("data-done") == row.get_attribute("data-planned") == "2"
    for _ in range(100):  # the state settles once the background verification is done
        if row.get_attribute("data-state") == "finished" and "verified" in row.inner_text():
            break
        time.sleep(0.1)
        page.reload()
    assert row.get_attribute("data-state") == "finished", row.inner_text()
    assert "Kosmos-Tabletop-v1" in row.inner_text() and "scripted:skill=1.0" in row.inner_text()
    save_screenshot(page, "console-campaigns.png")


def test_episode_page_plays_video_and_shows_votes_and_hashes(console, page):
    root, server = console
    key = folder_key(root / "finished")
    page.goto(f"{server.url}c/{key}/episodes/0")
    page.wait_for_function(
        "() => { const v = document.getElementById('video');"
        " return v && v.readyState >= 2 && v.currentTime > 0 && !v.paused; }",
        timeout=15_000,
    )
    assert page.evaluate("document.getElementById('video').error") is None
    votes = page.locator("#votes tr.vote")
    assert votes.count() == 2
    assert "judge state" in votes.nth(0).inner_text() and "judge robot_log" in votes.nth(1).inner_text()
    assert page.locator('#artifacts tr[data-verified="verified"]').count() == 3  # video, actions, robot log
    prov = page.locator("#provenance").inner_text()
    assert "spec hash" in prov and "policy content hash" in prov
    assert page.locator("#gate tbody tr").count() >= 1
    assert page.locator("svg.chart").count() >= 2  # actions and at least one robot-log series
    save_screenshot(page, "console-episode.png")
    page.goto(f"{server.url}c/{key}/analysis")
    assert "split-half repeatability" in page.content().lower()
    save_screenshot(page, "console-analysis.png")


def test_request_outside_the_store_is_refused(console, page):
    root, server = console
    key = folder_key(root / "finished")
    for tail in ("..%2F..%2Fledger.sqlite", "..%2Fresults.json", "%2Fetc%2Fpasswd", "0" * 64 + ".mp4"):
        response = page.goto(f"{server.url}c/{key}/artifacts/{tail}")
        assert response.status in (400, 404), tail
        assert "SQLite" not in page.content() and "per_episode" not in page.content()


def test_live_view_rises_cancel_stops_and_rerun_completes_once(console, page):
    root, server = console
    out = root / "live"
    env = dict(os.environ, PYTHONPATH=str(ROOT), MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"), HF_HUB_OFFLINE="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kosmos_env.cli", *_live_argv(out)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 60
        while not _planned(out) and time.time() < deadline:  # the ledger exists and holds its plan
            time.sleep(0.05)
        key = folder_key(out)
        page.goto(server.url)  # the new campaign appears on the list
        assert page.locator(f'tr[data-key="{key}"]').count() == 1
        page.goto(f"{server.url}c/{key}")
        page.wait_for_function("() => Number(document.body.dataset.updates || 0) >= 1", timeout=20_000)
        first = int(page.locator("#done").inner_text())
        assert first < 2 * SEEDS
        # pushed updates, no reload: the same document sees the count rise
        page.evaluate("window.__sameDocument = true")
        page.wait_for_function(f"() => Number(document.getElementById('done').textContent) > {first}", timeout=60_000)
        assert page.evaluate("window.__sameDocument") is True
        assert page.locator("#state").inner_text() == "running"
        assert page.locator("#ranking-svg circle").count() >= 1
        save_screenshot(page, "console-live.png")

        page.fill("#token", TOKEN)
        page.once("dialog", lambda dialog: dialog.accept())  # the cancel asks for confirmation
        page.click("#cancel")
        page.wait_for_function("() => document.getElementById('cancel-result').textContent.includes('cancel recorded')")
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, stderr[-2000:]  # incomplete
    assert "cancelled" in stderr and "rerun the same command" in stderr
    con = sqlite3.connect(out / "ledger.sqlite")
    counts = dict(con.execute("SELECT status, COUNT(*) FROM episodes GROUP BY status").fetchall())
    con.close()
    assert counts.get("leased", 0) == 0 and 0 < counts.get("done", 0) < 2 * SEEDS and counts.get("pending", 0) > 0
    page.wait_for_function("() => document.getElementById('state').textContent === 'cancelled'", timeout=20_000)
    save_screenshot(page, "console-cancelled.png")

    assert cli.main(_live_argv(out)) == 0  # the rerun resumes and finishes
    report = verify_campaign(out)
    assert report.ok, report.problems  # every planned episode done and completed exactly once
    con = sqlite3.connect(out / "ledger.sqlite")
    ok = con.execute("SELECT COUNT(*), COUNT(DISTINCT episode_id) FROM attempts WHERE status = 'ok'").fetchone()
    actions = [r[0] for r in con.execute("SELECT action FROM control ORDER BY id")]
    con.close()
    assert ok == (2 * SEEDS, 2 * SEEDS) and actions == ["cancel", "resume"]
    page.wait_for_function("() => document.getElementById('state').textContent === 'finished'", timeout=20_000)
