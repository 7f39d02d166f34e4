"""What the scheduler's activities share (so none imports another): their input models, the status
sets their decisions turn on, the moves several of them make, and the status-moving activities' reply.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from activities.common import grace_deadline
from workflow_core import contracts as c
from workflow_core.ledger import StepLedger, StepRecord, StepStatus, decode_json
from workflow_core.payloads import is_reference
from workflow_core.workflows.loader import agent_pools

S = StepStatus
ACTOR = "scheduler"
IN_FLIGHT = frozenset({S.DISPATCHED, S.RUNNING})
NEEDS_RETRY_DECISION = frozenset({S.FAILED, S.TIMED_OUT})
# Statuses from which a step may (after moving through TimedOut if in flight) start compensating.
MAY_COMPENSATE = NEEDS_RETRY_DECISION | {S.SUCCEEDED, S.RETRYING, S.COMPENSATING, S.COMPENSATION_FAILED}


class InstanceInput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    instance_id: str


class CreateStepsInput(InstanceInput):
    workflow: str
    orchestration_id: str | None = None
    version: str | None = None  # the pinned definition version (absent: the current YAML)


class _StepInput(InstanceInput):
    step_id: str


class StepAttemptInput(_StepInput):
    attempt: int = Field(ge=1)


class ScheduleRetryInput(StepAttemptInput):
    retry_at: str
    kind: c.StepKind = "work"


class GiveUpInput(_StepInput):
    reason: str = "attempts exhausted"


class FinishCompensationInput(_StepInput):
    error: str = "compensator attempts exhausted"


def time_out(ledger: StepLedger, r: StepRecord, grace: float, reason: str, **fields: Any) -> StepRecord:
    """An attempt still in flight when the scheduler moves on is TimedOut first (no agent's result
    may land on it any more); the row then waits for the scheduler, for the watchdog's grace."""
    if r.status not in IN_FLIGHT:
        return r
    return ledger.transition(
        r, S.TIMED_OUT, actor=ACTOR, reason=reason, deadline=grace_deadline(grace), **fields
    )


def nothing_to_undo(r: StepRecord) -> bool:
    """Never ran, failed without a compensator, or its work was never sent: Cancelled rather than
    compensated."""
    return r.status is S.PENDING or (
        r.status in NEEDS_RETRY_DECISION | {S.RETRYING} and (r.compensator is None or never_sent(r))
    )


def never_sent(r: StepRecord) -> bool:
    """Was no work message of this step ever sent? So when its input is stored by blob reference and its
    agent's pool is message-only: every dispatch of it was refused (``dispatch.fail_blob_input``)."""
    if not r.non_retryable or not is_reference(decode_json(r.input_ref)):
        return False
    pools = agent_pools()
    return pools.is_message_only(pools.pool_of(r.agent))


def status_reply(r: StepRecord, changed: bool) -> dict[str, Any]:
    """The reply of ``schedule_retry``, ``give_up_step`` and ``finish_compensation``."""
    return {"instance_id": r.instance_id, "step_id": r.step_id, "status": r.status.value, "changed": changed}
