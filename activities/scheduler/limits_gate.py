"""The dispatch's side of per-agent limits: ask the agent's circuit and slots before the Dispatched
write; on *waiting*, keep the scheduler's promise (it is not dead) and note the wait once on the step.
An agent without declared limits costs nothing here (no I/O).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from activities.common import audit, now
from activities.scheduler.inputs import ACTOR, S
from activities.scheduler.instances import keep_promise, works_on
from workflow_core.contracts import StepDispatch
from workflow_core.ledger import InstanceHandle, StepRecord
from workflow_core.limits import Admission, Holder
from workflow_core.limits.circuits import WAITING_ACTION
from workflow_core.runtime import Services
from workflow_core.workflows.loader import agent_pools


def is_limited(agent: str | None) -> bool:
    return bool(agent) and agent_pools().limits_of(agent) is not None


def hold_back(
    services: Services, r: StepRecord, handle: InstanceHandle | None, d: StepDispatch, deadline: datetime
) -> Admission | None:
    """None: dispatch (no limits, or not a fresh attempt, or admitted). Else the waiting answer."""
    limits = agent_pools().limits_of(r.agent)
    if limits is None or d.kind != "work":
        return None
    fresh = r.status in (S.PENDING, S.RETRYING) and d.attempt > r.attempt and works_on(handle)
    if not fresh:
        return None
    ledger, at, holder = services.ledger, now(), Holder(r.instance_id, r.step_id, d.attempt)
    answer = services.limits.admit(r.agent, limits, holder, deadline, at, d.orchestration_id)
    if answer.admitted:
        return None
    acts_by, grace = at + timedelta(seconds=answer.retry_after), services.settings.watchdog_grace_seconds
    keep_promise(ledger, handle, acts_by, grace, d.orchestration_id, reason=f"waiting: {answer.reason}")
    if answer.first_wait:
        audit(ledger, r, ACTOR, WAITING_ACTION, f"attempt {d.attempt} waits: {answer.reason}", d.attempt)
    return answer
