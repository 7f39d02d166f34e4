"""A canary run's verdict, read from its audit trail alone (the ledger is the only truth).

Passed when the scenario's expected audit events happened in order, the run ended as expected, and
it took no longer than the stated bound. Otherwise the verdict names what was missing and the cause
that usually explains it (the scenario's ``cause_if_missing``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from workflow_core.canary.scenarios import scenario_named
from workflow_core.ledger.model import AuditEntry

TERMINAL = {"Succeeded", "Failed", "Compensated", "CompensationFailed", "Cancelled", "Stopped"}


@dataclass(frozen=True)
class Observation:
    outcome: str  # "passed" | "failed" | "pending"
    observed: str  # what the audit trail shows, for people
    recovery_seconds: float | None
    cause: str = ""


def _events(trail: Sequence[AuditEntry]) -> list[tuple[str, str]]:
    return [(a.step_id, a.to_status or "") for a in trail if a.action == "transition"]


def _in_order(wanted: Sequence[tuple[str, str]], seen: Sequence[tuple[str, str]]) -> tuple[str, str] | None:
    """The first wanted event not found after its predecessor (None: all found in order)."""
    it = iter(seen)
    for want in wanted:
        if not any(step in (want[0], "*") and status == want[1] for step, status in it):
            return want
    return None


def _likely_cause(spec: Any, seen: Sequence[tuple[str, str]], agents: Sequence[str]) -> str:
    """The scenario's usual cause, unless the trail names a plainer one: attempts were dispatched but no
    agent ever took one (no step ever Running), which is a pool without a (running) agent."""
    dispatched = any(status in ("Dispatched", "Compensating") for _, status in seen)
    if dispatched and not any(status == "Running" for _, status in seen):
        serving = f" serving {', '.join(agents)}" if agents else ""
        return (
            "no agent took any attempt (dispatched, never running): "
            f"does the pool have a running agent{serving}?"
        )
    return spec.cause_if_missing


def judge(
    scenario: str,
    trail: Sequence[AuditEntry],
    *,
    expected_seconds: float,
    now: datetime,
    started_at: datetime,
    agents: Sequence[str] = (),
) -> Observation:
    """``agents``: the run's agents, named in a cause when no agent took any attempt."""
    spec = scenario_named(scenario)
    end = next((a for a in trail if a.action == "instance-transition" and a.to_status in TERMINAL), None)
    seen = _events(trail)
    summary = ", ".join(f"{s}:{t}" for s, t in seen if t) or "no step moved"
    if end is None:
        waited = (now - started_at).total_seconds()
        if waited <= expected_seconds:
            return Observation("pending", summary, None)
        missing = _in_order(spec.expected_events, seen)
        what = f"missing {missing[0]} {missing[1]}" if missing else "the run never ended"
        return Observation(
            "failed",
            summary,
            None,
            f"not recovered within {expected_seconds:.0f}s ({what}): {_likely_cause(spec, seen, agents)}",
        )
    took = (end.at - started_at).total_seconds()
    missing = _in_order(spec.expected_events, seen)
    if missing is not None:
        cause = f"expected {missing[0]} {missing[1]} did not happen: {_likely_cause(spec, seen, agents)}"
        return Observation("failed", summary, took, cause)
    resumed = any(a.action == "recovery" and a.reason.startswith("resume_instance") for a in trail)
    if spec.name == "scheduler-lost" and not resumed:
        return Observation("failed", summary, took, f"no watchdog resume recorded: {spec.cause_if_missing}")
    if end.to_status.lower() != spec.outcome:
        cause = f"run ended {end.to_status}, expected {spec.outcome}: {_likely_cause(spec, seen, agents)}"
        return Observation("failed", summary, took, cause)
    if took > expected_seconds:
        cause = (
            f"recovered in {took:.0f}s, over the {expected_seconds:.0f}s bound: "
            "is the watchdog late or the pool slow?"
        )
        return Observation("failed", summary, took, cause)
    return Observation("passed", summary, took)
