"""One demo server (the app over the in-process durable host, seeded with faulty workflows) and one
headless Chromium per session: the browser tests share them, so the suite stays fast.

Chromium is Debian's package (``/usr/bin/chromium``, installed by scripts/bootstrap), driven by the
Python ``playwright`` package; no browser is ever downloaded. Without it the tests fail on CI
(``CI=true``) with a clear message, and are skipped with the reason locally.
"""

from __future__ import annotations

import uuid

import pytest

from devtools.console_demo import ConsoleDemo
from tests.helpers.browser import CHROMIUM, FLAGS, need_chromium


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
    need_chromium()
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
