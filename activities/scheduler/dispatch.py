"""``dispatch_step`` and ``dispatch_compensation``: write the intent to the ledger, then send the message.

Safe to run twice: each rule reads only the ledger, or writes ETag-guarded against a version the
ledger proves current. The send is not recorded (MessageId deduplication and the worker's ETag claim
make "sent" unnecessary); one that keeps failing is no activity failure: the deadline recovers it.
"""

from __future__ import annotations

import functools
import logging
import secrets
import time
from datetime import datetime
from typing import Any, Literal

from opentelemetry import trace
from opentelemetry.trace import SpanKind
from pydantic import BaseModel

from activities.common import (
    audit,
    decide_on_step,
    emit_recovery,
    grace_deadline,
    iso,
    parse_time,
    retry_on_conflict,
)
from activities.scheduler.inputs import ACTOR, IN_FLIGHT, MAY_COMPENSATE, NEEDS_RETRY_DECISION, S, time_out
from activities.scheduler.instances import BASIS_REFUSED, basis_rows, refused, with_promise, works_on
from activities.scheduler.limits_gate import hold_back, is_limited
from activities.verification import UNDOING, attempt_token
from workflow_core import contracts as c
from workflow_core import telemetry, tracing
from workflow_core.contracts import StepDispatch
from workflow_core.ledger import InstanceHandle, LedgerError, StepLedger, StepRecord, encode_json
from workflow_core.ledger.known_rows import KnownStepRecord, known_instance, watched_in
from workflow_core.ledger.model import COMP_DISPATCHED, COMP_FAILED
from workflow_core.messages import ClaimableWork, work_message
from workflow_core.payloads import INLINE_PAYLOAD_CHARS, is_reference
from workflow_core.runtime import Services
from workflow_core.starter import describe_error
from workflow_core.transport import OutgoingMessage, TransportError, message_id_for
from workflow_core.workflows.loader import agent_pools
from workflow_core.workflows.pools import pool_queue, route_pool

log = logging.getLogger(__name__)

# Pauses between quick re-tries of a failed send inside one dispatch (then the deadline takes over).
SEND_RETRY_DELAYS = (0.2, 1.0)

DispatchResult = Literal[
    "dispatched", "already-dispatched", "settled", "stale", "not-dispatchable", "basis-refused", "waiting"
]


class DispatchOutcome(BaseModel):
    """What a dispatch activity did (``outcome``: ``orchestrators.decisions.after_dispatch``);
    ``error``: why the send failed even after quick retries (the deadline then recovers the step)."""

    instance_id: str
    step_id: str
    kind: c.StepKind
    attempt: int
    outcome: DispatchResult
    status: str | None
    message_id: str
    sent: bool
    deadline: str | None = None
    error: str | None = None
    # the attempt's ledger token: a result event carrying it was confirmed against the ledger
    token: str | None = None
    # waiting: the agent's limits held the step back (``error``); ask again then, or on event ``wake``
    retry_after: float | None = None
    wake: str | None = None


def dispatch_step(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """Ledger Pending/Retrying -> Dispatched (owner, attempt, deadline, orchestration id, input)
    *then* send the work message (MessageId ``message_id_for(instance, step, attempt)``); a re-run
    sends again only as :func:`may_send_again` says."""
    dispatch = StepDispatch.model_validate(payload)
    if dispatch.kind != "work":
        raise ValueError(f"{c.ACTIVITY_DISPATCH_STEP} sends work; use {c.ACTIVITY_DISPATCH_COMPENSATION}")
    return _dispatch(dispatch, services).model_dump()


def dispatch_compensation(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """Ledger -> Compensating (compensation_attempt, owner, deadline) *then* send the compensate
    message to the step's compensator agent; idempotent like :func:`dispatch_step`."""
    return _dispatch(StepDispatch.model_validate({**payload, "kind": "compensate"}), services).model_dump()


def _dispatch(d: StepDispatch, services: Services) -> DispatchOutcome:
    """A PRODUCER span under the workflow's trace: its context goes to the ledger row with the
    Dispatched/Compensating write and, from the row, into the work message."""
    queue = services.settings.work_queue
    message_id = message_id_for(d.instance_id, d.step_id, d.attempt, kind=d.kind)
    with tracing.span(
        f"send {queue}",
        parent=d.trace,
        kind=SpanKind.PRODUCER,
        attributes={
            **tracing.messaging_attributes(services.settings.transport, queue, "send", message_id),
            **{f"sas.{k}": getattr(d, k) for k in ("instance_id", "step_id", "attempt", "workflow", "kind")},
        },
    ):
        # the span's own context; the input's when this process exports no traces (keep the chain)
        recorded = tracing.current() or tracing.clean(d.trace) or None
        return _dispatch_in_span(d.model_copy(update={"trace": recorded}), services, message_id)


def _dispatch_in_span(d: StepDispatch, services: Services, message_id: str) -> DispatchOutcome:
    ledger = services.ledger
    # the input as row and message carry it: itself, or a reference to a blob written first (payloads)
    d = d.model_copy(update={"input": services.payloads.stored(d.input)})
    deadline = parse_time(d.deadline, "deadline")
    grace = services.settings.watchdog_grace_seconds
    # a work message a worker may claim unread (built with the Dispatched write); written unread, it
    # also names the steps the instance's row watched
    keyed = bool(d.provisional)
    watched = watched_in(d.expected.instance) if d.expected is not None else None
    claimable = ClaimableWork(watched, keyed) if d.kind == "work" else None

    held: list[Any] = []  # the waiting answer of the agent's limits

    def decide(pair: tuple[StepRecord, InstanceHandle | None]) -> tuple[StepRecord, DispatchResult, Any]:
        r, handle = pair
        if d.kind == "work":
            if (waiting := hold_back(services, r, handle, d, deadline)) is not None:
                held[:] = [waiting]
                return r, "waiting", handle
            return (*decide_work_dispatch(ledger, r, handle, d, deadline, grace, claimable), handle)
        return (*decide_compensation_dispatch(ledger, r, handle, d, deadline, grace), handle)

    limited = d.held or (d.expected is not None and is_limited(d.expected.agent))
    unread = None if limited else dispatch_unread(ledger, d, deadline, grace, claimable)
    if unread is not None:
        record, outcome, handle = unread
    else:
        why = refused(ledger, d.instance_id, d.basis, by=f"dispatch of {d.step_id!r}")
        if why is not None:  # the step the scheduler built on is not what the ledger recorded
            return _answer(d, message_id, BASIS_REFUSED, status=None, sent=False, error=why)
        if claimable is not None:  # a read does not say which steps the row watches
            claimable = ClaimableWork(None, keyed)
        what = f"dispatch {d.kind} {d.instance_id}/{d.step_id}#{d.attempt}"
        record, outcome, handle = decide_on_step(ledger, d.instance_id, d.step_id, decide, what)
    if outcome == "waiting":
        wait = {"error": held[0].reason, "retry_after": held[0].retry_after, "wake": held[0].wake}
        return _answer(d, message_id, outcome, status=record.status.value, sent=False, **wait)
    instance = handle.record if handle is not None else None
    if outcome == "dispatched" and (failed := fail_blob_input(record, d, services)) is not None:
        record, outcome = failed, "settled"  # a message-only agent cannot read its input's blob
    sent, error, at = False, None, iso(record.deadline)
    if outcome == "dispatched" or (outcome == "already-dispatched" and may_send_again(record, d)):
        if claimable is not None and outcome == "dispatched":
            message = claimable.message(record, instance)
        else:
            message = work_message(record, d.kind, input=None if d.kind == "work" else d.input)
        try:
            queue = _send(message, d, services)
            sent = True
            log.info("sent %s %s to %s (outcome %s)", d.kind, message_id, queue, outcome)
        except TransportError as exc:  # no activity failure: the deadline recovers it (module docstring)
            error = describe_error(exc)
            log.warning("could not send %s (%s); the deadline will recover it", message_id, error)
            why = f"{d.kind} message {message_id} not sent: {error}; recovery at the deadline {at}"
            audit(ledger, record, ACTOR, "send-failed", why, d.attempt)
            emit_recovery(
                record, "send_failed", attempt=d.attempt, outcome=telemetry.OUTCOME_ERROR, error=error
            )
    if d.kind == "compensate" and outcome == "dispatched":
        emit_recovery(record, "compensate", attempt=d.attempt, compensator=record.compensator)
    token = (
        attempt_token(record, d.kind, d.attempt) if outcome in ("dispatched", "already-dispatched") else None
    )
    return _answer(
        d, message_id, outcome, status=record.status.value, sent=sent, deadline=at, error=error, token=token
    )


def _answer(d: StepDispatch, message_id: str, outcome: DispatchResult, **fields: Any) -> DispatchOutcome:
    ids = d.model_dump(include={"instance_id", "step_id", "kind", "attempt"})
    return DispatchOutcome(**ids, outcome=outcome, message_id=message_id, **fields)


def _send(message: OutgoingMessage, d: StepDispatch, services: Services) -> str:
    """Send to the agent's pool's queue (returned), retrying a few times at once: the same MessageId
    deduplicates a send that did reach the broker; the last ``TransportError`` propagates."""
    pool = route_pool(agent_pools(), message.body)  # the agent's pool (a canary run: the one it names)
    queue = pool_queue(services.settings.work_queue, pool)
    span = trace.get_current_span()
    span.update_name(f"send {queue}")
    span.set_attributes({"messaging.destination.name": queue, "sas.pool": pool})
    for delay in (*SEND_RETRY_DELAYS, None):
        try:
            services.transport.send(queue, message)
            return queue
        except TransportError as exc:
            if delay is None:
                raise
            log.info("send of %s %s#%d failed (%s); retrying", d.kind, d.step_id, d.attempt, exc)
            time.sleep(delay)


def dispatch_unread(
    ledger: StepLedger,
    d: StepDispatch,
    deadline: datetime,
    grace: float,
    claimable: ClaimableWork | None = None,
) -> tuple[StepRecord, DispatchResult, InstanceHandle] | None:
    """A first work attempt written unread, If-Match the ETags the scheduler carried (``d.expected``):
    it lands only if neither row changed since. Only a write counts: anything else (a lost race, a copy
    the ledger refuses, a decision a copy alone cannot prove) returns None: read instead."""
    e = d.expected
    if e is None or d.kind != "work" or d.attempt != 1:
        return None
    try:
        record = KnownStepRecord(
            **e.model_dump(exclude={"step_etag", "instance"}),  # the step's fields the starter wrote
            instance_id=d.instance_id,
            step_id=d.step_id,
            workflow_name=d.workflow,
            orchestration_id=d.instance_id,  # as the starter writes it
            etag=e.step_etag,
        )
        handle = InstanceHandle(known_instance(e.instance))
        if handle.record.instance_id != d.instance_id or not works_on(handle):
            return None
        written, outcome = decide_work_dispatch(
            ledger, record, handle, d, deadline, grace, claimable, also=basis_rows(d.instance_id, d.basis)
        )
    except (LedgerError, ValueError) as exc:  # 412/404 and refused copies alike: read instead
        log.info("dispatch of %s/%s#1 reads the ledger: %s", d.instance_id, d.step_id, exc)
        return None
    return (written, outcome, handle) if outcome == "dispatched" else None


def decide_work_dispatch(
    ledger: StepLedger,
    r: StepRecord,
    handle: InstanceHandle | None,
    d: StepDispatch,
    deadline: datetime,
    grace: float,
    claimable: ClaimableWork | None = None,
    also: list[tuple] | None = None,
) -> tuple[StepRecord, DispatchResult]:
    """``claimable``: the message a worker may claim unread, its claim-key row written with the
    Dispatched transition (``messages.ClaimableWork``); ``also``: more of that transaction."""
    if r.attempt == d.attempt and r.status in (IN_FLIGHT | NEEDS_RETRY_DECISION | {S.SUCCEEDED}):
        if r.status in IN_FLIGHT and r.orchestration_id != d.orchestration_id and works_on(handle):
            # a resumed scheduler takes over an attempt a dead one dispatched: its results go here now
            reason = (
                f"orchestration {d.orchestration_id} took over attempt {r.attempt} from {r.orchestration_id}"
            )
            promise = with_promise(handle, r.deadline or deadline, grace, d.orchestration_id)
            r = ledger.update(r, actor=ACTOR, reason=reason, orchestration_id=d.orchestration_id, **promise)
        return r, "already-dispatched"
    if r.status in (S.SUCCEEDED, S.SKIPPED):
        return r, "settled"
    if not works_on(handle):
        return r, "not-dispatchable"  # the instance is compensating or settled: fenced off
    if r.status in (S.PENDING, S.RETRYING) and d.attempt > r.attempt:
        updated = ledger.transition(
            r,
            S.DISPATCHED,
            actor=ACTOR,
            reason=f"dispatch attempt {d.attempt} to agent {r.agent}",
            owner=f"agent:{r.agent}",
            attempt=d.attempt,
            input_ref=encode_json(d.input),
            with_rows=lambda step, instance: [
                *(claimable.rows(step, instance) if claimable is not None else []),
                *(also or []),
            ],
            **new_attempt(d, handle, deadline, grace),
        )
        return updated, "dispatched"
    return r, "stale" if r.attempt >= d.attempt else "not-dispatchable"


def new_attempt(
    d: StepDispatch, handle: InstanceHandle | None, deadline: datetime, grace: float
) -> dict[str, Any]:
    """The fields every dispatch writes with its transition: a fresh attempt token, no watchdog
    re-send or heartbeat yet, its trace, and the scheduler's promise."""
    return {
        "deadline": deadline,
        "orchestration_id": d.orchestration_id,
        "resent_at": None,
        "last_heartbeat": None,
        "attempt_token": secrets.token_hex(16),
        **tracing.ledger_fields(d.trace),
        **with_promise(handle, deadline, grace, d.orchestration_id),
    }


def decide_compensation_dispatch(
    ledger: StepLedger,
    r: StepRecord,
    handle: InstanceHandle | None,
    d: StepDispatch,
    deadline: datetime,
    grace: float,
) -> tuple[StepRecord, DispatchResult]:
    if r.compensation_attempt == d.attempt and r.status in UNDOING:
        return r, "already-dispatched"
    if r.status is S.COMPENSATED:
        return r, "settled"
    if r.compensator is None:
        return r, "not-dispatchable"
    r = time_out(ledger, r, grace, "compensation requested while an attempt was in flight")
    if r.status in MAY_COMPENSATE and d.attempt > r.compensation_attempt:
        updated = ledger.transition(
            r,
            S.COMPENSATING,
            actor=ACTOR,
            reason=f"dispatch compensation attempt {d.attempt} to agent {r.compensator}",
            owner=f"agent:{r.compensator}",
            compensation_attempt=d.attempt,
            compensation_status=COMP_DISPATCHED,
            **new_attempt(d, handle, deadline, grace),
        )
        return updated, "dispatched"
    return r, "stale" if r.compensation_attempt >= d.attempt else "not-dispatchable"


def may_send_again(r: StepRecord, d: StepDispatch) -> bool:
    """Does a re-run of the dispatch send again (same MessageId)? The first send is not recorded: so
    while the attempt waits for an agent and the watchdog has not re-sent it (one re-send is enough)."""
    if r.resent_at is not None:
        return False
    if d.kind == "work":
        return r.status is S.DISPATCHED and r.attempt == d.attempt
    return (
        r.status is S.COMPENSATING
        and r.compensation_attempt == d.attempt
        and r.compensation_status == COMP_DISPATCHED
    )


def fail_blob_input(record: StepRecord, d: StepDispatch, services: Services) -> StepRecord | None:
    """The row with the attempt failed, non-retryable (no retry makes the input smaller), when the
    agent's pool is message-only and the input ``d.input`` (a compensation's: a member of it) is stored
    by blob reference: such agents cannot read blobs, so nothing is sent (docs/agents.md, "Write an
    agent in another language"). None when the message may be sent."""
    agent = (record.agent if d.kind == "work" else record.compensator) or ""
    pools = agent_pools()
    blob = is_reference(d.input) or any(map(is_reference, d.input.values()))
    if not blob or not pools.is_message_only(pools.pool_of(agent)):
        return None
    error = (
        f"the {d.kind} input for agent {agent!r} is over {INLINE_PAYLOAD_CHARS:,} characters of JSON and "
        f"stored by blob reference, and its pool {pools.pool_of(agent)!r} is message-only: its agents "
        "cannot read blobs, so the message is not sent (work for a message-only pool is inline only)"
    )
    ledger, deadline = services.ledger, grace_deadline(services.settings.watchdog_grace_seconds)
    fields = {
        "actor": ACTOR,
        "reason": error,
        "last_error": error,
        "non_retryable": True,
        "deadline": deadline,
    }

    def decide(r: StepRecord) -> StepRecord:
        if d.kind == "work":
            current = r.status is S.DISPATCHED and r.attempt == d.attempt
            return ledger.transition(r, S.FAILED, **fields) if current else r
        current = r.status is S.COMPENSATING and r.compensation_attempt == d.attempt
        if not current or r.compensation_status != COMP_DISPATCHED:
            return r
        return ledger.update(r, compensation_status=COMP_FAILED, **fields)

    read = functools.partial(ledger.get, record.instance_id, record.step_id)
    return retry_on_conflict(read, decide, what=f"refuse the blob input of {d.kind} {d.step_id}")
