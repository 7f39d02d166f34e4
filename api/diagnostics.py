"""``GET /api/diagnostics``: the platform as the running app sees it, for ``sas doctor``.

Never public: behind App Service Authentication it needs the ``Workflows.Operate`` role; without it a
function key (in Azure) or a loopback caller (locally), as every read. The body names settings, never
their values. Each section (:data:`SECTIONS`) and each feature's provider (:data:`PROVIDERS`) runs on
its own: one that raises becomes a failed row, never a 500.

The providers are the optional features' rows: the recovery canary's, the circuit breakers', and a
failing row for each feature whose settings are invalid (it is off). A row fails for what an operator
must act on: the canary's newest verdict failed or none passed within two periods; a circuit is open.
A disabled canary, one that has not judged a run yet, a half-open circuit and superseded failures are
shown, not failed.

The rows that ask the running system, not its settings: did the worker's exporter start, on which
logger; does the Durable backend answer (a status query of an instance id nobody uses through the
``durableClient`` binding: the extension asks its backend with the app's identity, so a missing role, a
wrong scheduler endpoint or task hub or an unreachable account is an error, "no such instance" an
answer); does every timer still tick. Each timer records its ticks with its NCRONTAB schedule
(``workflow_core/liveness.py``) and is late when its last tick is older than two of its periods (the
longest gap between two firings) plus a cold start's margin; the watchdog is judged on
``WATCHDOG_SCHEDULE`` (what its trigger reads) and fails if it never ticked. In Azure
(``WEBSITE_SITE_NAME``) a maintenance timer that never ticked fails too: it is always registered.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import azure.functions as func

from api import diagnostics_queues, diagnostics_rbac
from api import diagnostics_sections as sections
from api.boundary import authorize, platform_authentication_on, secure
from api.canary import TURN_ON
from api.diagnostics_sections import Row, row
from api.responses import ServicesSource, json_errors, json_response, resolve_services
from supervisor.canary import latest_verdicts
from supervisor.canary.runs import pools_of
from workflow_core import APP_LOGGER, clock, liveness, telemetry_instruments
from workflow_core.schedules import Schedule
from workflow_core.settings import SettingsError, canary_settings, feature_errors

PROBE_INSTANCE = "sas-doctor-probe"
LOGGER_SETTING = "PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME"  # the worker's, read as its otel.py does
ANSWERED_STATUSES = {200, 202, 400, 404}  # a status, or "no such instance": the backend answered
COLD_START_MARGIN = timedelta(seconds=120)
VERDICTS_SHOWN = 5
CANARY_FIXES = {
    "failed": "read the verdict's cause; docs/operations.md 'Recovery canary' says what to check first",
    "stale": "check that the maintenance timer and the watchdog run; `sas canary` lists the runs",
}


def _age(at: str, now: datetime) -> str:
    return f"{int((now - datetime.fromisoformat(at)).total_seconds() // 60)} min ago"


def _last_pass(at: str | None, now: datetime) -> str:
    return f"last passed {_age(at, now)}" if at else "never passed"


def feature_rows(_services: Any) -> list[Row]:
    """A feature (canary, retention, bulk) whose settings do not load is off: a failing row naming it."""
    return [
        row(f"feature {feature}", False, f"{feature} is off: {error}", "fix that app setting")
        for feature, error in feature_errors().items()
    ]


def canary_rows(services: Any) -> list[Row]:
    try:
        canary = canary_settings()
    except SettingsError:  # feature_rows names it
        return []
    if not canary.enabled:
        return [row("canary", None, "the recovery canary is off (CANARY_ENABLED)", TURN_ON)]
    now = clock.utcnow()
    summary = latest_verdicts(
        services.ledger, now=now, period=canary.period, limit=VERDICTS_SHOWN, pools=pools_of(services)
    )
    state = summary["state"]
    if state == "none":
        rows = [row("canary", None, "enabled; no run judged yet (the first verdict takes a period)")]
    else:
        failing = [p["last"]["cause"] for p in summary["pools"].values() if p["state"] == "failed"]
        detail = f"{state}: {_last_pass(summary['last_passed_at'], now)}" + "".join(f"; {c}" for c in failing)
        rows = [row("canary", state == "passed", detail[:400], CANARY_FIXES.get(state, ""))]
    pool_ok = {"passed": True, "failed": False, "stale": False}
    for name, pool in summary["pools"].items():  # each pool on its own: one passing hides no other
        detail = f"{pool['state']}: {_last_pass(pool['last_passed_at'], now)}"
        rows.append(row(f"canary pool {name}", pool_ok.get(pool["state"]), detail))
    newest = {id(p["last"]) for p in summary["pools"].values() if p["last"] is not None}
    for verdict in summary["verdicts"]:
        passed = verdict["outcome"] == "passed"
        ok: bool | None = True if passed else (False if id(verdict) in newest else None)
        what = verdict["observed"] if passed else f"failed: {verdict['cause']}"
        detail = f"{_age(verdict['at'], now)} on pool {verdict['pool']}: {what} ({verdict['instance_id']})"
        rows.append(row(f"canary verdict {verdict['scenario']}", ok, detail[:400]))
    return rows


def circuit_rows(services: Any, agents: dict[str, Any] | None = None) -> list[Row]:
    views = services.circuits.states(agents)
    if not views:
        return [row("circuits", None, "no agent declares limits (workflows/pools.yaml `agents:`)")]
    rows = []
    for view in views:
        text = view.attention_text()
        state = view.circuit.state.value
        ok = True if text is None else (False if state == "open" else None)
        slots = f"{view.in_flight}/{view.max_in_flight}" if view.max_in_flight else f"{view.in_flight}"
        detail = text or f"closed; slots held {slots}, {view.waiting} waiting"
        fix = "" if ok is not False else "see docs/agent-limits.md; `sas circuit close AGENT --reason ...`"
        rows.append(row(f"circuit {view.agent}", ok, detail[:400], fix))
    return rows


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


# The optional features' rows: name -> callable(services) -> rows.
PROVIDERS = {"canary": canary_rows, "circuits": circuit_rows, "features": feature_rows}


def _providers(services: Any) -> list[Row]:
    rows: list[Row] = []
    for name, provider in sorted(PROVIDERS.items()):
        try:
            rows.extend(provider(services))
        except Exception as exc:
            rows.append(row(name, False, f"the {name} provider failed: {type(exc).__name__}", "see the logs"))
    return rows


SECTIONS: tuple[tuple[str, Any], ...] = (
    ("host", sections.host_json),
    ("settings", sections.settings),
    ("identity", sections.identity),
    ("telemetry", lambda s: [*sections.telemetry(s), telemetry_exporter()]),
    ("access", sections.access),
    ("queues", lambda s: [*diagnostics_queues.queues(s), *diagnostics_queues.answer_queues(s)]),
    ("roles", diagnostics_rbac.roles),
    ("timers", timers),
    ("providers", _providers),
)


def collect(services: Any, durable: list[Row] | None = None) -> dict[str, Any]:
    """Every section's rows (``durable``: the Durable round trip's, asked before on the event loop)."""
    body: dict[str, Any] = {"generatedAt": datetime.now(UTC).isoformat(), "sections": {}}
    if durable is not None:
        body["sections"]["durable"] = durable
    for name, section in SECTIONS:
        try:
            rows = section(services)
        except Exception as exc:
            detail = f"the section failed: {type(exc).__name__}: {exc}"[:400]
            rows = [row(name, False, detail, "see logs")]
        body["sections"][name] = rows
    body["failed"] = sum(1 for rows in body["sections"].values() for r in rows if r["ok"] is False)
    body["ok"] = body["failed"] == 0
    return body


@json_errors
async def diagnostics(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    # Behind platform authentication: the operator role; otherwise the function key (or loopback).
    authorize(req, action=platform_authentication_on())
    svc = resolve_services(services)
    durable = [await durable_backend(client)]
    body = await asyncio.to_thread(collect, svc, durable)
    return secure(json_response(body))
