"""The recovery canary's tick and its runs (docs/operations.md, "Recovery canary").

:func:`canary_tick` (the maintenance timer, when ``CANARY_SCHEDULE`` is due) reads the newest runs
once, judges the finished ones and counts the stale pools, then, when ``CANARY_ENABLED``, starts one
run per canary pool through the one starter, the scenario rotating with the period. With the canary
off it still judges runs started by hand (``sas canary run``). The scheduler-lost scenario's
orchestration is terminated as soon as it starts, so the watchdog must resume it from the ledger.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from azure.core.exceptions import AzureError

from supervisor.canary import latest_verdicts, read_runs, verify_runs
from workflow_core import clock, telemetry_instruments
from workflow_core.canary import (
    CANARY_ECHO_WORKFLOW,
    SCENARIOS,
    canary_pool,
    canary_pools,
    canary_workflow_of,
    echo_input,
    scenario_named,
)
from workflow_core.runtime import Services
from workflow_core.schedules import Schedule
from workflow_core.settings import CanarySettings
from workflow_core.starter import StartRefused, start_instance
from workflow_core.workflows.loader import agent_pools

log = logging.getLogger(__name__)
TERMINATE_REASON = "canary scheduler-lost: terminated on purpose"
SHOWN = 10  # verdicts per pool the stale count reads, as GET /api/canary's default


def scenario_for(now: datetime, period: timedelta) -> str:
    """The scenario of the run started at ``now``: each period the next one, round the table."""
    names = list(SCENARIOS)
    return names[int(now.timestamp() // period.total_seconds()) % len(names)]


def pools_of(services: Services) -> list[str]:
    """The pools a canary tick exercises (hosted ones and those that opt in)."""
    return canary_pools(agent_pools(), services.settings.hosted_pools)


def workflow_of(services: Services, pool: str) -> str:
    """The canary definition that exercises ``pool`` (``sas-canary-echo`` in an opted-in message-only one)."""
    return canary_workflow_of(agent_pools(), pool, services.settings.hosted_pools)


async def start_canary_run(client: Any, services: Services, scenario: str, pool: str | None = None) -> str:
    """Start one canary run now through the one starter (raising ``StartRefused`` as it does); its id.
    It exercises ``pool`` (one of :func:`pools_of`; unset: where ``workflows/pools.yaml`` routes it)."""
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
    instance_id = await start_instance(client, services, workflow, given, actor="supervisor:canary")
    if scenario == "scheduler-lost":
        await client.terminate(instance_id, TERMINATE_REASON)
    return instance_id


def report_stale_pools(summary: dict[str, Any], pools: Sequence[str]) -> dict[str, str | None]:
    """Count each stale canary pool of ``summary`` once in ``sas.canary.stale_pools``; ``{pool: last
    passed at}`` of those. A pool whose runs never start or are never judged leaves no
    ``sas.canary.runs`` row: ``canaryPoolStaleAlert`` (``infra/modules/canary-alerts.bicep``) fires on
    this metric instead."""
    stale = {
        name: state["last_passed_at"]
        for name, state in summary["pools"].items()
        if name in pools and state["state"] == "stale"
    }
    counter = telemetry_instruments.current().canary_stale_pools
    for name in stale:
        counter.add(1, {"pool": name})
    return stale


def watchdog_period_seconds(schedule: str) -> float:
    """The watchdog's period from its NCRONTAB (60 s when it has none)."""
    try:
        return Schedule.parse(schedule).period().total_seconds()
    except ValueError:
        return 60.0


async def canary_tick(
    services: Services, client: Any, canary: CanarySettings, now: datetime | None = None
) -> dict[str, Any]:
    """One canary pass: judge runs and count stale pools, then (when enabled) start one run per pool."""
    now = now or clock.utcnow()
    settings = services.settings
    pools = pools_of(services)
    # one read for both: a run is judged within minutes, well inside the stale count's ten periods
    runs = await asyncio.to_thread(read_runs, services.ledger, SHOWN * max(1, len(pools)))
    judged = await asyncio.to_thread(
        verify_runs,
        services.ledger,
        watchdog_period=watchdog_period_seconds(settings.watchdog_schedule),
        grace=settings.watchdog_grace_seconds,
        now=now,
        runs=runs,
    )
    summary = latest_verdicts(services.ledger, now=now, period=canary.period, pools=pools, runs=runs)
    stale = report_stale_pools(summary, pools) if canary.enabled else {}
    scenario = scenario_for(now, canary.period)
    started: dict[str, str] = {}
    for pool in pools if canary.enabled else ():
        try:
            started[pool] = await start_canary_run(client, services, scenario, pool)
        except (StartRefused, AzureError) as exc:  # one pool's failing start must not stop the others
            log.warning("canary: could not start %s in pool %s: %s", scenario, pool, exc)
    return {
        "started": started,
        "scenario": scenario,
        "judged": [v.instance_id for v in judged],
        "stale": sorted(stale),
    }
