from __future__ import annotations

import pytest

from workflow_core import clock


@pytest.fixture
def clock_at_module_now(request):
    """The ledger's clock stands at the test module's ``NOW`` while a test runs: every time the test
    expects (index row minutes, rows due "60 s after the start", deadlines a minute ahead) comes from
    the instant the ledger writes with, however long after import the test runs and whatever minute
    boundary it crosses."""
    now = request.module.NOW
    with clock.use_clock(lambda: now):
        yield now
