"""The scheduler's activities: every ledger write and every send the orchestrations need.

Orchestrators do no I/O; each call below is one activity. Each activity is a thin binding wrapper
around a plain function ``(payload: dict, services) -> dict`` that tests and the durable test host
call directly. All of them are idempotent: the durable engine may run an activity again after a
crash, so each one decides from what the ledger says now, and a second run changes nothing a
first run already changed (see docs/agents.md).

Return values (JSON objects):

- ``create_workflow_steps`` -> ``{"instance_id", "workflow", "steps": [{"step_id", "status",
  "attempt"}]}``
- ``dispatch_step`` / ``dispatch_compensation`` -> :class:`DispatchOutcome` as a dict
- ``check_step`` / ``check_compensation`` -> ``StepCheck`` (``workflow_core.contracts``) as a dict
- ``schedule_retry``, ``give_up_step``, ``finish_compensation`` -> ``{"instance_id", "step_id",
  "status", "changed"}``
- ``plan_compensation`` -> ``{"steps": [...], "cancelled": [step ids]}`` (see docs/contracts.md)
"""

from __future__ import annotations

import functools
import logging
import time
from datetime import datetime, timedelta
from typing import Any, Literal

from opentelemetry.trace import SpanKind
from pydantic import BaseModel, ConfigDict, Field

from activities import step_metrics
from activities._bp import bp
from activities.common import (
    COMP_DISPATCHED,
    COMP_FAILED,
    COMP_GAVE_UP,
    COMP_TIMED_OUT,
    GIVEN_UP,
    as_dict,
    emit_recovery,
    error_text,
    grace_deadline,
    is_transient_claim,
    iso,
    now,
    parse_time,
    retry_on_conflict,
    step_input,
    step_output,
)
from activities.instances import keep_promise, settle_instance, with_promise, works_on
from workflow_core import contracts as c
from workflow_core import telemetry, tracing
from workflow_core.contracts import StepCheck, StepDispatch
from workflow_core.ledger import (
    ConcurrencyConflict,
    InstanceConflict,
    InstanceHandle,
    InstanceStatus,
    NewStep,
    StepLedger,
    StepRecord,
    StepStatus,
    encode_json,
)
from workflow_core.messages import work_message
from workflow_core.runtime import Services, get_services
from workflow_core.transport import TransportError, message_id_for

log = logging.getLogger(__name__)

S = StepStatus
ACTOR = "scheduler"
IN_FLIGHT = frozenset({S.DISPATCHED, S.RUNNING})
NEEDS_RETRY_DECISION = frozenset({S.FAILED, S.TIMED_OUT})
# Statuses from which a step may (after moving through TimedOut if in flight) start compensating.
MAY_COMPENSATE = frozenset(
    {S.SUCCEEDED, S.FAILED, S.TIMED_OUT, S.RETRYING, S.COMPENSATING, S.COMPENSATION_FAILED}
)

# Used when a step's workflow definition can no longer be loaded (renamed or removed after the run
# started): compensation must still be possible.
FALLBACK_COMPENSATION_DEADLINE_SECONDS = 300.0
# Pauses between quick re-tries of a failed send inside one dispatch (then the deadline takes over).
SEND_RETRY_DELAYS = (0.2, 1.0)


class _Input(BaseModel):
    model_config = ConfigDict(extra="ignore")


class CreateStepsInput(_Input):
    instance_id: str
    workflow: str
    orchestration_id: str | None = None
    version: str | None = None  # the pinned definition version (absent: the current YAML)


class StepAttemptInput(_Input):
    instance_id: str
    step_id: str
    attempt: int = Field(ge=1)


class ScheduleRetryInput(StepAttemptInput):
    retry_at: str
    kind: c.StepKind = "work"


class GiveUpInput(_Input):
    instance_id: str
    step_id: str
    reason: str = "attempts exhausted"


class PlanInput(_Input):
    instance_id: str


class FinishCompensationInput(_Input):
    instance_id: str
    step_id: str
    error: str = "compensator attempts exhausted"


DispatchResult = Literal["dispatched", "already-dispatched", "settled", "stale", "not-dispatchable"]


class DispatchOutcome(BaseModel):
    """What a dispatch activity did.

    ``outcome``: ``dispatched`` (ledger moved, message sent), ``already-dispatched`` (this attempt
    was dispatched before; the message was re-sent only if it had not been sent), ``settled`` (the
    step is already done: Succeeded by another attempt, Skipped, or Compensated; nothing sent, do
    not wait for a result), ``stale`` (the ledger is at a later attempt; nothing done),
    ``not-dispatchable`` (the status does not allow it, e.g. Cancelled, or no compensator; nothing
    done). ``status`` is the ledger status afterwards. ``sent``: whether this call sent the message;
    if sending failed even after a few quick retries, ``sent`` is false, ``error`` says why and the
    step (its intent already in the ledger) recovers at its deadline.
    """

    instance_id: str
    step_id: str
    kind: c.StepKind
    attempt: int
    outcome: DispatchResult
    status: str
    message_id: str
    sent: bool
    deadline: str | None = None
    error: str | None = None  # why the send failed (the step then recovers at its deadline)


# ---- create_workflow_steps ------------------------------------------------------------------------


def create_workflow_steps(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """All steps of the instance's workflow (its pinned version), Pending, in one idempotent ledger write."""
    from workflow_core.workflows.store import definition_for

    args = CreateStepsInput.model_validate(as_dict(payload, c.ACTIVITY_CREATE_STEPS))
    definition = definition_for(args.workflow, args.version, services.definitions if args.version else None)
    steps = [
        NewStep(
            step_id=step.id,
            step_name=step.name or step.id,
            agent=step.agent,
            compensator=step.compensation.agent if step.compensation else None,
            max_attempts=step.retry.max_attempts,
            heartbeat_timeout_seconds=step.heartbeat_timeout_seconds,
        )
        for step in definition.steps
    ]
    orchestration_id = args.orchestration_id or args.instance_id
    pinned = {"version": args.version} if args.version else {}
    ledger = services.ledger
    # The instance record is adopted in the steps' own batch (one read, one write); when the steps
    # exist already (a re-run) or the instance moved meanwhile, adopting is its own guarded write.
    found = ledger.find_instance(args.instance_id)
    handle = InstanceHandle(found) if found is not None and found.supervised else None
    adoption = _adoption(handle, orchestration_id, services.settings.watchdog_grace_seconds)
    try:
        records = ledger.create_steps(
            args.instance_id,
            definition.name,
            steps,
            actor=ACTOR,
            orchestration_id=orchestration_id,
            instance=handle,
            instance_changes=adoption,
            **pinned,
        )
    except InstanceConflict:
        handle = None
        records = ledger.create_steps(
            args.instance_id,
            definition.name,
            steps,
            actor=ACTOR,
            orchestration_id=orchestration_id,
            **pinned,
        )
    if handle is None or handle.record is found:
        _adopt_instance(services, args.instance_id, orchestration_id)
    return {
        "instance_id": args.instance_id,
        "workflow": definition.name,
        "steps": [{"step_id": r.step_id, "status": r.status.value, "attempt": r.attempt} for r in records],
    }


def _adoption(handle: InstanceHandle | None, orchestration_id: str, grace: float) -> dict[str, Any]:
    """The instance changes of an orchestration that showed up: it owns the instance and promises
    to dispatch at once."""
    if handle is None:
        return {}
    changes = with_promise(handle, now(), grace, orchestration_id).get("instance_changes") or {}
    return {"orchestration_id": orchestration_id, **changes}


def _adopt_instance(services: Services, instance_id: str, orchestration_id: str) -> None:
    """Adopt the instance on its own (see :func:`_adoption`)."""
    ledger = services.ledger
    grace = services.settings.watchdog_grace_seconds

    def decide(record: Any) -> None:
        if record is None or not record.supervised:
            return
        ledger.update_instance(
            record,
            actor=ACTOR,
            reason=f"orchestration {orchestration_id} created the steps",
            **_adoption(InstanceHandle(record), orchestration_id, grace),
        )

    retry_on_conflict(lambda: ledger.find_instance(instance_id), decide, what=f"adopt {instance_id}")


# ---- dispatch -------------------------------------------------------------------------------------


def dispatch_step(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """Ledger Pending/Retrying -> Dispatched (owner, attempt, deadline, orchestration id, input) *then*
    send the work message (MessageId ``message_id_for(instance, step, attempt)``), then record
    ``message_sent_at``. A second call for the same attempt re-sends only if no send was recorded.

    ``message_sent_at`` is what tells the watchdog a Dispatched step that nobody claimed was never
    sent (a crash between the ledger write and the send: re-send) from one whose message is late
    (the orchestration's timer and retry policy handle it). It is written with the ETag the
    Dispatched write returned, without reading the row again."""
    dispatch = StepDispatch.model_validate(as_dict(payload, c.ACTIVITY_DISPATCH_STEP))
    if dispatch.kind != "work":
        raise ValueError(f"{c.ACTIVITY_DISPATCH_STEP} sends work; use {c.ACTIVITY_DISPATCH_COMPENSATION}")
    return _dispatch(dispatch, services).model_dump()


def dispatch_compensation(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """Ledger -> Compensating (compensation_attempt, owner, deadline) *then* send the compensate
    message to the step's compensator agent; idempotent like :func:`dispatch_step`."""
    data = dict(as_dict(payload, c.ACTIVITY_DISPATCH_COMPENSATION))
    data["kind"] = "compensate"
    return _dispatch(StepDispatch.model_validate(data), services).model_dump()


def _dispatch(d: StepDispatch, services: Services) -> DispatchOutcome:
    """The dispatch as a PRODUCER span under the workflow's trace (``d.trace``): the span's own
    context goes to the ledger row with the Dispatched/Compensating write and, from the row, into
    the work message (``workflow_core.tracing``)."""
    queue = services.settings.work_queue
    message_id = message_id_for(d.instance_id, d.step_id, d.attempt, kind=d.kind)
    with tracing.span(
        f"send {queue}",
        parent=d.trace,
        kind=SpanKind.PRODUCER,
        attributes={
            **tracing.messaging_attributes(services.settings.transport, queue, "send", message_id),
            "sas.instance_id": d.instance_id,
            "sas.step_id": d.step_id,
            "sas.attempt": d.attempt,
            "sas.workflow": d.workflow,
            "sas.kind": d.kind,
        },
    ):
        # the span's own context; the input's when this process exports no traces (keep the chain)
        recorded = tracing.current() or tracing.clean(d.trace) or None
        return _dispatch_in_span(d.model_copy(update={"trace": recorded}), services)


def _dispatch_in_span(d: StepDispatch, services: Services) -> DispatchOutcome:
    ledger = services.ledger
    deadline = parse_time(d.deadline, "deadline")
    grace = services.settings.watchdog_grace_seconds
    decide = _decide_work_dispatch if d.kind == "work" else _decide_compensation_dispatch
    record, outcome = retry_on_conflict(
        lambda: ledger.read_step_and_instance(d.instance_id, d.step_id),
        lambda pair: decide(ledger, pair[0], pair[1], d, deadline, grace),
        what=f"dispatch {d.kind} {d.instance_id}/{d.step_id}#{d.attempt}",
    )
    message_id = message_id_for(d.instance_id, d.step_id, d.attempt, kind=d.kind)
    sent = False
    error = None
    if outcome in ("dispatched", "already-dispatched") and _needs_send(record, d):
        try:
            record = _send(record, d, services)
            sent = True
            log.info("sent %s %s (outcome %s)", d.kind, message_id, outcome)
        except TransportError as exc:
            # The intent is in the ledger (Dispatched/Compensating, message_sent_at unset, a deadline):
            # failing the activity would fail the whole orchestration, while the deadline recovers
            # this (the orchestration's timer retries the step; the watchdog re-sends the message).
            error = error_text(exc)
            log.warning("could not send %s (%s); the deadline will recover it", message_id, error)
            ledger.note(
                d.instance_id,
                d.step_id,
                actor=ACTOR,
                action="send-failed",
                reason=f"{d.kind} message {message_id} not sent: {error}; recovery at the deadline "
                f"{iso(record.deadline)}",
                attempt=d.attempt,
                status=record.status.value,
            )
            emit_recovery(
                record, "send_failed", attempt=d.attempt, outcome=telemetry.OUTCOME_ERROR, error=error
            )
    if d.kind == "compensate" and outcome == "dispatched":
        emit_recovery(record, "compensate", attempt=d.attempt, compensator=record.compensator)
    return DispatchOutcome(
        instance_id=d.instance_id,
        step_id=d.step_id,
        kind=d.kind,
        attempt=d.attempt,
        outcome=outcome,
        status=record.status.value,
        message_id=message_id,
        sent=sent,
        deadline=iso(record.deadline),
        error=error,
    )


def _decide_work_dispatch(
    ledger: StepLedger,
    r: StepRecord,
    handle: InstanceHandle | None,
    d: StepDispatch,
    deadline: datetime,
    grace: float,
) -> tuple[StepRecord, DispatchResult]:
    if r.attempt == d.attempt and r.status in (IN_FLIGHT | NEEDS_RETRY_DECISION | {S.SUCCEEDED}):
        if r.status in IN_FLIGHT and r.orchestration_id != d.orchestration_id and works_on(handle, "work"):
            # a resumed scheduler takes over an attempt a dead one dispatched: its results go here now
            r = ledger.update(
                r,
                actor=ACTOR,
                reason=f"orchestration {d.orchestration_id} took over attempt {r.attempt} "
                f"from {r.orchestration_id}",
                orchestration_id=d.orchestration_id,
                **with_promise(handle, r.deadline or deadline, grace, d.orchestration_id),
            )
        return r, "already-dispatched"
    if r.status in (S.SUCCEEDED, S.SKIPPED):
        return r, "settled"
    if not works_on(handle, "work"):
        return r, "not-dispatchable"  # the instance is compensating or settled: fenced off
    if r.status in (S.PENDING, S.RETRYING) and d.attempt > r.attempt:
        updated = ledger.transition(
            r,
            S.DISPATCHED,
            actor=ACTOR,
            reason=f"dispatch attempt {d.attempt} to agent {r.agent}",
            owner=f"agent:{r.agent}",
            attempt=d.attempt,
            deadline=deadline,
            orchestration_id=d.orchestration_id,
            input_ref=encode_json(d.input),
            message_sent_at=None,
            last_heartbeat=None,
            **tracing.ledger_fields(d.trace),
            **with_promise(handle, deadline, grace, d.orchestration_id),
        )
        return updated, "dispatched"
    if r.attempt >= d.attempt:
        return r, "stale"
    return r, "not-dispatchable"


def _decide_compensation_dispatch(
    ledger: StepLedger,
    r: StepRecord,
    handle: InstanceHandle | None,
    d: StepDispatch,
    deadline: datetime,
    grace: float,
) -> tuple[StepRecord, DispatchResult]:
    if r.compensation_attempt == d.attempt and r.status in (
        S.COMPENSATING,
        S.COMPENSATED,
        S.COMPENSATION_FAILED,
    ):
        return r, "already-dispatched"
    if r.status is S.COMPENSATED:
        return r, "settled"
    if r.compensator is None:
        return r, "not-dispatchable"
    if r.status in IN_FLIGHT:  # compensation asked for while an attempt is out: stop waiting for it
        r = ledger.transition(
            r,
            S.TIMED_OUT,
            actor=ACTOR,
            reason="compensation requested while an attempt was in flight",
            deadline=grace_deadline(grace),
        )
    if r.status in MAY_COMPENSATE and d.attempt > r.compensation_attempt:
        updated = ledger.transition(
            r,
            S.COMPENSATING,
            actor=ACTOR,
            reason=f"dispatch compensation attempt {d.attempt} to agent {r.compensator}",
            owner=f"agent:{r.compensator}",
            compensation_attempt=d.attempt,
            compensation_status=COMP_DISPATCHED,
            deadline=deadline,
            orchestration_id=d.orchestration_id,
            message_sent_at=None,
            last_heartbeat=None,
            **tracing.ledger_fields(d.trace),
            **with_promise(handle, deadline, grace, d.orchestration_id),
        )
        return updated, "dispatched"
    if r.compensation_attempt >= d.attempt:
        return r, "stale"
    return r, "not-dispatchable"


def _send(record: StepRecord, d: StepDispatch, services: Services) -> StepRecord:
    """Send the message of ``d`` (built from the ledger row), then record ``message_sent_at``.

    A send that fails is retried a few times at once (the same MessageId, so a send that did reach
    the broker is deduplicated); the last ``TransportError`` propagates.
    """
    message = work_message(record, d.kind, input=None if d.kind == "work" else d.input)
    send = functools.partial(services.transport.send, services.settings.work_queue, message)
    for delay in (*SEND_RETRY_DELAYS, None):
        try:
            send()
            break
        except TransportError as exc:
            if delay is None:
                raise
            log.info("send of %s %s#%d failed (%s); retrying", d.kind, d.step_id, d.attempt, exc)
            time.sleep(delay)
    return _record_sent(services.ledger, record, d)


def _needs_send(r: StepRecord, d: StepDispatch) -> bool:
    if r.message_sent_at is not None:
        return False
    if d.kind == "work":
        return r.status is S.DISPATCHED and r.attempt == d.attempt
    return (
        r.status is S.COMPENSATING
        and r.compensation_attempt == d.attempt
        and (r.compensation_status == COMP_DISPATCHED)
    )


def _record_sent(ledger: StepLedger, record: StepRecord, d: StepDispatch) -> StepRecord:
    """``message_sent_at`` on the row as this dispatch last wrote or read it (its ETag): no read.

    A lost race (412) means someone wrote the step after the dispatch: a worker claimed it (so the
    message arrived), or the watchdog or an operator acted. Their write stands; at worst the
    watchdog re-sends a message that was sent, which MessageId deduplication and the worker's claim
    rules make harmless.
    """
    try:
        return ledger.update(
            record,
            actor=ACTOR,
            reason=f"{d.kind} message for attempt {d.attempt} sent",
            message_sent_at=now(),
        )
    except ConcurrencyConflict:
        return record


# ---- check_step / check_compensation --------------------------------------------------------------


# While the supervisor or an operator holds a short claim on a step, its deadline is their lease,
# not an agent's heartbeat: the scheduler looks again this soon instead of waiting the lease out.
CLAIM_RECHECK_SECONDS = 5.0


def wait_until(r: StepRecord, current: datetime) -> datetime:
    """How long the scheduler should keep waiting for an attempt whose deadline is still ahead."""
    assert r.deadline is not None
    if is_transient_claim(r.owner):
        return min(r.deadline, current + timedelta(seconds=CLAIM_RECHECK_SECONDS))
    return r.deadline


def check_step(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """The orchestration's deadline timer fired: what does the ledger say about this attempt?

    ``succeeded``/``failed``: the result is in the ledger (its event was lost or is late);
    ``extended``: a heartbeat moved the deadline past now; ``timed_out``: the ledger now says
    TimedOut (written here if the attempt was still Dispatched/Running past its deadline).
    """
    args = StepAttemptInput.model_validate(as_dict(payload, c.ACTIVITY_CHECK_STEP))
    ledger = services.ledger
    grace = services.settings.watchdog_grace_seconds

    def decide(pair: tuple[StepRecord, InstanceHandle | None]) -> StepCheck:
        r, handle = pair
        # Any attempt's success is the step's success (a supervisor re-dispatch may have won).
        if r.status is S.SUCCEEDED and r.attempt >= args.attempt:
            return StepCheck(state="succeeded", output=step_output(r))
        if r.status is S.SKIPPED:  # an operator decided the step needs no (more) work
            return StepCheck(state="succeeded", output=step_output(r))
        if r.attempt != args.attempt:  # never dispatched, or superseded by a later attempt
            return StepCheck(state="timed_out", error=f"ledger is at attempt {r.attempt} ({r.status.value})")
        if r.status is S.FAILED:
            return StepCheck(state="failed", error=r.last_error, permanent=r.non_retryable)
        if r.status in IN_FLIGHT:
            current = now()
            if r.deadline is not None and r.deadline > current:
                until = wait_until(r, current)
                keep_promise(
                    ledger,
                    handle,
                    until,
                    grace,
                    r.orchestration_id,
                    reason=f"waiting for {r.step_id} until {iso(until)}",
                )
                return StepCheck(state="extended", deadline=iso(until))
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
            step_metrics.attempt_finished(
                r,
                outcome=telemetry.STEP_TIMED_OUT,
                started_at=step_metrics.dispatched_at(r),
                ended_at=current,
            )
            return StepCheck(state="timed_out", error=f"attempt {r.attempt} timed out")
        if r.status in (S.TIMED_OUT, S.RETRYING):
            return StepCheck(state="timed_out", error=r.last_error)
        return StepCheck(state="failed", error=r.last_error or f"step is {r.status.value}")

    check = retry_on_conflict(
        lambda: ledger.read_step_and_instance(args.instance_id, args.step_id),
        decide,
        what=f"check {args.step_id}",
    )
    return check.model_dump()


def check_compensation(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """Like :func:`check_step` for a compensation attempt (``attempt`` = compensation attempt).

    A compensator that passes its deadline keeps the step Compensating, with ``compensation_status``
    TimedOut and a ``last_error``; the scheduler then retries it or calls ``finish_compensation``.
    """
    args = StepAttemptInput.model_validate(as_dict(payload, c.ACTIVITY_CHECK_COMPENSATION))
    ledger = services.ledger
    grace = services.settings.watchdog_grace_seconds

    def decide(pair: tuple[StepRecord, InstanceHandle | None]) -> StepCheck:
        r, handle = pair
        if r.status is S.COMPENSATED:
            return StepCheck(state="succeeded")
        if r.compensation_attempt != args.attempt:
            return StepCheck(
                state="timed_out",
                error=f"ledger is at compensation attempt {r.compensation_attempt} ({r.status.value})",
            )
        if r.status is S.COMPENSATION_FAILED:
            return StepCheck(state="failed", error=r.last_error)
        if r.status is not S.COMPENSATING:
            return StepCheck(state="failed", error=f"step is {r.status.value}")
        if r.compensation_status == COMP_FAILED:
            return StepCheck(state="failed", error=r.last_error, permanent=r.non_retryable)
        if r.compensation_status == COMP_TIMED_OUT:
            return StepCheck(state="timed_out", error=r.last_error)
        current = now()
        if r.deadline is not None and r.deadline > current:
            until = wait_until(r, current)
            keep_promise(
                ledger,
                handle,
                until,
                grace,
                r.orchestration_id,
                reason=f"compensating {r.step_id} until {iso(until)}",
            )
            return StepCheck(state="extended", deadline=iso(until))
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

    check = retry_on_conflict(
        lambda: ledger.read_step_and_instance(args.instance_id, args.step_id),
        decide,
        what=f"check compensation {args.step_id}",
    )
    return check.model_dump()


# ---- schedule_retry / give_up_step ----------------------------------------------------------------


def schedule_retry(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """Failed/TimedOut attempt -> Retrying until ``retry_at`` (deadline ``retry_at`` + grace).

    With ``"kind": "compensate"`` (``attempt`` = compensation attempt) the step stays Compensating
    and only its deadline moves to ``retry_at`` + grace, so the watchdog leaves a compensator's
    backoff alone; the next ``dispatch_compensation`` starts the next attempt.
    """
    args = ScheduleRetryInput.model_validate(as_dict(payload, c.ACTIVITY_SCHEDULE_RETRY))
    ledger = services.ledger
    retry_at = parse_time(args.retry_at, "retry_at")
    grace = services.settings.watchdog_grace_seconds
    if args.kind == "compensate":
        return _schedule_compensation_retry(args, services, retry_at, grace)

    def decide(pair: tuple[StepRecord, InstanceHandle | None]) -> tuple[StepRecord, bool]:
        r, handle = pair
        if r.attempt != args.attempt:
            return r, False  # superseded (or never dispatched): nothing of this attempt to retry
        if r.status in IN_FLIGHT:
            r = ledger.transition(
                r,
                S.TIMED_OUT,
                actor=ACTOR,
                reason=f"scheduler gave up waiting for attempt {r.attempt}",
                last_error=r.last_error or f"attempt {r.attempt} timed out",
                deadline=grace_deadline(grace),
            )
        if r.status not in NEEDS_RETRY_DECISION:
            return r, False  # already Retrying (a re-run), or settled another way
        updated = ledger.transition(
            r,
            S.RETRYING,
            actor=ACTOR,
            reason=f"attempt {r.attempt + 1} of {r.max_attempts} at {iso(retry_at)}",
            deadline=grace_deadline(grace, retry_at),
            owner="scheduler",
            **with_promise(handle, retry_at, grace, r.orchestration_id),
        )
        return updated, True

    record, changed = retry_on_conflict(
        lambda: ledger.read_step_and_instance(args.instance_id, args.step_id),
        decide,
        what=f"schedule retry {args.step_id}",
    )
    if changed:
        emit_recovery(record, "retry_scheduled", retry_at=iso(retry_at), reason=record.last_error)
    return _status(record, changed)


def _schedule_compensation_retry(
    args: ScheduleRetryInput, services: Services, retry_at: datetime, grace: float
) -> dict[str, Any]:
    ledger = services.ledger
    target = grace_deadline(grace, retry_at)

    def decide(pair: tuple[StepRecord, InstanceHandle | None]) -> tuple[StepRecord, bool]:
        r, handle = pair
        waiting = r.compensation_status in (COMP_FAILED, COMP_TIMED_OUT)
        if r.status is not S.COMPENSATING or r.compensation_attempt != args.attempt or not waiting:
            return r, False  # settled, superseded, or still in flight: nothing to move
        if r.deadline == target:
            return r, False  # a re-run
        updated = ledger.update(
            r,
            actor=ACTOR,
            reason=f"compensation attempt {r.compensation_attempt + 1} at {iso(retry_at)}",
            deadline=target,
            **with_promise(handle, retry_at, grace, r.orchestration_id),
        )
        return updated, True

    record, changed = retry_on_conflict(
        lambda: ledger.read_step_and_instance(args.instance_id, args.step_id),
        decide,
        what=f"schedule compensation retry {args.step_id}",
    )
    if changed:
        emit_recovery(
            record,
            "compensation_retry_scheduled",
            attempt=args.attempt,
            retry_at=iso(retry_at),
            reason=record.last_error,
        )
    return _status(record, changed)


def give_up_step(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """Attempts exhausted. A step with a compensator stays Failed/TimedOut, marked ``GivenUp``, for
    ``plan_compensation`` to undo first (a timed-out attempt may have taken effect); a step without
    one is Cancelled (nothing to undo)."""
    args = GiveUpInput.model_validate(as_dict(payload, c.ACTIVITY_GIVE_UP_STEP))
    ledger = services.ledger
    grace = services.settings.watchdog_grace_seconds

    def decide(pair: tuple[StepRecord, InstanceHandle | None]) -> tuple[StepRecord, bool]:
        r, handle = pair
        if r.status in IN_FLIGHT:
            r = ledger.transition(
                r,
                S.TIMED_OUT,
                actor=ACTOR,
                reason=f"given up: {args.reason}",
                last_error=args.reason,
                deadline=grace_deadline(grace),
            )
        if r.status is S.PENDING or (
            r.status in NEEDS_RETRY_DECISION | {S.RETRYING} and r.compensator is None
        ):
            return (
                ledger.transition(
                    r,
                    S.CANCELLED,
                    actor=ACTOR,
                    reason=f"given up, nothing to undo: {args.reason}",
                    last_error=args.reason,
                    compensation_status=GIVEN_UP,
                    **with_promise(handle, now(), grace, r.orchestration_id),
                ),
                True,
            )
        if r.status in NEEDS_RETRY_DECISION | {S.RETRYING} and r.compensation_status != GIVEN_UP:
            return (
                ledger.update(
                    r,
                    actor=ACTOR,
                    reason=f"given up, to be compensated: {args.reason}",
                    last_error=args.reason,
                    compensation_status=GIVEN_UP,
                    deadline=grace_deadline(grace),
                    **with_promise(handle, now(), grace, r.orchestration_id),
                ),
                True,
            )
        return r, False

    record, changed = retry_on_conflict(
        lambda: ledger.read_step_and_instance(args.instance_id, args.step_id),
        decide,
        what=f"give up {args.step_id}",
    )
    if changed:
        emit_recovery(record, "give_up", reason=args.reason, to_be_compensated=record.compensator is not None)
    return _status(record, changed)


# ---- compensation ---------------------------------------------------------------------------------


def plan_compensation(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """What to undo, in order: steps that may have taken effect and have a compensator.

    Order: steps that never completed (the given-up step, or any caught in flight) first, then
    completed steps in reverse completion order. Steps that never ran, and failed steps without a
    compensator, become Cancelled. Steps already Compensated are left out; Compensating and
    CompensationFailed ones stay in (a re-run, or an operator-requested retry).
    """
    args = PlanInput.model_validate(as_dict(payload, c.ACTIVITY_PLAN_COMPENSATION))
    ledger = services.ledger
    grace = services.settings.watchdog_grace_seconds
    _start_compensating(ledger, args.instance_id, grace)
    records = ledger.list_for_instance(args.instance_id)
    definition = _definition_or_none(records[0], services) if records else None

    to_undo: list[StepRecord] = []
    cancelled: list[str] = []
    for record in records:

        def decide(r: StepRecord) -> tuple[StepRecord, bool]:
            if r.status in IN_FLIGHT:
                r = ledger.transition(
                    r,
                    S.TIMED_OUT,
                    actor=ACTOR,
                    reason="workflow is being compensated; in-flight attempt abandoned",
                    last_error=r.last_error or "abandoned by compensation",
                    deadline=grace_deadline(grace),
                )
            if r.status is S.PENDING or (
                r.status in NEEDS_RETRY_DECISION | {S.RETRYING} and r.compensator is None
            ):
                return ledger.transition(r, S.CANCELLED, actor=ACTOR, reason="workflow compensated"), True
            return r, False

        current, was_cancelled = retry_on_conflict(
            lambda record=record: ledger.get(record.instance_id, record.step_id),
            decide,
            what=f"plan {record.step_id}",
        )
        if was_cancelled:
            cancelled.append(current.step_id)
        elif current.compensator is not None and current.status in MAY_COMPENSATE:
            to_undo.append(current)

    never_completed = sorted((r for r in to_undo if r.completed_at is None), key=lambda r: -r.sequence)
    # Reverse completion order: the completion sequence the ledger wrote with each completion (one
    # counter per instance, in the same transaction), never a writer's clock; rows written before
    # the counter existed fall back to their completion time.
    completed = sorted(
        (r for r in to_undo if r.completed_at is not None),
        key=lambda r: (r.completion_seq is not None, r.completion_seq or 0, r.completed_at, r.sequence),
        reverse=True,
    )
    steps = [_plan_entry(r, definition) for r in never_completed + completed]
    return {"steps": steps, "cancelled": cancelled}


def _start_compensating(ledger: StepLedger, instance_id: str, grace: float) -> None:
    """The instance's record says Compensating from the moment the plan is made: work dispatch is
    fenced off, and the watchdog now watches the compensation orchestration, not the workflow's."""

    def decide(record: Any) -> None:
        if record is None or record.status is InstanceStatus.COMPENSATING:
            return
        if record.status not in (
            InstanceStatus.RUNNING,
            InstanceStatus.FAILED,
            InstanceStatus.COMPENSATION_FAILED,
        ):
            return
        ledger.transition_instance(
            record,
            InstanceStatus.COMPENSATING,
            actor=ACTOR,
            reason="compensation planned",
            scheduler_deadline=grace_deadline(grace),
            owner=ACTOR,
            stalls=0,
        )

    retry_on_conflict(lambda: ledger.find_instance(instance_id), decide, what=f"compensate {instance_id}")


def _definition_or_none(record: StepRecord, services: Services):
    """The definition the instance is pinned to (its steps carry the version)."""
    name, version = record.workflow_name, record.workflow_version
    try:
        from workflow_core.workflows.store import definition_for

        return definition_for(name, version, services.definitions if version else None)
    except Exception as exc:  # a run must stay compensatable even if its definition went away
        log.warning("workflow %r could not be loaded (%s); compensating with default policies", name, exc)
        return None


def _plan_entry(r: StepRecord, definition: Any) -> dict[str, Any]:
    compensation = None
    if definition is not None:
        try:
            compensation = definition.step(r.step_id).compensation
        except KeyError:
            compensation = None
    if compensation is not None:
        deadline_seconds = compensation.deadline_seconds
        retry = compensation.retry.model_dump()
    else:
        from workflow_core.workflows.retry import RetryPolicy

        deadline_seconds = FALLBACK_COMPENSATION_DEADLINE_SECONDS
        retry = RetryPolicy().model_dump()
    return {
        "step_id": r.step_id,
        "compensator": r.compensator,
        "input": step_input(r),
        "output": step_output(r),
        "deadline_seconds": deadline_seconds,
        "retry": retry,
        "status": r.status.value,
    }


def finish_compensation(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """The compensator's attempts are exhausted: -> CompensationFailed (the operators' inbox,
    ``ledger.needing_attention()``). Idempotent; a step that did get Compensated stays so."""
    args = FinishCompensationInput.model_validate(as_dict(payload, c.ACTIVITY_FINISH_COMPENSATION))
    ledger = services.ledger
    grace = services.settings.watchdog_grace_seconds

    def decide(pair: tuple[StepRecord, InstanceHandle | None]) -> tuple[StepRecord, bool]:
        r, handle = pair
        if r.status in (S.COMPENSATED, S.COMPENSATION_FAILED):
            return r, False
        if r.status in IN_FLIGHT:
            r = ledger.transition(
                r, S.TIMED_OUT, actor=ACTOR, reason="compensation gave up", deadline=grace_deadline(grace)
            )
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
            owner="operator",
            **with_promise(handle, now(), grace, r.orchestration_id),
        )
        log.warning("step %s/%s needs an operator: %s", r.instance_id, r.step_id, args.error)
        return updated, True

    record, changed = retry_on_conflict(
        lambda: ledger.read_step_and_instance(args.instance_id, args.step_id),
        decide,
        what=f"finish compensation {args.step_id}",
    )
    if changed:
        emit_recovery(record, "finish_compensation", error=args.error)
    return _status(record, changed)


def _status(r: StepRecord, changed: bool) -> dict[str, Any]:
    return {"instance_id": r.instance_id, "step_id": r.step_id, "status": r.status.value, "changed": changed}


# ---- bindings -------------------------------------------------------------------------------------
# Thin wrappers: the Functions worker decodes the activity input (JSON) and encodes the returned dict.


@bp.function_name(c.ACTIVITY_CREATE_STEPS)
@bp.activity_trigger(input_name="payload")
def create_workflow_steps_activity(payload: dict) -> dict:
    return create_workflow_steps(payload, get_services())


@bp.function_name(c.ACTIVITY_DISPATCH_STEP)
@bp.activity_trigger(input_name="payload")
def dispatch_step_activity(payload: dict) -> dict:
    return dispatch_step(payload, get_services())


@bp.function_name(c.ACTIVITY_CHECK_STEP)
@bp.activity_trigger(input_name="payload")
def check_step_activity(payload: dict) -> dict:
    return check_step(payload, get_services())


@bp.function_name(c.ACTIVITY_SCHEDULE_RETRY)
@bp.activity_trigger(input_name="payload")
def schedule_retry_activity(payload: dict) -> dict:
    return schedule_retry(payload, get_services())


@bp.function_name(c.ACTIVITY_GIVE_UP_STEP)
@bp.activity_trigger(input_name="payload")
def give_up_step_activity(payload: dict) -> dict:
    return give_up_step(payload, get_services())


@bp.function_name(c.ACTIVITY_PLAN_COMPENSATION)
@bp.activity_trigger(input_name="payload")
def plan_compensation_activity(payload: dict) -> dict:
    return plan_compensation(payload, get_services())


@bp.function_name(c.ACTIVITY_DISPATCH_COMPENSATION)
@bp.activity_trigger(input_name="payload")
def dispatch_compensation_activity(payload: dict) -> dict:
    return dispatch_compensation(payload, get_services())


@bp.function_name(c.ACTIVITY_CHECK_COMPENSATION)
@bp.activity_trigger(input_name="payload")
def check_compensation_activity(payload: dict) -> dict:
    return check_compensation(payload, get_services())


@bp.function_name(c.ACTIVITY_FINISH_COMPENSATION)
@bp.activity_trigger(input_name="payload")
def finish_compensation_activity(payload: dict) -> dict:
    return finish_compensation(payload, get_services())


# Plain bodies by activity name: the durable test host can route call_activity(name, input) here.
ACTIVITY_BODIES = {
    c.ACTIVITY_CREATE_STEPS: create_workflow_steps,
    c.ACTIVITY_DISPATCH_STEP: dispatch_step,
    c.ACTIVITY_CHECK_STEP: check_step,
    c.ACTIVITY_SCHEDULE_RETRY: schedule_retry,
    c.ACTIVITY_GIVE_UP_STEP: give_up_step,
    c.ACTIVITY_PLAN_COMPENSATION: plan_compensation,
    c.ACTIVITY_DISPATCH_COMPENSATION: dispatch_compensation,
    c.ACTIVITY_CHECK_COMPENSATION: check_compensation,
    c.ACTIVITY_FINISH_COMPENSATION: finish_compensation,
    c.ACTIVITY_SETTLE_INSTANCE: settle_instance,
}
