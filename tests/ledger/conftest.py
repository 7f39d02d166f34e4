from __future__ import annotations

import pytest

from workflow_core import clock
from workflow_core.ledger import StepLedger


@pytest.fixture
def ledger(azurite, unique_name) -> StepLedger:
    """A ledger on fresh tables of the session's real Azurite."""
    led = StepLedger.from_connection_string(
        azurite.connection_string, unique_name("steps"), unique_name("idx")
    )
    led.create_tables()
    yield led
    led.close()


@pytest.fixture
def clock_at_module_now(request):
    """The ledger's clock stands at the test module's ``NOW`` while a test runs: every time the test
    expects (index row minutes, rows due "60 s after the start", deadlines a minute ahead) comes from
    the instant the ledger writes with, however long after import the test runs and whatever minute
    boundary it crosses."""
    now = request.module.NOW
    with clock.use_clock(lambda: now):
        yield now
