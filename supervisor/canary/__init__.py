"""The recovery canary's verifier: judge finished (or overdue) canary runs from their audit trails,
record each verdict once as a ledger row in the run's own partition, and emit metrics.

:func:`read_runs` reads the newest runs once for a whole pass, shared by :func:`verify_runs` and
:func:`latest_verdicts`, each audit trail at most once and never again once this process has seen
the run's verdict (it never changes). The timer and the starter are in :mod:`supervisor.canary.runs`.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from workflow_core import clock, telemetry_instruments
from workflow_core.canary import (
    CANARY_WORKFLOW,
    CANARY_WORKFLOWS,
    PROBE,
    SCENARIOS,
    expected_recovery_seconds,
    judge,
)
from workflow_core.ledger import StepNotFound, decode_json
from workflow_core.messages import stored_input
from workflow_core.workflows import get_workflow
from workflow_core.workflows.loader import agent_pools
from workflow_core.workflows.pools import DEFAULT_POOL, route_pool

VERDICT_ACTION = "canary-verdict"
ACTOR = "supervisor:canary"
DEFAULT_PERIOD = timedelta(hours=1)
MAX_FIELD = 1000  # the verdict row is one audit reason (at most 4000 characters): keep its JSON whole
MEMORY = 1000  # verdicts remembered per ledger: far more than the listing windows read


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


def _events_text(events: Any) -> str:
    return ", ".join(f"{step}:{status}" for step, status in events)


def _input_of(record: Any) -> dict[str, Any]:
    try:
        value = decode_json(record.input_ref) if record.input_ref else {}
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _recorded(trail: Sequence[Any], instance_id: str) -> dict[str, Any] | None:
    """The verdict row in a run's audit trail, if any."""
    for entry in trail:
        if entry.action == VERDICT_ACTION:
            try:
                found = json.loads(entry.reason)
            except ValueError:  # written by hand or cut short: still a verdict, shown as unreadable
                found = None
            if isinstance(found, dict) and {"outcome", "at"} <= found.keys():
                return found
            unreadable = Verdict(instance_id, "", "", "failed", "", "", 0, None, "unreadable verdict row", "")
            return {**asdict(unreadable), "at": entry.at.isoformat()}
    return None


@dataclass
class Run:
    record: Any  # its InstanceRecord
    verdict: dict[str, Any] | None
    trail: list[Any] | None  # read when no verdict was remembered


# ledger -> {instance id: verdict}, oldest first: what this process has seen judged
_judged: weakref.WeakKeyDictionary[Any, dict[str, dict[str, Any]]] = weakref.WeakKeyDictionary()


def _remember(ledger: Any, instance_id: str, verdict: dict[str, Any]) -> None:
    known = _judged.setdefault(ledger, {})
    known[instance_id] = verdict
    while len(known) > MEMORY:
        known.pop(next(iter(known)))


def exercised_pool(
    ledger: Any, instance_id: str, given: dict[str, Any], workflow: str = CANARY_WORKFLOW
) -> str:
    """The pool the run's probe was sent to (``route_pool`` on the stored probe input), not what was asked."""
    try:
        probe = ledger.get(instance_id, PROBE)
    except StepNotFound:
        return str(given.get("pool") or DEFAULT_POOL)
    body = {"workflow": workflow, "agent": probe.agent, "kind": "work", "input": stored_input(probe)}
    return route_pool(agent_pools(), body)


def canary_records(ledger: Any, limit: int) -> list[Any]:
    """The newest ``limit`` runs of the canary workflows, newest first (one query per workflow)."""
    records = [r for name in CANARY_WORKFLOWS for r in ledger.list_instances(workflow=name, limit=limit)[0]]
    records.sort(key=lambda r: r.started_at.timestamp() if r.started_at else 0.0, reverse=True)
    return records[:limit]


def read_runs(ledger: Any, limit: int) -> list[Run]:
    """The newest ``limit`` canary runs with their verdicts (an audit trail read for each not yet seen)."""
    known = _judged.get(ledger, {})
    runs = []
    for record in canary_records(ledger, limit):
        verdict = known.get(record.instance_id)
        trail = None if verdict is not None else ledger.audit_trail(record.instance_id)
        if trail is not None and (verdict := _recorded(trail, record.instance_id)) is not None:
            _remember(ledger, record.instance_id, verdict)
        runs.append(Run(record, verdict, trail))
    return runs


def verify_runs(
    ledger: Any,
    *,
    watchdog_period: float,
    grace: float,
    now: datetime | None = None,
    limit: int = 20,
    runs: list[Run] | None = None,
) -> list[Verdict]:
    """Judge the newest ``limit`` canary runs (or ``runs``) not yet judged; record and return the new
    verdicts (a run still within its expected recovery time waits for a later pass)."""
    now = now or clock.utcnow()
    instruments = telemetry_instruments.current()
    new: list[Verdict] = []
    for run in read_runs(ledger, limit) if runs is None else runs:
        record = run.record
        if run.verdict is not None or run.trail is None:
            continue
        given = _input_of(record)
        scenario = record.business_key or str(given.get("scenario", ""))
        if scenario not in SCENARIOS:
            continue
        expected = expected_recovery_seconds(
            scenario, watchdog_period=watchdog_period, grace=grace, workflow_name=record.workflow
        )
        trail = run.trail
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
        run.verdict = asdict(verdict)
        _remember(ledger, record.instance_id, run.verdict)
        instruments.canary_runs.add(1, {"outcome": verdict.outcome, "scenario": scenario, "pool": pool})
        if verdict.recovery_seconds is not None:
            instruments.canary_recovery.record(verdict.recovery_seconds, {"scenario": scenario, "pool": pool})
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
    runs: list[Run] | None = None,
) -> dict[str, Any]:
    """``{state, last_passed_at, verdicts, pools}`` for operators; ``pools`` maps each canary pool (given
    or named by a verdict) to its own ``{state, last_passed_at, last}``. The overall state is the worst
    pool's (a pool passing never hides another's failure); a given pool without verdicts is stale once
    others' go back two periods. ``limit`` runs are read per pool (``runs``: already read)."""
    now = now or clock.utcnow()
    runs = read_runs(ledger, limit * max(1, len(pools))) if runs is None else runs
    verdicts = [dict(r.verdict) for r in runs if r.verdict is not None]
    verdicts.sort(key=lambda v: v["at"], reverse=True)
    names = list(dict.fromkeys([*pools, *(str(v.get("pool") or "") for v in verdicts)]))
    per_pool: dict[str, Any] = {}
    # once a verdict two periods old was read, a pool without any verdict is stale, not merely new
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
