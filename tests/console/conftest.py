"""The browser fixtures shared by the console's page tests (test_browser.py, test_views.py)."""

from __future__ import annotations

import pytest

from tests.support.browser import CHROMIUM


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium, headless, driven by playwright (imported here: the console extra)."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (console extra)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--autoplay-policy=no-user-gesture-required", "--disable-gpu"],
        )
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    yield pg
    context.close()
