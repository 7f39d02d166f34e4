"""Rows of ``GET /api/diagnostics`` that ask the running system, not its settings: did the worker's
exporter start, on which logger; does the Durable backend answer; does an answer of the app's reach
every answer queue (sent and read back); does every timer still tick on its schedule.

The Durable round trip is a status query of an instance id nobody uses, through the ``durableClient``
binding the HTTP functions get: the host's Durable extension asks its backend (the task hub's tables
or the Durable Task Scheduler) with the app's identity, so a missing Durable Task Data Contributor, a
wrong scheduler endpoint or task hub, or an unreachable storage account answers an error, while "no
such instance" (404) is a backend that answered.

Each timer records its ticks with its NCRONTAB schedule (``workflow_core/liveness.py``); it is late
when its last tick is older than two of its periods (the longest gap between two firings) plus a cold
start's margin. The watchdog is judged on ``WATCHDOG_SCHEDULE`` (what its trigger reads) and fails if
it never ticked; every other timer on the schedule it recorded. In Azure (``WEBSITE_SITE_NAME``) a
maintenance timer that never ticked fails too: ``function_app.py`` always registers it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from datetime import timedelta
from typing import Any

from api.diagnostics_queues import answer_round_trip
from api.diagnostics_sections import Row, row
from workflow_core import APP_LOGGER, liveness, telemetry_instruments
from workflow_core.schedules import Schedule

PROBE_INSTANCE = "sas-doctor-probe"
LOGGER_SETTING = "PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME"  # the worker's, read as its otel.py does
ANSWER_QUEUES_SETTING = "ANSWER_QUEUES"  # the answer queues infra created (comma-separated)
ANSWERED_STATUSES = {200, 202, 400, 404}  # a status, or "no such instance": the backend answered
COLD_START_MARGIN = timedelta(seconds=120)


def _exporting(name: str) -> bool:
    """An OpenTelemetry ``LoggingHandler`` on the logger (the SDK's, or the logging instrumentation's,
    which azure-monitor-opentelemetry 1.8 attaches)."""
    return any(
        type(h).__name__ == "LoggingHandler" and type(h).__module__.startswith("opentelemetry.")
        for h in logging.getLogger(name).handlers
    )


def telemetry_exporter() -> Row:
    """Whether an OpenTelemetry log handler sits on a logger every app record passes (``sas``, or the
    root), where the worker's configure_azure_monitor (or the app's) attached it."""
    worker = telemetry_instruments.worker_owns_telemetry()
    if not worker and telemetry_instruments.configured_by() is None:
        return row("telemetry exporter", None, "the app configured no exporter (no connection string)")
    by = "the worker" if worker else "the app"
    named = (os.environ.get(LOGGER_SETTING) or "") if worker else APP_LOGGER
    on = [name for name in dict.fromkeys((named, APP_LOGGER, "")) if _exporting(name)]
    if any(name in (APP_LOGGER, "") for name in on):
        where = " and ".join(repr(name or "(root)") for name in on)
        return row("telemetry exporter", True, f"exporter started by {by} on logger {where}")
    if on:
        return row(
            "telemetry exporter",
            False,
            f"exporter started by {by} on logger {on[0]!r}, which no app record passes",
            f"set {LOGGER_SETTING}={APP_LOGGER}",
        )
    return row(
        "telemetry exporter",
        False,
        f"no exporter on logger {APP_LOGGER!r} or the root ({LOGGER_SETTING}={named!r})",
        f"{by} did not start the exporter: read the host's log for 'Error initializing Azure monitor "
        "distro' (azure-monitor-opentelemetry must be in requirements.txt; APPLICATIONINSIGHTS_"
        "CONNECTION_STRING and _AUTHENTICATION_STRING set)",
    )


async def durable_backend(client: Any) -> Row:
    """A status query of :data:`PROBE_INSTANCE` through the app's Durable client binding."""
    check, fix = (
        "durable backend round trip",
        "the app's identity needs its Durable backend: Storage Table/Queue/Blob roles on the account "
        "(Azure Storage provider) or Durable Task Data Contributor on the scheduler, and the connection "
        "and task hub host.json names (DURABLE_TASK_SCHEDULER_CONNECTION_STRING, TASK_HUB_NAME)",
    )
    if client is None:
        return row(check, None, "no Durable client binding in this call (not measurable here)")
    from azure.durable_functions.models.RpcManagementOptions import RpcManagementOptions

    url = RpcManagementOptions(instance_id=PROBE_INSTANCE).to_url(client._orchestration_bindings.rpc_base_url)
    try:
        status, text = await asyncio.wait_for(_get(client, url), timeout=30)
    except Exception as exc:  # the extension itself did not answer
        return row(check, False, f"{type(exc).__name__}: {str(exc)[:300]}", fix)
    if status not in ANSWERED_STATUSES:
        detail = f"the status query of {PROBE_INSTANCE!r} answered HTTP {status}: {text}"
        return row(check, False, detail, fix)
    return row(check, True, f"status query of {PROBE_INSTANCE!r} answered (HTTP {status})")


async def _get(client: Any, url: str) -> tuple[int, str]:
    """GET ``url`` as the client's transport would: the SDK's own (one process-wide session, every body
    decoded as JSON) with a session of this call's own; a replaced one (devtools' in-process host) as is."""
    get = client._get_async_request
    if getattr(get, "__module__", "").startswith("azure.durable_functions"):
        import aiohttp

        async with aiohttp.ClientSession() as session, session.get(url) as response:
            return response.status, (await response.text())[:200]
    status, body = await get(url)
    return status, (body if isinstance(body, str) else json.dumps(body))[:200]


def answer_queues(services: Any) -> list[Row]:
    """Each answer queue of ``ANSWER_QUEUES``: a probe answer sent and read back."""
    names = [q.strip() for q in (os.environ.get(ANSWER_QUEUES_SETTING) or "").split(",") if q.strip()]
    if not names:
        return [
            row("answer queues", None, f"{ANSWER_QUEUES_SETTING} names none (no pool asks on Service Bus)")
        ]
    return [answer_round_trip(services.transport, name) for name in names]


def schedule_period(schedule: str) -> timedelta | None:
    """The longest gap between two firings of a six-field NCRONTAB schedule (seconds first), or None
    when it is not one this reads (names of days or months, a TimeSpan)."""
    try:
        return Schedule.parse(schedule).longest_gap()
    except ValueError:
        return None


def _timer_row(name: str, tick: liveness.Tick | None, schedule: str | None) -> Row:
    check = f"{name} last tick"
    where = (
        f"check that the {name} timer runs (its schedule setting; the function is not disabled), the "
        "app's state and its logs"
    )
    if tick is None:
        return row(check, False, f"the {name} timer has never recorded a tick", where)
    period = schedule_period(schedule or "")
    age = tick.age_seconds()
    seen = f"{name} last ran {int(age)} s ago ({tick.ticks} ticks recorded, {tick.errors} errors last)"
    if period is None:
        return row(check, None, f"{seen}; schedule {schedule!r} not read here, so not judged")
    limit = 2 * period + COLD_START_MARGIN
    return row(
        check,
        age <= limit.total_seconds(),
        f"{seen}; schedule {schedule} fires at least every {int(period.total_seconds())} s",
        f"it has not ticked for over {int(limit.total_seconds())} s (two periods and a cold start): {where}",
    )


def timers(services: Any) -> list[Row]:
    """A row per timer that records liveness; the watchdog's always, on ``WATCHDOG_SCHEDULE``."""
    from workflow_core.storage_clients import table_client

    s = services.settings
    ticks = liveness.Liveness(table_client(s.ledger_connection, s.ledger_table)).last_ticks()
    rows = [_timer_row("watchdog", ticks.pop(liveness.WATCHDOG, None), s.watchdog_schedule)]
    if os.environ.get("WEBSITE_SITE_NAME"):
        from supervisor.maintenance import TIMER

        ticks.setdefault(TIMER, None)
    return rows + [_timer_row(name, tick, tick and tick.schedule) for name, tick in sorted(ticks.items())]
