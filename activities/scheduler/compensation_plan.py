"""``plan_compensation``: which steps to undo, in which order, with which compensation policy.

The plan is made stable on a re-run by what it writes: steps caught in flight are timed out, steps
with nothing to undo are Cancelled, and the instance record turns Compensating (work is fenced off).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from activities.common import grace_deadline, retry_on_conflict, step_input, step_output
from activities.scheduler.inputs import ACTOR, MAY_COMPENSATE, InstanceInput, S, nothing_to_undo, time_out
from workflow_core.ledger import InstanceStatus, StepLedger, StepRecord
from workflow_core.runtime import Services
from workflow_core.workflows import RetryPolicy
from workflow_core.workflows.store import definition_for

log = logging.getLogger(__name__)

# When a step's workflow definition can no longer be loaded, compensation must still be possible.
FALLBACK_COMPENSATION_DEADLINE_SECONDS = 300.0


def plan_compensation(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """Steps that may have taken effect and have a compensator: the never-completed first (the
    given-up step, any caught in flight), then the completed in reverse completion order. Compensated
    steps are left out; Compensating and CompensationFailed ones stay in (a re-run, an operator's retry).
    """
    args = InstanceInput.model_validate(payload)
    ledger, grace = services.ledger, services.settings.watchdog_grace_seconds
    if _start_compensating(ledger, args.instance_id, grace) is InstanceStatus.STOPPED:
        # An operator stopped it to keep what is done: nothing is undone until an operator cancels it
        # (a scheduler refused its dispatches, gave the step up and asks to compensate: fenced off).
        return {"steps": [], "cancelled": []}
    records = ledger.list_for_instance(args.instance_id)
    definition = None
    try:
        if records:
            first = records[0]
            definition = definition_for(first.workflow_name, first.workflow_version, services.definitions)
    except Exception as exc:  # a run must stay compensatable even if its definition went away
        text = "workflow %r could not be loaded (%s); compensating with default policies"
        log.warning(text, records[0].workflow_name, exc)

    def decide(r: StepRecord) -> tuple[StepRecord, bool]:
        reason = "workflow is being compensated; in-flight attempt abandoned"
        r = time_out(ledger, r, grace, reason, last_error=r.last_error or "abandoned by compensation")
        if nothing_to_undo(r):
            return ledger.transition(r, S.CANCELLED, actor=ACTOR, reason="workflow compensated"), True
        return r, False

    to_undo: list[StepRecord] = []
    cancelled: list[str] = []
    for record in records:
        read = functools.partial(ledger.get, record.instance_id, record.step_id)
        current, was_cancelled = retry_on_conflict(read, decide, what=f"plan {record.step_id}")
        if was_cancelled:
            cancelled.append(current.step_id)
        elif current.compensator is not None and current.status in MAY_COMPENSATE:
            to_undo.append(current)

    never_completed = sorted((r for r in to_undo if r.completed_at is None), key=lambda r: -r.sequence)
    # Reverse completion order: the sequence the ledger wrote with each completion (one counter per
    # instance, in the same transaction), never a writer's clock; a step without one, its time.
    completed = sorted(
        (r for r in to_undo if r.completed_at is not None),
        key=lambda r: (r.completion_seq is not None, r.completion_seq or 0, r.completed_at, r.sequence),
        reverse=True,
    )
    steps = [_plan_entry(r, definition) for r in never_completed + completed]
    return {"steps": steps, "cancelled": cancelled}


def _start_compensating(ledger: StepLedger, instance_id: str, grace: float) -> InstanceStatus | None:
    """Compensating from the moment the plan is made (work dispatch fenced off, the watchdog watching
    the compensation orchestration); the status the record had (None: no record)."""

    def decide(record: Any) -> InstanceStatus | None:
        may_start = (InstanceStatus.RUNNING, InstanceStatus.FAILED, InstanceStatus.COMPENSATION_FAILED)
        if record is None or record.status not in may_start:
            return None if record is None else record.status
        ledger.transition_instance(
            record,
            InstanceStatus.COMPENSATING,
            actor=ACTOR,
            reason="compensation planned",
            scheduler_deadline=grace_deadline(grace),
            owner=ACTOR,
            stalls=0,
        )
        return record.status

    read = functools.partial(ledger.find_instance, instance_id)
    return retry_on_conflict(read, decide, what=f"compensate {instance_id}")


def _plan_entry(r: StepRecord, definition: Any) -> dict[str, Any]:
    try:
        compensation = definition.step(r.step_id).compensation if definition is not None else None
    except KeyError:
        compensation = None
    return {
        "step_id": r.step_id,
        "compensator": r.compensator,
        "input": step_input(r),
        "output": step_output(r),
        "deadline_seconds": compensation.deadline_seconds
        if compensation
        else FALLBACK_COMPENSATION_DEADLINE_SECONDS,
        "retry": (compensation.retry if compensation else RetryPolicy()).model_dump(),
        "status": r.status.value,
    }
