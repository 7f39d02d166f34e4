from __future__ import annotations

import pytest

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
