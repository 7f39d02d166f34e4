"""What the ledger's Hypothesis state machines share: a fresh ledger whose next transaction can be
made to fail as if the process died before it, and the settings every machine runs with."""

from __future__ import annotations

import uuid

from azure.core.exceptions import ServiceRequestError
from hypothesis import HealthCheck, settings

from workflow_core.ledger import StepLedger


class CrashOnce:
    """Wraps the real TableClient; the next transaction fails as if the process died before it."""

    def __init__(self, real):
        self._real = real
        self.armed = False

    def submit_transaction(self, operations, **kwargs):
        if self.armed:
            self.armed = False
            raise ServiceRequestError("injected crash before the step write")
        return self._real.submit_transaction(operations, **kwargs)

    def __getattr__(self, name):
        return getattr(self._real, name)


def crashable_ledger(connection_string: str, prefix: str) -> tuple[StepLedger, CrashOnce]:
    """A ledger on fresh tables (``<prefix>s…``, ``<prefix>i…``) whose step-table transactions go
    through a :class:`CrashOnce`."""
    suffix = uuid.uuid4().hex[:10]
    ledger = StepLedger.from_connection_string(connection_string, f"{prefix}s{suffix}", f"{prefix}i{suffix}")
    ledger.create_tables()
    crash = CrashOnce(ledger._steps)
    ledger._steps = crash
    return ledger, crash


def drop_tables(ledger: StepLedger) -> None:
    ledger._service.delete_table(ledger.ledger_table_name)
    ledger._service.delete_table(ledger.index_table_name)


def run_machine(machine) -> None:
    """Run a state machine class as one test, with the budget the suite affords each machine."""
    machine.TestCase.settings = settings(
        max_examples=25,
        stateful_step_count=15,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    machine.TestCase().runTest()
