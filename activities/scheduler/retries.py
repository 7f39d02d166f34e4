"""After a failed attempt (of the work or its compensator), what the orchestration decided: try again
(``schedule_retry``), leave the step for compensation (``give_up_step``), or hand a compensation that
keeps failing to an operator (``finish_compensation``).
"""

from __future__ import annotations

import logging
from typing import Any

from activities.common import decide_on_step, emit_recovery, grace_deadline, iso, now, parse_time
from activities.scheduler.inputs import (
    ACTOR,
    MAY_COMPENSATE,
    NEEDS_RETRY_DECISION,
    FinishCompensationInput,
    GiveUpInput,
    S,
    ScheduleRetryInput,
    nothing_to_undo,
    status_reply,
    time_out,
)
from activities.scheduler.instances import with_promise
from workflow_core.ledger import InstanceHandle, StepRecord
from workflow_core.ledger.model import COMP_FAILED, COMP_GAVE_UP, COMP_TIMED_OUT, GIVEN_UP
from workflow_core.runtime import Services

log = logging.getLogger(__name__)


def schedule_retry(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """Failed/TimedOut attempt -> Retrying until ``retry_at`` (deadline ``retry_at`` + grace). A
    compensation stays Compensating and only its deadline moves, so the watchdog leaves its backoff
    alone."""
    args = ScheduleRetryInput.model_validate(payload)
    ledger, grace = services.ledger, services.settings.watchdog_grace_seconds
    retry_at = parse_time(args.retry_at, "retry_at")
    compensate, until = args.kind == "compensate", grace_deadline(grace, retry_at)

    def decide(pair: tuple[StepRecord, InstanceHandle | None]) -> tuple[StepRecord, bool]:
        r, handle = pair
        promise = with_promise(handle, retry_at, grace, r.orchestration_id)
        if compensate:
            waiting = r.compensation_status in (COMP_FAILED, COMP_TIMED_OUT)
            if r.status is not S.COMPENSATING or r.compensation_attempt != args.attempt or not waiting:
                return r, False  # settled, superseded, or still in flight: nothing to move
            if r.deadline == until:
                return r, False  # a re-run
            reason = f"compensation attempt {r.compensation_attempt + 1} at {iso(retry_at)}"
            return ledger.update(r, actor=ACTOR, reason=reason, deadline=until, **promise), True
        if r.attempt != args.attempt:
            return r, False  # superseded (or never dispatched): nothing of this attempt to retry
        error = r.last_error or f"attempt {r.attempt} timed out"
        r = time_out(ledger, r, grace, f"scheduler gave up waiting for attempt {r.attempt}", last_error=error)
        if r.status not in NEEDS_RETRY_DECISION:
            return r, False  # already Retrying (a re-run), or settled another way
        updated = ledger.transition(
            r,
            S.RETRYING,
            actor=ACTOR,
            reason=f"attempt {r.attempt + 1} of {r.max_attempts} at {iso(retry_at)}",
            deadline=until,
            owner="scheduler",
            **promise,
        )
        return updated, True

    what = f"schedule {'compensation ' if compensate else ''}retry {args.step_id}"
    record, changed = decide_on_step(ledger, args.instance_id, args.step_id, decide, what)
    if changed:
        action = "compensation_retry_scheduled" if compensate else "retry_scheduled"
        attempt = args.attempt if compensate else None
        emit_recovery(record, action, attempt=attempt, retry_at=iso(retry_at), reason=record.last_error)
    return status_reply(record, changed)


def give_up_step(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """Attempts exhausted. A step with a compensator stays Failed/TimedOut, marked ``GivenUp``, for
    ``plan_compensation`` to undo first (a timed-out attempt may have taken effect); a step without
    one is Cancelled (nothing to undo)."""
    args = GiveUpInput.model_validate(payload)
    ledger, grace = services.ledger, services.settings.watchdog_grace_seconds

    def decide(pair: tuple[StepRecord, InstanceHandle | None]) -> tuple[StepRecord, bool]:
        r, handle = pair
        r = time_out(ledger, r, grace, f"given up: {args.reason}", last_error=args.reason)
        fields = {"actor": ACTOR, "last_error": args.reason, "compensation_status": GIVEN_UP}
        fields.update(with_promise(handle, now(), grace, r.orchestration_id))
        if nothing_to_undo(r):
            return ledger.transition(
                r, S.CANCELLED, reason=f"given up, nothing to undo: {args.reason}", **fields
            ), True
        if r.status in NEEDS_RETRY_DECISION | {S.RETRYING} and r.compensation_status != GIVEN_UP:
            reason = f"given up, to be compensated: {args.reason}"
            return ledger.update(r, reason=reason, deadline=grace_deadline(grace), **fields), True
        return r, False

    what = f"give up {args.step_id}"
    record, changed = decide_on_step(ledger, args.instance_id, args.step_id, decide, what)
    if changed:
        emit_recovery(record, "give_up", reason=args.reason, to_be_compensated=record.compensator is not None)
    return status_reply(record, changed)


def finish_compensation(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """The compensator's attempts are exhausted: -> CompensationFailed (the operators' inbox,
    ``ledger.needing_attention()``). Idempotent; a step that did get Compensated stays so."""
    args = FinishCompensationInput.model_validate(payload)
    ledger, grace = services.ledger, services.settings.watchdog_grace_seconds

    def decide(pair: tuple[StepRecord, InstanceHandle | None]) -> tuple[StepRecord, bool]:
        r, handle = pair
        if r.status in (S.COMPENSATED, S.COMPENSATION_FAILED):
            return r, False
        r = time_out(ledger, r, grace, "compensation gave up")
        if r.status is not S.COMPENSATING:
            if r.status not in MAY_COMPENSATE:
                return r, False
            r = ledger.transition(
                r,
                S.COMPENSATING,
                actor=ACTOR,
                reason="compensation gave up before its compensator was dispatched",
                deadline=grace_deadline(grace),
            )
        updated = ledger.transition(
            r,
            S.COMPENSATION_FAILED,
            actor=ACTOR,
            reason=f"compensation failed: {args.error}",
            last_error=args.error,
            compensation_status=COMP_GAVE_UP,
            owner=ACTOR,  # the writer; "needs an operator" is the status and the attention flag
            **with_promise(handle, now(), grace, r.orchestration_id),
        )
        log.warning("step %s/%s needs an operator: %s", r.instance_id, r.step_id, args.error)
        return updated, True

    what = f"finish compensation {args.step_id}"
    record, changed = decide_on_step(ledger, args.instance_id, args.step_id, decide, what)
    if changed:
        emit_recovery(record, "finish_compensation", error=args.error)
    return status_reply(record, changed)
