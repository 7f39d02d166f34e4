"""End-to-end fixtures: the whole pattern in one process (``devtools.harness``) on the
session's Azurite: real HTTP starter body, real orchestrators through the SDK's replay on a virtual
clock, real agent bodies pumping real queues, the real watchdog every 30 s of virtual time."""

from __future__ import annotations

import pytest

from activities.worker.handlers import faults
from devtools.harness import PatternHarness

TRANSPORTS_USED: set[str] = set()


@pytest.fixture
def harness(azurite):
    faults.clear()
    with PatternHarness(azurite) as h:
        TRANSPORTS_USED.add(h.transport_label)
        yield h
    faults.clear()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if TRANSPORTS_USED:
        terminalreporter.write_line(f"end-to-end agent transport: {', '.join(sorted(TRANSPORTS_USED))}")
