"""One demo server (the app over the in-process durable host, seeded with faulty workflows) and one
headless Chromium per session: the browser tests share them, so the suite stays fast.

Chromium is Debian's package (``/usr/bin/chromium``, installed by scripts/bootstrap), driven by the
Python ``playwright`` package; no browser is ever downloaded. Without it the tests fail on CI
(``CI=true``) with a clear message, and are skipped with the reason locally.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from devtools.console_demo import ConsoleDemo

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _need_chromium() -> None:
    if Path(CHROMIUM).exists():
        return
    message = f"headless Chromium is missing at {CHROMIUM}: run scripts/bootstrap (apt-get install chromium)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="module")
def demo(azurite):
    """Module-scoped: the harness installs its virtual clock process-wide while it runs, and other
    test modules must get the wall clock back."""
    suffix = uuid.uuid4().hex[:10]  # tables of its own: modules share one Azurite, never their rows
    tables = (f"Consolesteps{suffix}", f"Consoledeadlines{suffix}")
    with ConsoleDemo(azurite, tables=tables, speed=20) as running:
        running.tables = tables
        running.seed()
        running.start_clock()
        yield running


@pytest.fixture(scope="module")
def browser():
    # Module scope, not session: Playwright's sync API keeps its event loop marked running on the main
    # thread while it is open, and later tests that call asyncio.run() there would fail.
    _need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:  # launch() gives the browser a fresh temporary profile of its own
        launched = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    tab = context.new_page()
    yield tab
    context.close()


def screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
