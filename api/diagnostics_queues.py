"""Queue probes of ``GET /api/diagnostics``: per transport, send a message no consumer can see and
delete it, then read the queue's depth and oldest message where the identity's rights allow.

Storage queues: a message invisible for five minutes, deleted by id and pop receipt. Service Bus: a
message *scheduled* an hour ahead and cancelled by sequence number (no receiver ever sees it); the
oldest message by a peek (needs Listen: the app holds it on the queues it hosts, not on the remote
pools' queues, where the depth is reported as not measurable rather than as a failure).

An answer queue gets a round trip instead (:func:`answer_round_trip`): a probe answer sent as the app
sends its answers, received back by its message id and completed: the only proof that an answer lands
where the pool's agent reads. The probe expires after a minute and an agent drops it (no
``attempt-status``), so a queue whose agent took it first is reported reachable. An agent's answer met
on the way stays locked until doctor is done and is then abandoned once, never dead-lettered.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from api.diagnostics_sections import Row, failure, row
from workflow_core import clock
from workflow_core.transport.envelope import DOCTOR_PROBE as PROBE_BODY

ANSWER_QUEUES_SETTING = "ANSWER_QUEUES"
ANSWER_WAIT_SECONDS = 10.0
ANSWER_PROBE_TTL = timedelta(minutes=1)


def _age(oldest: Any) -> str:
    if oldest is None:
        return "no visible message"
    return f"oldest message {int((clock.utcnow() - oldest).total_seconds())} s old"


def queues(services: Any) -> list[Row]:
    """Every pool queue and the result queue: a probe, depth and oldest message age where measurable."""
    from workflow_core.workflows.loader import agent_pools
    from workflow_core.workflows.pools import pool_queue

    s = services.settings
    names = [pool_queue(s.work_queue, pool) for pool in agent_pools().names] + [s.result_queue]
    try:
        transport = services.transport
    except Exception as exc:
        fix = "grant the app's identity send and receive rights on its queues (role-assignments.bicep)"
        return [row(f"queue {name}", False, failure(exc), fix) for name in names]
    return [diagnose(transport, name) for name in names]


def diagnose(transport: Any, queue: str) -> Row:
    from workflow_core.transport.servicebus import ServiceBusTransport
    from workflow_core.transport.storage_queue import StorageQueueTransport

    check = f"queue {queue}"
    if isinstance(transport, StorageQueueTransport):
        probe = _storage_queue
    elif isinstance(transport, ServiceBusTransport):
        probe = _service_bus
    else:
        return row(check, None, f"{type(transport).__name__} offers no probe (depth not measurable here)")
    try:
        return row(check, True, probe(transport, queue))
    except Exception as exc:
        fix = f"grant the app's identity the send right on {queue} (infra/modules/role-assignments.bicep)"
        return row(check, False, failure(exc), fix)


def _storage_queue(transport: Any, queue: str) -> str:
    client = transport._client(queue)
    sent = client.send_message(PROBE_BODY, visibility_timeout=300)
    client.delete_message(sent.id, pop_receipt=sent.pop_receipt)
    depth = client.get_queue_properties().approximate_message_count
    peeked = client.peek_messages(max_messages=1)
    return f"probe sent and deleted; depth {depth}; {_age(peeked[0].inserted_on if peeked else None)}"


def _service_bus(transport: Any, queue: str) -> str:
    from azure.servicebus import ServiceBusMessage

    client = transport._client
    with client.get_queue_sender(queue) as sender:
        numbers = sender.schedule_messages(ServiceBusMessage(PROBE_BODY), clock.utcnow() + timedelta(hours=1))
        sender.cancel_scheduled_messages(numbers)
    try:
        with client.get_queue_receiver(queue) as receiver:
            peeked = receiver.peek_messages(max_message_count=1)
    except Exception:
        return "probe scheduled and cancelled; depth not readable with a send-only role"
    return f"probe scheduled and cancelled; {_age(peeked[0].enqueued_time_utc if peeked else None)}"


def answer_round_trip(transport: Any, queue: str) -> Row:
    """Send a probe answer to ``queue`` and read it back (the module's docstring says how)."""
    from workflow_core.transport.base import OutgoingMessage
    from workflow_core.transport.servicebus import ServiceBusTransport

    bus = isinstance(transport, ServiceBusTransport)
    role = "Azure Service Bus Data Sender" if bus else "Storage Queue Data Contributor"
    check, probe, step = f"answer queue {queue}", f"{PROBE_BODY}:{uuid.uuid4().hex}", "send a probe answer to"
    expires = clock.utcnow() + ANSWER_PROBE_TTL
    try:
        transport.send(
            queue, OutgoingMessage({"text": PROBE_BODY}, probe, subject=PROBE_BODY, expires_at=expires)
        )
        step, role = "receive from", role.replace("Sender", "Receiver")
        with (_own_receiver if bus else _receiver)(transport, queue) as (receive, complete, abandon):
            found, others = _read_back(probe, receive, complete, abandon)
    except Exception as exc:
        fix = f"infra creates {queue} (the pool's answerQueues) and grants the app's identity {role} on it"
        detail = f"cannot {step} it: {failure(exc)}"
        return row(check, False, detail, f"{fix} (infra/modules/role-assignments.bicep): deploy")
    met = f"; {others} agent answer(s) met and left in place" if others else ""
    if found:
        return row(check, True, f"probe answer sent and read back{met}")
    detail = (
        f"reachable, probe consumed by the pool's agent: the app sent its probe answer and may receive "
        f"there, but the probe was gone within {ANSWER_WAIT_SECONDS:.0f} s (an agent read it first and "
        f"dropped it, as agents drop doctor probes){met}"
    )
    return row(check, True, detail)


def answer_queues(services: Any) -> list[Row]:
    """Each answer queue of ``ANSWER_QUEUES`` (infra names them): a probe answer sent and read back."""
    names = [q.strip() for q in (os.environ.get(ANSWER_QUEUES_SETTING) or "").split(",") if q.strip()]
    if not names:
        return [
            row("answer queues", None, f"{ANSWER_QUEUES_SETTING} names none (no pool asks on Service Bus)")
        ]
    return [answer_round_trip(services.transport, name) for name in names]


def _read_back(probe: str, receive: Any, complete: Any, abandon: Any) -> tuple[bool, int]:
    """Receive until the probe (by message id) or the wait ends; complete the probe only. Every other
    message stays locked until then (so none is received twice) and is abandoned once at the end."""
    held: list[Any] = []
    deadline = time.monotonic() + ANSWER_WAIT_SECONDS
    found = False
    try:
        while not found and (left := deadline - time.monotonic()) > 0:
            for message in receive(left):
                ident = message.message_id
                if (ident.decode() if isinstance(ident, bytes) else ident) == probe:
                    complete(message)
                    found = True
                else:
                    held.append(message)
    finally:
        for message in held:
            with contextlib.suppress(Exception):  # its lock lapses anyway
                abandon(message)
    return found, len(held)


@contextlib.contextmanager
def _receiver(transport: Any, queue: str) -> Iterator[tuple[Callable[[float], list[Any]], Any, Any]]:
    """Through the transport itself (Storage Queues: no link to keep)."""
    yield (
        lambda left: transport.receive(queue, max_messages=32, lock_seconds=60, wait_seconds=left),
        transport.complete,
        transport.abandon,
    )


@contextlib.contextmanager
def _own_receiver(transport: Any, queue: str) -> Iterator[tuple[Callable[[float], list[Any]], Any, Any]]:
    """A Service Bus receiver of its own, closed afterwards (no prefetch): the transport keeps its
    receivers open for the queues the app consumes, and none may hold an agent's answer after this."""
    with transport._client.get_queue_receiver(queue, prefetch_count=0) as receiver:
        yield (
            lambda left: receiver.receive_messages(max_message_count=32, max_wait_time=max(left, 1)),
            receiver.complete_message,
            receiver.abandon_message,
        )
