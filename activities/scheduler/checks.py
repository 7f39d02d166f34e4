"""``check_step`` and ``check_compensation``: the ledger's word when an attempt's deadline timer fired
first: the result is there after all, a heartbeat extended the deadline, or it is TimedOut now.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from activities.common import (
    attempt_finished,
    decide_on_step,
    emit_recovery,
    grace_deadline,
    is_transient_claim,
    iso,
    now,
    observe_outcome,
    step_output,
)
from activities.scheduler.inputs import ACTOR, IN_FLIGHT, S, StepAttemptInput
from activities.scheduler.instances import keep_promise, with_promise
from workflow_core import telemetry
from workflow_core.contracts import StepCheck
from workflow_core.ledger import InstanceHandle, StepLedger, StepRecord
from workflow_core.ledger.model import COMP_FAILED, COMP_TIMED_OUT
from workflow_core.limits import Holder
from workflow_core.runtime import Services

# While the supervisor or an operator holds a short claim on a step, its deadline is their lease,
# not an agent's heartbeat: the scheduler looks again this soon instead of waiting the lease out.
CLAIM_RECHECK_SECONDS = 5.0


def keep_waiting(
    ledger: StepLedger,
    handle: InstanceHandle | None,
    r: StepRecord,
    current: datetime,
    grace: float,
    doing: str,
) -> StepCheck | None:
    """None when the attempt's deadline passed; else the scheduler waits on, and moves its promise on
    the instance record to match (the watchdog must not take it for dead)."""
    if r.deadline is None or r.deadline <= current:
        return None
    until = r.deadline
    if is_transient_claim(r.owner):
        until = min(r.deadline, current + timedelta(seconds=CLAIM_RECHECK_SECONDS))
    reason = f"{doing} {r.step_id} until {iso(until)}"
    keep_promise(ledger, handle, until, grace, r.orchestration_id, reason=reason)
    return StepCheck(state="extended", deadline=iso(until))


def check_step(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """``StepCheck`` of the attempt (written TimedOut here if it was still in flight past its deadline)."""
    args = StepAttemptInput.model_validate(payload)
    ledger, grace = services.ledger, services.settings.watchdog_grace_seconds

    def decide(pair: tuple[StepRecord, InstanceHandle | None]) -> StepCheck:
        r, handle = pair
        # any attempt's success is the step's (a supervisor re-dispatch may have won); Skipped: by an operator
        if r.status is S.SKIPPED or (r.status is S.SUCCEEDED and r.attempt >= args.attempt):
            return StepCheck(state="succeeded", output=step_output(r))
        if r.attempt != args.attempt:  # never dispatched, or superseded by a later attempt
            return StepCheck(state="timed_out", error=f"ledger is at attempt {r.attempt} ({r.status.value})")
        if r.status is S.FAILED:
            return StepCheck(state="failed", error=r.last_error, permanent=r.non_retryable)
        if r.status in IN_FLIGHT:
            current = now()
            if waiting := keep_waiting(ledger, handle, r, current, grace, "waiting for"):
                return waiting
            ledger.transition(
                r,
                S.TIMED_OUT,
                actor=ACTOR,
                reason=f"attempt {r.attempt} passed its deadline {iso(r.deadline)} without a result",
                last_error=f"attempt {r.attempt} timed out ({r.status.value} past its deadline)",
                deadline=grace_deadline(grace, current),
                **with_promise(handle, current, grace, r.orchestration_id),
            )
            emit_recovery(r, "timed_out", reason=f"no result by {iso(r.deadline)}")
            # a timeout counts like a retryable failure for the agent's circuit, and frees its slot
            holder = Holder(r.instance_id, r.step_id, r.attempt)
            observe_outcome(services, r.agent, holder, ok=False, error="timed out", permanent=False)
            attempt_finished(r, outcome=telemetry.STEP_TIMED_OUT, started_at=r.sent_at(), ended_at=current)
            return StepCheck(state="timed_out", error=f"attempt {r.attempt} timed out")
        if r.status in (S.TIMED_OUT, S.RETRYING):
            return StepCheck(state="timed_out", error=r.last_error)
        return StepCheck(state="failed", error=r.last_error or f"step is {r.status.value}")

    check = decide_on_step(ledger, args.instance_id, args.step_id, decide, f"check {args.step_id}")
    if check.output is not None:  # the scheduler builds later inputs from it: the value, not a reference
        check = check.model_copy(update={"output": services.payloads.resolve(check.output)})
    return check.model_dump()


def check_compensation(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """Like :func:`check_step` for a compensation attempt: one past its deadline keeps the step
    Compensating, with ``compensation_status`` TimedOut (the scheduler retries or finishes it)."""
    args = StepAttemptInput.model_validate(payload)
    ledger, grace = services.ledger, services.settings.watchdog_grace_seconds

    def decide(pair: tuple[StepRecord, InstanceHandle | None]) -> StepCheck:
        r, handle = pair
        if r.status is S.COMPENSATED:
            return StepCheck(state="succeeded")
        if r.compensation_attempt != args.attempt:
            why = f"ledger is at compensation attempt {r.compensation_attempt} ({r.status.value})"
            return StepCheck(state="timed_out", error=why)
        if r.status is S.COMPENSATION_FAILED:
            return StepCheck(state="failed", error=r.last_error)
        if r.status is not S.COMPENSATING:
            return StepCheck(state="failed", error=f"step is {r.status.value}")
        if r.compensation_status == COMP_FAILED:
            return StepCheck(state="failed", error=r.last_error, permanent=r.non_retryable)
        if r.compensation_status == COMP_TIMED_OUT:
            return StepCheck(state="timed_out", error=r.last_error)
        current = now()
        if waiting := keep_waiting(ledger, handle, r, current, grace, "compensating"):
            return waiting
        error = f"compensation attempt {r.compensation_attempt} timed out"
        ledger.update(
            r,
            actor=ACTOR,
            reason=f"compensation attempt {r.compensation_attempt} passed its deadline {iso(r.deadline)}",
            compensation_status=COMP_TIMED_OUT,
            last_error=error,
            deadline=grace_deadline(grace, current),
            **with_promise(handle, current, grace, r.orchestration_id),
        )
        emit_recovery(r, "compensation_timed_out", attempt=r.compensation_attempt, reason=error)
        return StepCheck(state="timed_out", error=error)

    what = f"check compensation {args.step_id}"
    return decide_on_step(ledger, args.instance_id, args.step_id, decide, what).model_dump()
