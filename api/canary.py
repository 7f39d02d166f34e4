"""The recovery canary's timer and ``GET /api/canary`` (docs/operations.md, "Recovery canary").

The ``canary`` timer (``CANARY_SCHEDULE``, default hourly; does nothing unless ``CANARY_ENABLED`` is
true, which ``infra/`` sets) first judges earlier runs (``supervisor.canary.verify_runs``) and counts
the pools gone stale (``supervisor.canary.stale``: the per-pool alert's metric), then starts one run
per canary pool (``workflow_core.canary.canary_pools``: every hosted pool and every pool that opts in)
through the same starter as ``POST /api/workflows/{name}/instances``, the scenario rotating with the
period (each pool gets the same scenario in a tick): of ``sas-canary``, or of ``sas-canary-echo`` in a
message-only pool that opts in (``workflow_core.canary.canary_workflow_of``).
The scheduler-lost scenario is made here: its orchestration is
terminated as soon as it is started, so the watchdog must resume it from the ledger.
"""

# No ``from __future__ import annotations``: the worker reads the timer function's annotations.
import asyncio
import json
import logging
import os
from datetime import datetime, timedelta
from typing import Any

import azure.durable_functions as df
import azure.functions as func

from api.responses import (
    ApiError,
    ServicesSource,
    json_errors,
    json_object_body,
    json_response,
    resolve_services,
)
from api.start import start_workflow
from supervisor.canary import latest_verdicts, verify_runs
from supervisor.canary.stale import report_stale_pools
from workflow_core import clock, runtime
from workflow_core.canary import (
    CANARY_ECHO_WORKFLOW,
    SCENARIOS,
    canary_pool,
    canary_pools,
    canary_workflow_of,
    echo_input,
    scenario_named,
)
from workflow_core.workflows.loader import agent_pools

log = logging.getLogger(__name__)
blueprint = df.Blueprint()

DEFAULT_SCHEDULE = "0 0 * * * *"  # hourly (NCRONTAB, with seconds)
PERIOD = timedelta(hours=1)  # the default schedule's period: the rotation and the staleness unit
MAX_LIMIT = 50
TERMINATE_REASON = "canary scheduler-lost: terminated on purpose"


def canary_enabled(env: Any = None) -> bool:
    return str((env or os.environ).get("CANARY_ENABLED", "false")).strip().lower() in {"1", "true", "yes"}


def period_of(env: Any = None) -> timedelta:
    """``CANARY_PERIOD_SECONDS`` when set (match it to ``CANARY_SCHEDULE``), else one hour."""
    raw = (env or os.environ).get("CANARY_PERIOD_SECONDS")
    try:
        return timedelta(seconds=float(raw)) if raw else PERIOD
    except ValueError:
        return PERIOD


def scenario_for(now: datetime, period: timedelta = PERIOD) -> str:
    """The scenario of the run started at ``now``: each period the next one, round the table."""
    names = list(SCENARIOS)
    return names[int(now.timestamp() // period.total_seconds()) % len(names)]


def pools_of(services: ServicesSource) -> list[str]:
    """The pools a canary tick exercises (hosted ones and those that opt in)."""
    return canary_pools(agent_pools(), resolve_services(services).settings.hosted_pools)


def workflow_of(services: ServicesSource, pool: str) -> str:
    """The canary definition that exercises ``pool`` (``sas-canary-echo`` in an opted-in message-only one)."""
    return canary_workflow_of(agent_pools(), pool, resolve_services(services).settings.hosted_pools)


async def start_canary_run(
    client: Any, services: ServicesSource, scenario: str, pool: str | None = None
) -> str:
    """Start one canary run now (the real starter, so the run is an ordinary instance); its id. The run
    exercises ``pool`` (one of :func:`pools_of`; unset: the pool ``workflows/pools.yaml`` routes the
    canary's agents to, ``default`` unless one lists them)."""
    scenario_named(scenario)  # a clear error for an unknown one
    pool = canary_pool() if pool is None else pool
    if pool not in (allowed := pools_of(services)):
        raise ValueError(f"pool {pool!r} does not serve the canary; canary pools: {', '.join(allowed)}")
    workflow = workflow_of(services, pool)
    given = (
        echo_input(scenario, pool)
        if workflow == CANARY_ECHO_WORKFLOW
        else {"scenario": scenario, "pool": pool}
    )
    request = func.HttpRequest(
        "POST",
        f"/api/workflows/{workflow}/instances",
        headers={"Content-Type": "application/json", "X-SAS-Client": "canary"},
        params={},
        route_params={"name": workflow},
        body=json.dumps(given).encode(),
    )
    # The starter itself, inside the door (json_errors' admit): the timer is the app calling itself,
    # not an HTTP caller with an identity to check. Validation, pinning and the ledger record are the same.
    try:
        response = await start_workflow.__wrapped__(request, client, services)
    except ApiError as exc:
        raise RuntimeError(f"the canary could not start: {exc}") from exc
    body = json.loads(response.get_body() or b"{}")
    if response.status_code != 202:
        raise RuntimeError(f"the canary could not start: {response.status_code} {body}")
    instance_id = body["instanceId"]
    if scenario == "scheduler-lost":
        await client.terminate(instance_id, TERMINATE_REASON)
    return instance_id


async def canary_tick(
    client: Any, services: ServicesSource, *, now: datetime | None = None
) -> dict[str, Any]:
    """One timer run: judge earlier runs, then start the next scenario in every canary pool. What it did
    (``started``: one instance id per pool, in :func:`pools_of` order)."""
    svc = resolve_services(services)
    now = now or clock.utcnow()
    settings = svc.settings
    watchdog_period = _watchdog_period_seconds(settings.watchdog_schedule)
    pools = pools_of(services)
    judged = await asyncio.to_thread(
        verify_runs,
        svc.ledger,
        watchdog_period=watchdog_period,
        grace=settings.watchdog_grace_seconds,
        now=now,
        limit=max(20, 4 * len(pools)),  # four ticks' runs: many pools must not leave runs unjudged
    )
    stale = await asyncio.to_thread(report_stale_pools, svc.ledger, pools, now=now, period=period_of())
    scenario = scenario_for(now, period_of())
    started: dict[str, str] = {}
    for pool in pools:
        try:
            started[pool] = await start_canary_run(client, services, scenario, pool)
        except RuntimeError as exc:  # one pool's start failing must not keep the others from running
            log.warning("canary: could not start %s in pool %s: %s", scenario, pool, exc)
    return {
        "started": started,
        "scenario": scenario,
        "judged": [v.instance_id for v in judged],
        "stale": sorted(stale),
    }


def _watchdog_period_seconds(schedule: str) -> float:
    """The watchdog's period from its NCRONTAB: ``*/N`` in the seconds or minutes field, else 60 s."""
    fields = (schedule or "").split()
    if len(fields) == 6:
        for value, unit in ((fields[0], 1), (fields[1], 60)):
            if value.startswith("*/") and value[2:].isdigit():
                return float(value[2:]) * unit
    return 60.0


@blueprint.timer_trigger(arg_name="timer", schedule="%CANARY_SCHEDULE%", use_monitor=True)
@blueprint.durable_client_input(client_name="client")
async def canary(timer: func.TimerRequest, client: df.DurableOrchestrationClient) -> None:
    """Timer trigger: one :func:`canary_tick` when ``CANARY_ENABLED``."""
    if not canary_enabled():
        return
    done = await canary_tick(client, runtime.get_services)
    log.info("canary: %s", done)


@json_errors
async def get_canary(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    """``GET /api/canary``: the state (passed, failed, stale, none), the last pass, the newest verdicts."""
    raw = req.params.get("limit", "10")
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise ApiError(400, f"limit must be a whole number from 1 to {MAX_LIMIT}", code="invalid-filter")
    svc = resolve_services(services)
    pools = pools_of(svc)
    body = await asyncio.to_thread(
        latest_verdicts, svc.ledger, period=period_of(), limit=int(raw), pools=pools
    )
    now = clock.utcnow().isoformat()  # the badge counts minutes on the server's clock, not the browser's
    return json_response({**body, "enabled": canary_enabled(), "now": now})


@json_errors
async def run_canary(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    """``POST /api/canary/runs`` ``{"scenario": ..., "pool": ...}``: start one canary run now (an operator
    action); ``pool`` (optional) is one of the canary pools (``GET /api/canary``'s ``pools``)."""
    body = json_object_body(req)
    unknown = sorted(set(body) - {"scenario", "pool"})
    scenario, pool = body.get("scenario"), body.get("pool")
    allowed = pools_of(services)
    problems = [f"unknown field {name!r}" for name in unknown[:5]]
    if not isinstance(scenario, str) or scenario not in SCENARIOS:
        problems.append(f"scenario must be one of {', '.join(SCENARIOS)}")
    if pool is not None and (not isinstance(pool, str) or pool not in allowed):
        problems.append(f"pool must be one of the canary pools: {', '.join(allowed)}")
    if problems:
        raise ApiError(400, "invalid canary run", problems, code="invalid-input")
    instance_id = await start_canary_run(client, services, scenario, pool)
    pool = pool or canary_pool()
    body = {
        "instanceId": instance_id,
        "scenario": scenario,
        "pool": pool,
        "workflow": workflow_of(services, pool),
    }
    return json_response(body, status_code=202)
