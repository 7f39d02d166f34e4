"""``dispatch_step`` and ``dispatch_compensation``: write the intent to the ledger, then send the message.

Both follow one protocol (ledger first, send second) and share the send with its quick retries, so
they live together: the work and the compensation rules differ only in how the ledger row is moved
(``decide_work_dispatch`` / ``decide_compensation_dispatch``). The send itself is not recorded:
the Dispatched/Compensating write before it implies it, and a third write per step would only tell
"never sent" from "sent" apart, which MessageId deduplication and the worker's ETag claim make
unnecessary (a duplicate work message runs once; the other delivery re-sends the recorded reply or
is ignored). A send that keeps failing is not an activity failure: the intent is in the ledger and
the step recovers at its deadline (the orchestration's timer, or the watchdog's one re-send).
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

from opentelemetry.trace import SpanKind
from pydantic import BaseModel

from activities.common import (
    as_dict,
    emit_recovery,
    error_text,
    iso,
    parse_time,
    retry_on_conflict,
)
from activities.scheduler.basis import BASIS_REFUSED, refused
from activities.scheduler.dispatch_rules import (
    DispatchResult,
    decide_compensation_dispatch,
    decide_work_dispatch,
    dispatch_unread,
    may_send_again,
)
from activities.scheduler.inline_only import fail_blob_input
from activities.scheduler.inputs import ACTOR
from activities.verification import attempt_token
from workflow_core import contracts as c
from workflow_core import telemetry, tracing
from workflow_core.contracts import StepDispatch
from workflow_core.ledger import InstanceHandle, StepRecord
from workflow_core.ledger.known_rows import watched_in
from workflow_core.messages import ClaimableWork, work_message
from workflow_core.runtime import Services
from workflow_core.transport import OutgoingMessage, TransportError, message_id_for

log = logging.getLogger(__name__)

# Pauses between quick re-tries of a failed send inside one dispatch (then the deadline takes over).
SEND_RETRY_DELAYS = (0.2, 1.0)


class DispatchOutcome(BaseModel):
    """What a dispatch activity did.

    ``outcome``: ``dispatched`` (ledger moved, message sent), ``already-dispatched`` (this attempt
    was dispatched before; the same message, same MessageId, was sent again only while the attempt
    still waits for an agent and the watchdog has not re-sent it), ``settled`` (the
    step is already done: Succeeded by another attempt, Skipped, or Compensated; nothing sent, do
    not wait for a result), ``stale`` (the ledger is at a later attempt; nothing done),
    ``not-dispatchable`` (the status does not allow it, e.g. Cancelled, or no compensator; nothing
    done), ``basis-refused`` (the previous step's success the scheduler took unread is not what the
    ledger recorded, ``activities.scheduler.basis``; nothing done, ``error`` says why). ``status`` is
    the ledger status afterwards. ``sent``: whether this call sent the message;
    if sending failed even after a few quick retries, ``sent`` is false, ``error`` says why and the
    step (its intent already in the ledger) recovers at its deadline.
    """

    instance_id: str
    step_id: str
    kind: c.StepKind
    attempt: int
    outcome: DispatchResult
    status: str | None  # None: not read (``basis-refused``)
    message_id: str
    sent: bool
    deadline: str | None = None
    error: str | None = None  # why the send failed (the step then recovers at its deadline)
    # The attempt's ledger token (dispatched / already-dispatched): a result event carrying it was
    # confirmed by the result handler against the ledger (contracts.ConfirmedResult).
    token: str | None = None


# ---- dispatch -------------------------------------------------------------------------------------


def dispatch_step(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """Ledger Pending/Retrying -> Dispatched (owner, attempt, deadline, orchestration id, input) *then*
    send the work message (MessageId ``message_id_for(instance, step, attempt)``). Nothing is written
    after the send.

    A second call for the same attempt (the activity re-run after a crash, or a resumed scheduler)
    cannot know whether the first one sent, so it sends again while the row is still Dispatched at
    that attempt and the watchdog has not re-sent it (``resent_at`` None): the same MessageId, so if
    the first send did go out the copy is a duplicate the broker or the worker's claim absorbs. Once
    an agent claimed the attempt, or the watchdog re-sent it, a re-run sends nothing."""
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
    # The input as the ledger row and the message carry it: itself, or (above a ledger property) a
    # reference to the blob written here, before any row or message names it (workflow_core.payloads).
    d = d.model_copy(update={"input": services.payloads.stored(d.input)})
    deadline = parse_time(d.deadline, "deadline")
    grace = services.settings.watchdog_grace_seconds
    # a work message a worker may claim without reading (built with the Dispatched write); written
    # unread, against the snapshot the scheduler carried, it also names the steps that row watched
    keyed = bool(d.provisional)
    watched = watched_in(d.expected.instance) if d.expected is not None else None
    claimable = ClaimableWork(watched, keyed) if d.kind == "work" else None
    handles: list[InstanceHandle | None] = [None]
    message_id = message_id_for(d.instance_id, d.step_id, d.attempt, kind=d.kind)

    def decide(pair: tuple[StepRecord, InstanceHandle | None]) -> tuple[StepRecord, DispatchResult]:
        handles[0] = pair[1]
        if d.kind == "work":
            return decide_work_dispatch(ledger, pair[0], pair[1], d, deadline, grace, claimable)
        return decide_compensation_dispatch(ledger, pair[0], pair[1], d, deadline, grace)

    unread = dispatch_unread(ledger, d, deadline, grace, claimable)
    if unread is not None:
        record, outcome, handles[0] = unread
    else:
        why = refused(ledger, d.instance_id, d.basis, by=f"dispatch of {d.step_id!r}")
        if why is not None:  # the step the scheduler built on is not what the ledger recorded
            return _answer(d, message_id, BASIS_REFUSED, status=None, sent=False, error=why)
        if claimable is not None:  # a read does not say which steps the row watches
            claimable = ClaimableWork(None, keyed)
        record, outcome = retry_on_conflict(
            lambda: ledger.read_step_and_instance(d.instance_id, d.step_id),
            decide,
            what=f"dispatch {d.kind} {d.instance_id}/{d.step_id}#{d.attempt}",
        )
    instance = handles[0].record if handles[0] is not None else None
    if outcome == "dispatched" and (failed := fail_blob_input(record, d, services)) is not None:
        record, outcome = failed, "settled"  # a message-only agent cannot read its input's blob
    sent = False
    error = None
    if outcome == "dispatched" or (outcome == "already-dispatched" and may_send_again(record, d)):
        if claimable is not None and outcome == "dispatched":
            message = claimable.message(record, instance)
        else:
            message = work_message(record, d.kind, input=None if d.kind == "work" else d.input)
        try:
            _send(message, d, services)
            sent = True
            log.info("sent %s %s (outcome %s)", d.kind, message_id, outcome)
        except TransportError as exc:
            # The intent is in the ledger (Dispatched/Compensating with a deadline): failing the
            # activity would fail the whole orchestration, while the deadline recovers this (the
            # orchestration's timer retries the step; past the grace the watchdog re-sends once).
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
    return _answer(
        d,
        message_id,
        outcome,
        status=record.status.value,
        sent=sent,
        deadline=iso(record.deadline),
        error=error,
        token=attempt_token(record, d.kind, d.attempt) if outcome in _TOKEN_OUTCOMES else None,
    )


def _answer(d: StepDispatch, message_id: str, outcome: DispatchResult, **fields: Any) -> DispatchOutcome:
    """The activity's answer about dispatch ``d``."""
    return DispatchOutcome(
        instance_id=d.instance_id,
        step_id=d.step_id,
        kind=d.kind,
        attempt=d.attempt,
        outcome=outcome,
        message_id=message_id,
        **fields,
    )


_TOKEN_OUTCOMES = frozenset({"dispatched", "already-dispatched"})


def _send(message: OutgoingMessage, d: StepDispatch, services: Services) -> None:
    """Send the message of ``d`` (built from the ledger row); nothing is recorded afterwards.

    A send that fails is retried a few times at once (the same MessageId, so a send that did reach
    the broker is deduplicated); the last ``TransportError`` propagates.
    """
    send = functools.partial(services.transport.send, services.settings.work_queue, message)
    for delay in (*SEND_RETRY_DELAYS, None):
        try:
            send()
            return
        except TransportError as exc:
            if delay is None:
                raise
            log.info("send of %s %s#%d failed (%s); retrying", d.kind, d.step_id, d.attempt, exc)
            time.sleep(delay)
