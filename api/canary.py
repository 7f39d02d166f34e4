"""``GET /api/canary`` and ``POST /api/canary/runs``: the recovery canary over HTTP (docs/operations.md,
"Recovery canary"; the canary itself is :mod:`supervisor.canary`)."""

from __future__ import annotations

import asyncio
from typing import Any

import azure.functions as func

from api.handlers import refused
from api.responses import (
    ApiError,
    ServicesSource,
    json_errors,
    json_object_body,
    json_response,
    resolve_services,
)
from supervisor.canary import DEFAULT_PERIOD, latest_verdicts
from supervisor.canary.runs import pools_of, start_canary_run, workflow_of
from workflow_core import clock
from workflow_core.canary import SCENARIOS, canary_pool
from workflow_core.settings import SettingsError, canary_settings
from workflow_core.starter import StartRefused

MAX_LIMIT = 50
TURN_ON = (
    "set the app setting CANARY_ENABLED=true (Bicep parameter canaryEnabled): the canary then starts runs "
    "each CANARY_SCHEDULE period, hourly by default; `sas canary run --scenario retry` starts one run now"
)


@json_errors
async def get_canary(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    """``GET /api/canary``: the state (passed, failed, stale, none; ``off`` with ``how_to_enable`` when
    the canary is off or its settings are invalid), the last pass, the newest verdicts."""
    raw = req.params.get("limit", "10")
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise ApiError(400, f"limit must be a whole number from 1 to {MAX_LIMIT}", code="invalid-filter")
    svc = resolve_services(services)
    try:
        canary = canary_settings()
        period, enabled, off = canary.period, canary.enabled, None if canary.enabled else TURN_ON
    except SettingsError as exc:
        period, enabled, off = DEFAULT_PERIOD, False, f"fix the canary's settings ({exc}), then {TURN_ON}"
    pools = pools_of(svc)
    body = await asyncio.to_thread(latest_verdicts, svc.ledger, period=period, limit=int(raw), pools=pools)
    if off is not None:
        body = {**body, "state": "off", "how_to_enable": off}
    now = clock.utcnow().isoformat()  # the badge counts minutes on the server's clock, not the browser's
    return json_response({**body, "enabled": enabled, "now": now})


@json_errors
async def run_canary(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    """``POST /api/canary/runs`` ``{"scenario": ..., "pool": ...}``: start one canary run now (an operator
    action); ``pool`` (optional) is one of the canary pools (``GET /api/canary``'s ``pools``). The
    maintenance timer judges it at the canary's next period, whether the canary is on or off."""
    body = json_object_body(req)
    unknown = sorted(set(body) - {"scenario", "pool"})
    scenario, pool = body.get("scenario"), body.get("pool")
    svc = resolve_services(services)
    allowed = pools_of(svc)
    problems = [f"unknown field {name!r}" for name in unknown[:5]]
    if not isinstance(scenario, str) or scenario not in SCENARIOS:
        problems.append(f"scenario must be one of {', '.join(SCENARIOS)}")
    if pool is not None and (not isinstance(pool, str) or pool not in allowed):
        problems.append(f"pool must be one of the canary pools: {', '.join(allowed)}")
    if problems:
        raise ApiError(400, "invalid canary run", problems, code="invalid-input")
    try:
        instance_id = await start_canary_run(client, svc, scenario, pool)
    except StartRefused as exc:
        raise refused(exc) from None
    pool = pool or canary_pool()
    answer = {
        "instanceId": instance_id,
        "scenario": scenario,
        "pool": pool,
        "workflow": workflow_of(svc, pool),
    }
    return json_response(answer, status_code=202)
