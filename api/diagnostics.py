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
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import azure.functions as func

from api import diagnostics_queues, diagnostics_rbac, diagnostics_runtime
from api import diagnostics_sections as sections
from api.boundary import authorize, platform_authentication_on, secure
from api.canary import TURN_ON
from api.diagnostics_sections import Row, row
from api.responses import ServicesSource, json_errors, json_response, resolve_services
from supervisor.canary import latest_verdicts
from supervisor.canary.runs import pools_of
from workflow_core import clock
from workflow_core.feature_settings import canary_settings, feature_errors
from workflow_core.settings import SettingsError

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
    ("telemetry", lambda s: [*sections.telemetry(s), diagnostics_runtime.telemetry_exporter()]),
    ("access", sections.access),
    ("queues", lambda s: [*diagnostics_queues.queues(s), *diagnostics_runtime.answer_queues(s)]),
    ("roles", diagnostics_rbac.roles),
    ("timers", diagnostics_runtime.timers),
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
    durable = [await diagnostics_runtime.durable_backend(client)]
    body = await asyncio.to_thread(collect, svc, durable)
    return secure(json_response(body))
