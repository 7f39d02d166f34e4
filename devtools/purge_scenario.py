"""A finished instance as the app leaves it, and the storage requests its purge makes (bench/ and
tests/perf pin these counts): ``bench/purge_requests.py``."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from devtools.request_counter import RequestCounter
from supervisor.maintenance.retention import Retention
from workflow_core import clock
from workflow_core.ledger import InstanceStatus, NewStep, StepLedger, StepStatus

T0 = datetime(2030, 1, 1, tzinfo=UTC)
STEPS = ("create_storage", "register_dns", "send_welcome")


def finished_instance(ledger: StepLedger, instance_id: str) -> None:
    """Three steps walked Pending -> Dispatched -> Running -> Succeeded, then the instance Succeeded:
    the rows a real run leaves (records, audit rows, listing row)."""
    with clock.use_clock(lambda: T0):
        ledger.create_instance_with_steps(
            instance_id,
            "provision-tenant",
            actor="api:start",
            input_json="{}",
            scheduler_deadline=T0 + timedelta(hours=1),
            version="provision-tenant@bench",
            steps=[NewStep(step_id=s, step_name=s, agent="bench.agent") for s in STEPS],
        )
        for step_id in STEPS:
            step = ledger.get(instance_id, step_id)
            step = ledger.transition(
                step, StepStatus.DISPATCHED, actor="scheduler", deadline=T0 + timedelta(minutes=5)
            )
            step = ledger.transition(
                step, StepStatus.RUNNING, actor="worker", deadline=T0 + timedelta(minutes=5)
            )
            ledger.transition(step, StepStatus.SUCCEEDED, actor="worker")
        record = ledger.get_instance(instance_id)
        ledger.transition_instance(record, InstanceStatus.SUCCEEDED, actor="scheduler")


def measure_purge(
    counter: RequestCounter, ledger: StepLedger, count: int, *, archive: Any = None
) -> tuple[Counter[str], int]:
    """Purge ``count`` finished instances in one tick; the requests by (service, operation), and
    how many were purged."""

    async def no_history(_: str) -> None:  # the Durable purge is one call per orchestration, not Storage
        return None

    retention = Retention(ledger, batch_size=count, purge_history=no_history, archive=archive)
    with counter.measure() as made:
        report = asyncio.run(retention.run(T0 + timedelta(days=31)))
    return Counter(f"{r.service} {r.op}" for r in made), len(report.purged)
