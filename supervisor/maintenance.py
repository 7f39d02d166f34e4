"""Maintenance timers: retention (purge instances finished longer ago than their retention period)
and bulk operations (carry each unfinished one on from its cursor).

``function_app.py`` registers :data:`maintenance_blueprint`. The schedules are app settings read at
start-up (``RETENTION_SCHEDULE``, ``BULK_SCHEDULE``: :mod:`workflow_core.operations_settings`).
"""

# No ``from __future__ import annotations``: the Python worker reads the timer functions' annotations.
import logging
from datetime import datetime
from typing import Any

import azure.durable_functions as df
import azure.functions as func

from supervisor import bulk
from supervisor.bulk_retention import bulk_retention_tick
from supervisor.retention import PurgeReport, Retention
from workflow_core import runtime
from workflow_core.operations_settings import OperationsSettings, load_operations_settings
from workflow_core.storage_clients import blob_container_client
from workflow_core.workflows import load_workflows

log = logging.getLogger(__name__)
_SETTINGS = load_operations_settings()
BULK_TICK_SECONDS = 25  # a tick acts for about this long (rate x seconds instances), then yields


def retention_for(
    services: runtime.Services, ops: OperationsSettings, purge_history: Any = None
) -> Retention:
    per_workflow = {
        name: d.retention_days for name, d in load_workflows().items() if d.retention_days is not None
    }
    archive = None
    if ops.audit_archive_container:
        archive = blob_container_client(services.settings.ledger_connection, ops.audit_archive_container)
    return Retention(
        services.ledger,
        retention_days=ops.retention_days,
        per_workflow=per_workflow,
        batch_size=ops.retention_batch_size,
        purge_history=purge_history,
        archive=archive,
    )


async def retention_tick(
    services: runtime.Services, client: Any, ops: OperationsSettings, now: datetime | None = None
) -> PurgeReport:
    retention = retention_for(services, ops, client.purge_instance_history)
    report = await retention.run(now)
    bulk_retention_tick(services.ledger, ops, now)  # finished bulk operations' rows (issue 42)
    log.info(
        "retention: marked %d, purged %d, failed %d",
        len(report.marked),
        len(report.purged),
        len(report.failed),
    )
    return report


async def bulk_tick(services: runtime.Services, client: Any, ops: OperationsSettings) -> list[str]:
    """Carry every unfinished bulk operation on, each for about :data:`BULK_TICK_SECONDS`."""
    store = bulk.BulkStore(services.ledger)
    carried = []
    for op in store.unfinished():
        await bulk.run(
            store,
            op,
            rate_per_second=ops.bulk_rate_per_second,
            max_instances=ops.bulk_rate_per_second * BULK_TICK_SECONDS,
            terminate=bulk.durable_terminate(client),
        )
        carried.append(op.bulk_id)
    return carried


maintenance_blueprint = df.Blueprint()


@maintenance_blueprint.function_name("retention_timer")
@maintenance_blueprint.timer_trigger(
    arg_name="timer", schedule=_SETTINGS.retention_schedule, use_monitor=True
)
@maintenance_blueprint.durable_client_input(client_name="client")
async def retention_timer(timer: func.TimerRequest, client: df.DurableOrchestrationClient) -> None:
    await retention_tick(runtime.get_services(), client, load_operations_settings())


@maintenance_blueprint.function_name("bulk_operations_timer")
@maintenance_blueprint.timer_trigger(arg_name="timer", schedule=_SETTINGS.bulk_schedule, use_monitor=True)
@maintenance_blueprint.durable_client_input(client_name="client")
async def bulk_operations_timer(timer: func.TimerRequest, client: df.DurableOrchestrationClient) -> None:
    await bulk_tick(runtime.get_services(), client, load_operations_settings())
