"""Debian's headless chromium for the page tests: where it is, where screenshots go, and the skip
used when it is absent (``apt-get install -y chromium``; playwright's own browser download is never used)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.paths import ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = ROOT / "test-artifacts"  # git-ignored
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install -y chromium)"
)


def save_screenshot(page, name: str) -> Path:
    """A full-page screenshot of a playwright ``page`` in ``test-artifacts/``; a blank one fails."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000
    return path
