"""Headless Chromium for the console's browser tests: Debian's package (``/usr/bin/chromium``, installed
by scripts/bootstrap), driven by the Python ``playwright`` package; no browser is ever downloaded.
Without it the tests fail on CI (``CI=true``) with a clear message, and are skipped locally."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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


def need_chromium() -> None:
    if Path(CHROMIUM).exists():
        return
    message = f"headless Chromium is missing at {CHROMIUM}: run scripts/bootstrap (apt-get install chromium)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
