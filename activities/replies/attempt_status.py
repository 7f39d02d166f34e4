"""A heartbeat naming an ``answer_queue`` is answered there with an ``AttemptStatus``: what became of
it (``agent_reports``), ``current`` or why not; never a token (docs/agents.md).

Only queues named ``<RESULT_QUEUE_NAME>-answers-...`` are answered, so a forged heartbeat can never
make the app write into its own queues (the refusal is audited). An undeliverable answer is logged
and changes nothing: the heartbeat's outcome stands.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import Any

from activities.common import parse_or_park
from activities.replies.agent_reports import ACTOR, Verdict, apply_heartbeat
from workflow_core import clock
from workflow_core.contracts import AttemptStatus, Heartbeat
from workflow_core.ledger.scheduler_gone import bring_forward, is_alive, may_bring_forward
from workflow_core.message_fields import MAX_REASON_CHARS, fit_text
from workflow_core.runtime import Services
from workflow_core.transport import OutgoingMessage, TransportError

log = logging.getLogger(__name__)

ANSWERS_INFIX = "-answers-"
ANSWER_TTL = timedelta(minutes=10)  # an answer nobody read by then is of no use: the queue drops it
REFUSED_ANSWER = "attempt-status-refused"  # audit action: an answer queue the app does not write


def answer_queue_prefix(services: Services) -> str:
    """Every answer queue's name begins with this: ``<RESULT_QUEUE_NAME>-answers-``."""
    return f"{services.settings.result_queue}{ANSWERS_INFIX}"


async def handle_heartbeat(
    body: Any, services: Services, client: Any = None, *, message_id: str | None = None
) -> str:
    """A heartbeat on the result queue, answered on its ``answer_queue`` if it names one (a malformed
    one is parked, never answered); returns the heartbeat's outcome. An accepted one also looks
    whether its instance's scheduler still runs (``client``: the durable client)."""
    beat = parse_or_park(Heartbeat, body, services, source="result", actor=ACTOR, message_id=message_id)
    if isinstance(beat, str):
        return "parked"
    verdict = apply_heartbeat(beat, services)
    if beat.answer_queue is not None:
        answer(beat, verdict, services)
    if verdict.outcome == "heartbeat" and client is not None:
        await look_for_scheduler(verdict, client, services)
    return verdict.outcome


async def look_for_scheduler(verdict: Verdict, client: Any, services: Services) -> None:
    """One status read of the scheduler of an accepted beat's instance while it owns it and its promise
    is not due yet; a gone scheduler makes the instance due now (``ledger.scheduler_gone``)."""
    r = verdict.record
    if r is None:
        return
    orchestration_id = r.orchestration_id or r.instance_id
    if not may_bring_forward(verdict.instance, orchestration_id, clock.utcnow()):
        return
    try:
        status = await client.get_status(orchestration_id)
    except Exception as exc:  # the status is not known: the promise stands, the watchdog finds it then
        log.warning("%s: status of %s not read: %s", r.instance_id, orchestration_id, exc)
        return
    if not is_alive(status):
        name = getattr(getattr(status, "runtime_status", None), "value", None) or "not found"
        why = f"a heartbeat of {r.step_id} attempt {r.attempt} found it {name}"
        bring_forward(services.ledger, verdict.instance, orchestration_id, actor=ACTOR, why=why)


def answer(beat: Heartbeat, verdict: Verdict, services: Services) -> str:
    """Send ``beat``'s answer: ``answered``, ``refused`` (not an answer queue) or ``undelivered``."""
    queue = beat.answer_queue or ""
    prefix = answer_queue_prefix(services)
    where = f"{beat.instance_id}/{beat.step_id}#{beat.attempt}"
    if not queue.startswith(prefix) or len(queue) == len(prefix):
        why = f"heartbeat not answered: answer queue {queue!r} does not begin with {prefix!r}"
        log.warning("%s: %s", where, why)
        if verdict.record is not None:  # no step, no audit trail: the log line is all there is
            ids = (beat.instance_id, beat.step_id)
            services.ledger.note(*ids, actor=ACTOR, action=REFUSED_ANSWER, reason=why, attempt=beat.attempt)
        return "refused"
    r = verdict.record
    status = AttemptStatus(
        type="attempt-status",
        **beat.model_dump(include={"kind", "instance_id", "step_id", "attempt", "correlation_id"}),
        current=verdict.outcome == "heartbeat",
        status=r.status if r is not None else None,
        deadline=r.deadline.isoformat() if r is not None and r.deadline is not None else None,
        reason=fit_text(verdict.reason, MAX_REASON_CHARS),
    )
    message = OutgoingMessage(
        body=status.model_dump(mode="json"),
        message_id=f"attempt-status:{where}:{uuid.uuid4().hex}",
        correlation_id=beat.correlation_id,
        subject="attempt-status",
        expires_at=clock.utcnow() + ANSWER_TTL,
    )
    try:
        services.transport.send(queue, message)
    except TransportError as exc:  # the agent's queue is gone or was never made: its loss, not ours
        log.warning("%s: answer to %s not delivered (the heartbeat stands): %s", where, queue, exc)
        return "undelivered"
    log.info("%s: answered on %s: current=%s", where, queue, status.current)
    return "answered"
