"""The Agent role's calls into the step metrics of ``workflow_core.telemetry``.

Each takes the ledger rows the caller already read or wrote (no extra storage request) and never
raises. Only the run that actually changed the ledger calls them, so a redelivery does not count twice.
"""

from __future__ import annotations

from datetime import datetime

from activities.common import never_fails
from workflow_core import telemetry
from workflow_core.ledger import StepRecord


def queue_wait(before_claim: StepRecord, started_at: datetime) -> None:
    """An agent claimed a Dispatched attempt: ``sas.step.queue_wait.duration`` (dispatch to start)."""
    with never_fails(f"the queue wait of {before_claim.step_id}"):
        sent = before_claim.sent_at()
        if sent is not None:
            telemetry.record_dispatch_started(
                before_claim.workflow_name, before_claim.step_id, dispatched_at=sent, started_at=started_at
            )


def attempt_finished(
    record: StepRecord,
    *,
    outcome: str,
    started_at: datetime | None,
    ended_at: datetime,
    error_type: str | None = None,
    final: bool = False,
) -> None:
    """An attempt ended (``succeeded``/``failed``/``timed_out``): ``sas.step.duration`` from
    ``started_at`` (the claim, or the dispatch for a timeout) and, when ``final``, ``sas.step.attempts``."""
    with never_fails(f"the outcome of {record.step_id}"):
        telemetry.record_step_finished(
            record.workflow_name,
            record.step_id,
            outcome,
            duration_s=None if started_at is None else (ended_at - started_at).total_seconds(),
            attempts=record.attempt if final else None,
            error_type=error_type,
        )


def error_type_of(error: str | None) -> str | None:
    """The exception class name at the head of an error text (``"ValueError: ..."``), for
    ``error.type``; None when the text does not start with one."""
    head = (error or "").split(":", 1)[0].strip()
    return head if head.isidentifier() else None


def compensation_finished(record: StepRecord) -> None:
    """A compensator succeeded (the step is Compensated): ``sas.compensations`` outcome compensated."""
    with never_fails(f"the compensation of {record.step_id}"):
        telemetry.record_compensation_finished(record.workflow_name)
