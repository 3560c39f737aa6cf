"""The HTML leaderboard, opened in headless Chromium: rows, first place, the sorting script, a screenshot.

Needs Debian's ``chromium`` package (``apt-get install -y chromium``); skips only when it is absent.
The screenshot is kept under ``test-artifacts/`` in the repository root (git-ignored).
"""

from __future__ import annotations

import json
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from kosmos_env.publish.leaderboard import build_leaderboard, write_leaderboard
from tests.support.browser import ARTIFACTS, CHROMIUM, needs_chromium
from tests.support.publish_bundles import campaign, copy_bundle, edit_results

pytestmark = needs_chromium


def chromium(args: list[str], profile: Path) -> str:
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


class Board(HTMLParser):
    """Reads the first leaderboard table's rows (policy per row) and the body's attributes."""

    def __init__(self):
        super().__init__()
        self.body: dict = {}
        self.table: dict = {}
        self.rows: list[str] = []
        self.rejected: list[str] = []
        self._in_first = False
        self._in_rejected = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        elif tag == "table" and a.get("id") == "lb-0":
            self._in_first, self.table = True, a
        elif tag == "table" and a.get("id") == "rejected":
            self._in_rejected = True
        elif tag == "tr" and self._in_first and "data-policy" in a:
            self.rows.append(a["data-policy"])
        elif tag == "tr" and self._in_rejected and a.get("class") == "rejection":
            self.rejected.append(a.get("data-check"))

    def handle_endtag(self, tag):
        if tag == "table":
            self._in_first = self._in_rejected = False


@pytest.fixture
def page(tmp_path_factory, tmp_path):
    forged = copy_bundle(campaign(tmp_path_factory, "a"), tmp_path / "forged")
    edit_results(forged, lambda r: r["aggregated"]["per_policy"]["random"].__setitem__("successes", 2))
    subs = [campaign(tmp_path_factory, "a"), campaign(tmp_path_factory, "b"), forged]
    data = build_leaderboard(subs)
    _, html = write_leaderboard(data, tmp_path / "lb")
    return data, html


def test_leaderboard_page_in_headless_chromium(page, tmp_path):
    data, html = page
    entries = data["boards"][0]["entries"]
    dom = Board()
    dom.feed(chromium(["--dump-dom", html.as_uri()], tmp_path / "profile"))
    assert dom.body.get("data-sortable") == "ready"  # the inline script ran
    assert len(dom.rows) == len(entries) == 3  # random of both campaigns is one entry (its episodes count once)
    assert dom.rows[0] == entries[0]["policy"] == "scripted:skill=1.0"
    assert dom.rejected == ["aggregates"]  # the forged submission, listed with its reason

    # the script sorts: ask for policy names ascending through the URL fragment
    dom2 = Board()
    dom2.feed(chromium(["--dump-dom", html.as_uri() + "#sort=policy:asc"], tmp_path / "profile2"))
    assert dom2.table.get("data-sorted-by") == "policy:asc"
    assert dom2.rows == sorted(e["policy"] for e in entries)

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "leaderboard.png"
    shot.unlink(missing_ok=True)
    chromium(
        ["--window-size=1280,1000", "--hide-scrollbars", f"--screenshot={shot}", html.as_uri()], tmp_path / "profile3"
    )
    assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    print(f"leaderboard screenshot: {shot}")


def test_page_escapes_untrusted_labels(tmp_path):
    """A policy label is data from a submission: it must never become markup or script."""
    from kosmos_env.publish.page import render_html

    evil = '<script>document.body.setAttribute("data-pwned","1")</script>'
    entry = {
        "rank": 1,
        "policy": evil,
        "hub_model_id": None,
        "success_rate": 0.5,
        "wilson_95": [0.2, 0.8],
        "worst_case_95": [0.2, 0.8],
        "n": 4,
        "discarded": 0,
        "abstained": 0,
        "errors": 0,
        "separable_from_next": None,
        "diff_95_to_next": None,
        "campaign_id": "c-1",
    }
    board = {
        "env_id": "Kosmos-Tabletop-v1",
        "spec_hash": "a" * 64,
        "official": True,
        "judge": {"type": "state"},
        "campaigns": ["c-1"],
        "notes": [],
        "entries": [entry],
    }
    html = render_html({"boards": [board], "accepted": [{}], "rejected": [], "built": "now", "package_version": "x"})
    assert evil not in html and "&lt;script&gt;" in html
    path = tmp_path / "index.html"
    path.write_text(html)
    dom = Board()
    dom.feed(chromium(["--dump-dom", path.as_uri()], tmp_path / "profile"))
    assert "data-pwned" not in dom.body and dom.rows == [evil]
    json.dumps(dom.rows)
