"""The maintenance timer: one timer function (one Flex scale group) for the recovery canary, retention
and bulk operations, apart from the watchdog's, so no maintenance work ever delays a watchdog tick.

Every 30 seconds each feature whose schedule (``CANARY_SCHEDULE``, ``RETENTION_SCHEDULE``,
``BULK_SCHEDULE``) fell in the tick runs, side by side and bounded, so none starves another. Each
feature's settings load on their own each tick: a bad value disables that feature with a one-line
error (log, ``GET /api/diagnostics``), never the app.
"""

# No ``from __future__ import annotations``: the Python worker reads the timer function's annotations.
import asyncio
import logging
from datetime import datetime, timedelta
from typing import Any

import azure.durable_functions as df
import azure.functions as func

from supervisor.canary.runs import canary_tick
from supervisor.maintenance import bulk
from supervisor.maintenance.retention import BulkRetention, PurgeReport, Retention
from workflow_core import clock, runtime
from workflow_core.settings import (
    FEATURE_LOADERS,
    BulkSettings,
    RetentionSettings,
    SettingsError,
    feature_errors,
)
from workflow_core.storage_clients import blob_container_client
from workflow_core.workflows import load_workflows

log = logging.getLogger(__name__)
TICK = timedelta(seconds=30)
SCHEDULE = "*/30 * * * * *"  # every TICK
TIMER = "maintenance"  # its liveness row (workflow_core/liveness.py), judged by `sas doctor`
BULK_TICK_SECONDS = 20  # a tick acts for about this long (rate x seconds instances), then yields


async def retention_tick(
    services: runtime.Services, client: Any, ops: RetentionSettings, now: datetime | None = None
) -> PurgeReport:
    """Purge up to ``RETENTION_BATCH_SIZE`` instances past their retention, then finished bulk operations."""
    workflows = load_workflows().items()
    container = ops.archive_container
    retention = Retention(
        services.ledger,
        retention_days=ops.days,
        per_workflow={name: d.retention_days for name, d in workflows if d.retention_days is not None},
        batch_size=ops.batch_size,
        purge_history=client.purge_instance_history,
        archive=blob_container_client(services.settings.ledger_connection, container) if container else None,
    )
    report = await retention.run(now)
    bulk_retention = BulkRetention(services.ledger, retention_days=ops.days, batch_size=ops.batch_size)
    await asyncio.to_thread(bulk_retention.run, now)
    log.info(
        "retention: marked %d, purged %d, failed %d", *map(len, (report.marked, report.purged, report.failed))
    )
    return report


async def bulk_tick(services: runtime.Services, client: Any, ops: BulkSettings) -> list[str]:
    """Carry every unfinished bulk operation on, together for about :data:`BULK_TICK_SECONDS`."""
    store = bulk.BulkStore(services.ledger)
    carried = []
    for op in await asyncio.to_thread(store.unfinished):
        await bulk.run(
            store,
            op,
            rate_per_second=ops.rate_per_second,
            max_instances=ops.rate_per_second * BULK_TICK_SECONDS,
            terminate=bulk.durable_terminate(client),
        )
        carried.append(op.bulk_id)
    return carried


FEATURE_TICKS = {"canary": canary_tick, "retention": retention_tick, "bulk": bulk_tick}


def due_features(now: datetime, env: Any = None) -> tuple[dict[str, Any], dict[str, str]]:
    """The features due in the tick ``now`` closes, with their settings; and those whose settings fail."""
    end = now.replace(second=now.second - now.second % 30, microsecond=0)  # the tick's own time
    due, errors = {}, {}
    for feature, load in FEATURE_LOADERS.items():
        try:
            settings = load(env)
        except SettingsError as exc:
            errors[feature] = str(exc)
            continue
        if settings.schedule.due(end - TICK, end):
            due[feature] = settings
    return due, errors


def report_feature_errors(errors: dict[str, str] | None = None) -> dict[str, str]:
    """Log each feature whose settings do not load (it stays off until they do)."""
    errors = feature_errors() if errors is None else errors
    for feature, error in errors.items():
        log.error("maintenance: %s is disabled: %s", feature, error)
    return errors


async def maintenance_tick(
    services: runtime.Services, client: Any, *, now: datetime | None = None
) -> dict[str, Any]:
    """One tick: every due feature, side by side; what each did (or its error)."""
    now = now or clock.utcnow()
    due, errors = due_features(now)
    report_feature_errors(errors)
    names = list(due)
    ticks = [FEATURE_TICKS[name](services, client, due[name]) for name in names]
    done: dict[str, Any] = {}
    for name, result in zip(names, await asyncio.gather(*ticks, return_exceptions=True), strict=True):
        if isinstance(result, BaseException):
            log.error("maintenance: %s failed: %r", name, result)
        done[name] = result
    return done


maintenance_blueprint = df.Blueprint()


@maintenance_blueprint.function_name("maintenance_timer")
@maintenance_blueprint.timer_trigger(arg_name="timer", schedule=SCHEDULE, use_monitor=True)
@maintenance_blueprint.durable_client_input(client_name="client")
async def maintenance_timer(timer: func.TimerRequest, client: df.DurableOrchestrationClient) -> None:
    services = runtime.get_services()
    done = await maintenance_tick(services, client)
    log.info("maintenance: %s", {name: type(result).__name__ for name, result in done.items()})
    errors = sum(isinstance(result, BaseException) for result in done.values())
    await asyncio.to_thread(services.liveness.record_tick, errors=errors, timer=TIMER, schedule=SCHEDULE)
