"""The recovery canary's verifier: judge finished (or overdue) ``sas-canary`` and ``sas-canary-echo``
runs from their audit trails, record each verdict once as a ledger row in the run's own partition, and
emit metrics.

:func:`verify_runs` is what the canary timer calls; :func:`latest_verdicts` is what ``sas doctor``,
``GET /api/canary`` and the console badge read. Canary runs are ordinary instances of the canary
workflows, so retention purges them like any finished instance.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from opentelemetry import metrics

from workflow_core import clock, telemetry_instruments
from workflow_core.canary import (
    CANARY_WORKFLOW,
    CANARY_WORKFLOWS,
    SCENARIOS,
    expected_recovery_seconds,
    judge,
)
from workflow_core.canary.scenarios import PROBE
from workflow_core.ledger import StepNotFound, decode_json
from workflow_core.messages import stored_input
from workflow_core.workflows import get_workflow
from workflow_core.workflows.loader import agent_pools
from workflow_core.workflows.pools import DEFAULT_POOL, route_pool

VERDICT_ACTION = "canary-verdict"
ACTOR = "supervisor:canary"
RUNS_METRIC = "sas.canary.runs"
RECOVERY_METRIC = "sas.canary.recovery_seconds"
DEFAULT_PERIOD = timedelta(hours=1)
MAX_FIELD = 1000  # the verdict row is one audit reason (at most 4000 characters): keep its JSON whole


@dataclass(frozen=True)
class Verdict:
    instance_id: str
    scenario: str
    pool: str
    outcome: str  # passed | failed
    expected: str
    observed: str
    expected_seconds: float
    recovery_seconds: float | None
    cause: str
    at: str


def _instruments() -> tuple[Any, Any]:
    provider = telemetry_instruments._meter_provider or metrics.get_meter_provider()
    meter = provider.get_meter(telemetry_instruments.INSTRUMENTATION_NAME)
    runs = meter.create_counter(RUNS_METRIC, unit="{run}", description="Canary runs judged, by outcome")
    recovery = meter.create_histogram(
        RECOVERY_METRIC, unit="s", description="Seconds a canary run took from start to recovered end"
    )
    return runs, recovery


def _events_text(events: Any) -> str:
    return ", ".join(f"{step}:{status}" for step, status in events)


def _input_of(record: Any) -> dict[str, Any]:
    try:
        value = decode_json(record.input_ref) if record.input_ref else {}
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _recorded(ledger: Any, instance_id: str) -> dict[str, Any] | None:
    for entry in ledger.audit_trail(instance_id):
        if entry.action == VERDICT_ACTION:
            try:
                found = json.loads(entry.reason)
            except ValueError:  # written by hand or cut short: still a verdict, shown as unreadable
                found = None
            if isinstance(found, dict) and {"outcome", "at"} <= found.keys():
                return found
            return {
                "instance_id": instance_id,
                "outcome": "failed",
                "at": entry.at.isoformat(),
                "scenario": "",
                "pool": "",
                "expected": "",
                "observed": "",
                "expected_seconds": 0,
                "recovery_seconds": None,
                "cause": "unreadable verdict row",
            }
    return None


def exercised_pool(
    ledger: Any, instance_id: str, given: dict[str, Any], workflow: str = CANARY_WORKFLOW
) -> str:
    """The pool the run's probe was sent to: dispatch's rule (``route_pool``) applied to the probe step's
    input as the ledger stores it, so a verdict names where the work went, not what was asked."""
    try:
        probe = ledger.get(instance_id, PROBE)
    except StepNotFound:
        return str(given.get("pool") or DEFAULT_POOL)
    body = {"workflow": workflow, "agent": probe.agent, "kind": "work", "input": stored_input(probe)}
    return route_pool(agent_pools(), body)


def canary_records(ledger: Any, limit: int) -> list[Any]:
    """The newest ``limit`` runs of every canary workflow (``sas-canary``, ``sas-canary-echo``), newest
    first: one listing query per workflow."""
    records = [r for name in CANARY_WORKFLOWS for r in ledger.list_instances(workflow=name, limit=limit)[0]]
    records.sort(key=lambda r: r.started_at.timestamp() if r.started_at else 0.0, reverse=True)
    return records[:limit]


def verify_runs(
    ledger: Any, *, watchdog_period: float, grace: float, now: datetime | None = None, limit: int = 20
) -> list[Verdict]:
    """Judge the newest ``limit`` canary runs not yet judged; record and return the new verdicts
    (a run still within its expected recovery time is left for a later pass)."""
    now = now or clock.utcnow()
    new: list[Verdict] = []
    for record in canary_records(ledger, limit):
        if _recorded(ledger, record.instance_id) is not None:
            continue
        given = _input_of(record)
        scenario = record.business_key or str(given.get("scenario", ""))
        if scenario not in SCENARIOS:
            continue
        expected = expected_recovery_seconds(
            scenario, watchdog_period=watchdog_period, grace=grace, workflow_name=record.workflow
        )
        trail = ledger.audit_trail(record.instance_id)
        started = next((a.at for a in trail if a.action == "instance-created"), record.started_at)
        agents = sorted(get_workflow(record.workflow).agents_used())
        seen = judge(scenario, trail, expected_seconds=expected, now=now, started_at=started, agents=agents)
        if seen.outcome == "pending":
            continue
        spec = SCENARIOS[scenario]
        pool = exercised_pool(ledger, record.instance_id, given, record.workflow)
        verdict = Verdict(
            instance_id=record.instance_id,
            scenario=scenario,
            pool=pool,
            outcome=seen.outcome,
            expected=f"{spec.recovery}: {_events_text(spec.expected_events)} -> {spec.outcome}",
            observed=seen.observed[:MAX_FIELD],
            expected_seconds=expected,
            recovery_seconds=seen.recovery_seconds,
            cause=(f"pool {pool!r}: {seen.cause}" if seen.cause else "")[:MAX_FIELD],
            at=now.isoformat(),
        )
        reason = json.dumps(asdict(verdict))
        ledger.note(record.instance_id, "*", actor=ACTOR, action=VERDICT_ACTION, reason=reason)
        runs, recovery = _instruments()
        runs.add(1, {"outcome": verdict.outcome, "scenario": scenario, "pool": verdict.pool})
        if verdict.recovery_seconds is not None:
            recovery.record(verdict.recovery_seconds, {"scenario": scenario, "pool": verdict.pool})
        new.append(verdict)
    return new


def _state(verdicts: list[dict[str, Any]], now: datetime, period: timedelta) -> tuple[str, str | None]:
    """(state, last pass) of verdicts newest first: ``failed`` when the newest failed, ``stale`` when
    none passed within two periods, ``passed`` otherwise, ``none`` without a verdict."""
    passed = [v["at"] for v in verdicts if v["outcome"] == "passed"]
    last_passed = max(passed) if passed else None
    if not verdicts:
        return "none", None
    if verdicts[0]["outcome"] == "failed":
        return "failed", last_passed
    if last_passed is None or now - datetime.fromisoformat(last_passed) > 2 * period:
        return "stale", last_passed
    return "passed", last_passed


def latest_verdicts(
    ledger: Any,
    *,
    now: datetime | None = None,
    period: timedelta = DEFAULT_PERIOD,
    limit: int = 10,
    pools: Sequence[str] = (),
) -> dict[str, Any]:
    """``{state, last_passed_at, verdicts, pools}`` for operators. ``pools`` maps each canary pool (those
    given, plus any a verdict names) to its own ``{state, last_passed_at, last}``, from that pool's
    verdicts alone. The overall state is the worst pool's: ``failed`` when any pool's newest verdict
    failed (another pool passing does not hide it), ``stale`` when a pool that has verdicts has none
    passed within two periods (or a given pool has none at all while others' go back two periods),
    ``passed`` otherwise (``none`` without any verdict). ``limit`` runs are
    read per pool, so a tick that starts one run per pool shows ``limit`` ticks."""
    now = now or clock.utcnow()
    records = canary_records(ledger, limit * max(1, len(pools)))
    verdicts = [v for v in (_recorded(ledger, r.instance_id) for r in records) if v is not None]
    verdicts.sort(key=lambda v: v["at"], reverse=True)
    names = list(dict.fromkeys([*pools, *(str(v.get("pool") or "") for v in verdicts)]))
    per_pool: dict[str, Any] = {}
    # the canary has run for two periods when a verdict that old was read: from then on a pool without
    # any verdict (its runs never start, or are never judged) is stale, not merely new
    running_long = bool(verdicts) and now - datetime.fromisoformat(verdicts[-1]["at"]) > 2 * period
    for name in names:
        mine = [v for v in verdicts if str(v.get("pool") or "") == name]
        state, last_passed = _state(mine, now, period)
        if state == "none" and running_long:
            state = "stale"
        per_pool[name or "?"] = {
            "state": state,
            "last_passed_at": last_passed,
            "last": mine[0] if mine else None,
        }
    states = {p["state"] for p in per_pool.values()}
    overall, last_passed = _state(verdicts, now, period)
    if overall != "none":
        overall = next((s for s in ("failed", "stale") if s in states), "passed")
    return {"state": overall, "last_passed_at": last_passed, "verdicts": verdicts, "pools": per_pool}
