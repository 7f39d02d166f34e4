"""Metrics of the pattern's normal path: how long and how often steps ran, their queue wait, finished
compensations and dead-lettered messages."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from workflow_core.telemetry.events import emit_event
from workflow_core.telemetry.instruments import (
    COMPENSATED,
    DEAD_LETTER_EVENT,
    DESTINATION,
    ERROR_TYPE,
    ERROR_TYPE_OTHER,
    STEP_SUCCEEDED,
    STEP_TIMED_OUT,
    current,
)


def _outcome_dimensions(workflow: str, step: str, outcome: str, error_type: str | None) -> dict[str, str]:
    dimensions = {"workflow": workflow or "unknown", "step": step, "outcome": outcome}
    if outcome != STEP_SUCCEEDED:
        default = "timeout" if outcome == STEP_TIMED_OUT else ERROR_TYPE_OTHER
        dimensions[ERROR_TYPE] = error_type or default
    return dimensions


def record_step_finished(
    workflow: str,
    step: str,
    outcome: str,
    *,
    duration_s: float | None = None,
    attempts: int | None = None,
    error_type: str | None = None,
) -> None:
    """An attempt of a step ended: ``outcome`` is ``succeeded``, ``failed`` or ``timed_out``
    (``STEP_*``); ``error_type`` names the failure's class (an exception class name, a dead-letter
    reason; ``timeout`` is the default for ``timed_out``, ``_OTHER`` otherwise).

    ``duration_s``: how long the agent worked on this attempt -> ``sas.step.duration``.
    ``attempts``: pass it only when this outcome is final for the step (it succeeded, or failed with
    no retry left) -> ``sas.step.attempts``. ``step`` is the step's name in the workflow definition
    (low cardinality), never an instance id.
    """
    instruments = current()
    dimensions = _outcome_dimensions(workflow, step, outcome, error_type)
    if duration_s is not None:
        instruments.step_duration.record(max(0.0, float(duration_s)), dimensions)
    if attempts is not None:
        instruments.step_attempts.record(int(attempts), dimensions)


def record_dispatch_started(
    workflow: str, step: str, *, dispatched_at: datetime, started_at: datetime
) -> float:
    """An agent started a step that was dispatched at ``dispatched_at`` (read it from the ledger, not
    from the message): records the queue wait in ``sas.step.queue_wait.duration`` and returns it in
    seconds (negative clock skew counts as 0)."""
    wait = max(0.0, (started_at - dispatched_at).total_seconds())
    current().queue_wait.record(wait, {"workflow": workflow or "unknown", "step": step})
    return wait


def record_compensation_finished(
    workflow: str, outcome: str = COMPENSATED, *, error_type: str | None = None
) -> None:
    """A step's compensation finished: counts ``sas.compensations`` by outcome. Use it for
    ``compensated``; a failed compensation is counted by :func:`record_compensation_failed`."""
    dimensions = {"workflow": workflow or "unknown", "outcome": outcome}
    if outcome != COMPENSATED:
        dimensions[ERROR_TYPE] = error_type or ERROR_TYPE_OTHER
    current().compensations.add(1, dimensions)


def record_dead_letter(
    queue: str,
    *,
    reason: str | None = None,
    workflow: str | None = None,
    instance_id: str | None = None,
    step_id: str | None = None,
    **attrs: Any,
) -> None:
    """A message reached the dead-letter queue of ``queue`` (the live queue's name): counts
    ``sas.dead_lettered_messages`` (``error.type`` = the dead-letter reason) and emits the custom
    event ``sas.message_dead_lettered`` with the ids."""
    current().dead_lettered.add(
        1,
        {DESTINATION: queue, "workflow": workflow or "unknown", ERROR_TYPE: reason or ERROR_TYPE_OTHER},
    )
    emit_event(
        DEAD_LETTER_EVENT,
        queue=queue,
        reason=reason,
        workflow=workflow or "unknown",
        instance_id=instance_id,
        step_id=step_id,
        **attrs,
    )
