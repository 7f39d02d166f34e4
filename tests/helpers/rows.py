"""Ledger rows as the app writes them, for tests that start from a given state: an instance record
(:func:`make_instance`) and a step walked legally to any status (:func:`make_step`), on the fixed
clock ``NOW``."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from typing import Literal

from workflow_core.ledger import (
    InstanceRecord,
    InstanceStatus,
    NewStep,
    StepLedger,
    StepRecord,
    StepStatus,
    encode_json,
)
from workflow_core.workflows import get_workflow, version_of

S = StepStatus
IS = InstanceStatus
NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
WORKFLOW = "provision-tenant"  # a real definition: create_storage (300 s, heartbeat 60 s), register_dns...


# An instance's promise in these tests: far enough ahead that no tick finds the instance itself overdue
# unless a decision moved it (a claim: a lease ahead).
PROMISE = NOW + timedelta(days=30)
INPUT = {"tenant_id": "t1", "region": "westeurope", "sku": "Standard_LRS"}


def make_instance(
    ledger: StepLedger,
    instance_id: str,
    status: InstanceStatus = IS.RUNNING,
    *,
    workflow: str = WORKFLOW,
    on_scheduler_lost: Literal["resume", "compensate"] = "compensate",
    scheduler_deadline: datetime = PROMISE,
) -> InstanceRecord:
    """Write the record of an instance, as the HTTP starter does before anything else of it exists,
    and walk it, legally, to ``status`` (Running, Compensating, CompensationFailed, Succeeded...).

    ``on_scheduler_lost`` is ``compensate`` by default: a step whose orchestration is gone then has
    its instance compensated (``compensate_instance``) rather than resumed."""
    record = ledger.create_instance(
        instance_id,
        workflow,
        actor="api:start",
        input_json=encode_json(INPUT),
        scheduler_deadline=scheduler_deadline,
        on_scheduler_lost=on_scheduler_lost,
        version=version_of(get_workflow(workflow)),
    )
    path = {
        IS.RUNNING: [],
        IS.COMPENSATING: [IS.COMPENSATING],
        IS.COMPENSATION_FAILED: [IS.COMPENSATING, IS.COMPENSATION_FAILED],
        IS.COMPENSATED: [IS.COMPENSATING, IS.COMPENSATED],
        IS.SUCCEEDED: [IS.SUCCEEDED],
        IS.FAILED: [IS.FAILED],
    }[status]
    for to in path:
        supervised = to in (IS.RUNNING, IS.COMPENSATING)
        record = ledger.transition_instance(
            record,
            to,
            actor="scheduler",
            scheduler_deadline=scheduler_deadline if supervised else None,
        )
    return record


def make_step(
    ledger: StepLedger,
    instance_id: str,
    status: StepStatus,
    *,
    instance: InstanceStatus | Literal["auto"] | None = "auto",
    deadline: datetime | None = None,
    step_id: str = "create_storage",
    attempt: int = 1,
    resent: bool = False,
    owner: str = "agent:storage.create",
    heartbeat_timeout: float | None = None,
    compensation_status: str | None = None,
    compensation_attempt: int = 0,
    last_error: str | None = None,
    workflow: str = WORKFLOW,
) -> StepRecord:
    """Write one step of an instance and walk it, legally, to ``status``.

    The instance gets its record first (:func:`make_instance`), as in production, unless it has one:
    ``instance`` is its status, by default ("auto") Compensating for a Compensating step,
    CompensationFailed for a CompensationFailed one, else Running. ``None`` writes no record: an
    invariant violation the watchdog must notice and leave alone.

    ``resent``: the watchdog already re-sent the attempt's message (``resent_at`` 5 min before the
    deadline); without it the row is as a dispatch leaves it (its own send is not recorded)."""
    deadline = deadline or NOW - timedelta(minutes=5)
    if instance == "auto":
        instance = {S.COMPENSATING: IS.COMPENSATING, S.COMPENSATION_FAILED: IS.COMPENSATION_FAILED}.get(
            status, IS.RUNNING
        )
    if instance is not None and ledger.find_instance(instance_id) is None:
        make_instance(ledger, instance_id, instance, workflow=workflow)
    (record,) = ledger.create_steps(
        instance_id,
        workflow,
        [
            NewStep(
                step_id=step_id,
                step_name=step_id,
                agent="storage.create",
                compensator="storage.delete",
                max_attempts=3,
                heartbeat_timeout_seconds=heartbeat_timeout,
            )
        ],
        actor="test",
    )
    if status is S.PENDING:
        return record
    record = ledger.transition(
        record,
        S.DISPATCHED,
        actor="scheduler",
        deadline=deadline,
        attempt=attempt,
        owner=owner,
        orchestration_id=instance_id,
        input_ref=encode_json(INPUT),
        attempt_token=secrets.token_hex(16),  # as every dispatch writes it (activities.scheduler.dispatch)
    )
    if resent:
        record = ledger.update(record, actor="supervisor:t0", resent_at=deadline - timedelta(minutes=5))
    if status is S.DISPATCHED:
        return record
    record = ledger.transition(record, S.RUNNING, actor="worker", owner="worker-1")
    if status is S.RUNNING:
        return record
    if status is S.SUCCEEDED:
        return ledger.transition(
            record, S.SUCCEEDED, actor="worker", result_ref=encode_json({"account": "a"})
        )
    if status in (S.FAILED, S.TIMED_OUT, S.RETRYING):
        record = ledger.transition(
            record,
            S.FAILED if status is S.FAILED else S.TIMED_OUT,
            actor="worker",
            deadline=deadline,
            last_error=last_error or "boom",
            compensation_status=compensation_status,
        )
        if status is S.RETRYING:
            record = ledger.transition(
                record, S.RETRYING, actor="scheduler", deadline=deadline, owner="scheduler"
            )
        return record
    if status in (S.COMPENSATING, S.COMPENSATION_FAILED):
        record = ledger.transition(
            record, S.SUCCEEDED, actor="worker", result_ref=encode_json({"account": "a"})
        )
        record = ledger.transition(
            record,
            S.COMPENSATING,
            actor="scheduler",
            deadline=deadline,
            owner="agent:storage.delete",
            orchestration_id=f"{instance_id}:compensation",
            compensation_attempt=compensation_attempt or 1,
            compensation_status=compensation_status or "Dispatched",
        )
        if status is S.COMPENSATION_FAILED:
            record = ledger.transition(
                record, S.COMPENSATION_FAILED, actor="scheduler", last_error=last_error or "undo failed"
            )
        return record
    raise AssertionError(f"make_step does not build {status}")
