"""Which steps their agent's limits hold back, read off the ledger: a step whose *next* attempt the
dispatch noted ``waiting`` (one audit note when it joined the queue) and that has not started it."""

from __future__ import annotations

from collections.abc import Iterable

from workflow_core.ledger import AuditEntry, StepRecord

WAITING_ACTION = "waiting"  # the dispatch's audit note (activities.scheduler.limits_gate)
_NOT_STARTED = ("Pending", "Retrying")


def waiting_steps(steps: Iterable[StepRecord], audit: Iterable[AuditEntry]) -> dict[str, str]:
    """step id -> why it waits, for each step held back now."""
    pending = {s.step_id: s.attempt + 1 for s in steps if s.status.value in _NOT_STARTED}
    return {
        a.step_id: a.reason
        for a in audit
        if a.action == WAITING_ACTION and pending.get(a.step_id) == a.attempt
    }
