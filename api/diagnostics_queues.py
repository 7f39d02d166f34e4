"""Queue probes of ``GET /api/diagnostics``: per transport, send a message no consumer can see and
delete it, then read the queue's depth and oldest message where the identity's rights allow.

Storage queues: a message invisible for five minutes, deleted by id and pop receipt. Service Bus: a
message *scheduled* an hour ahead and cancelled by sequence number (no receiver ever sees it); the
oldest message by a peek (needs Listen: the app holds it on the queues it hosts, not on the remote
pools' queues, where the depth is reported as not measurable rather than as a failure).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from workflow_core import clock
from workflow_core.transport.envelope import DOCTOR_PROBE as PROBE_BODY


def _row(queue: str, ok: bool | None, detail: str, fix: str = "") -> dict[str, Any]:
    return {"check": f"queue {queue}", "ok": ok, "detail": detail, "fix": "" if ok else fix}


def _failure(queue: str, exc: Exception) -> dict[str, Any]:
    first = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
    return _row(
        queue,
        False,
        f"{type(exc).__name__}: {first}",
        f"grant the app's identity the send right on {queue} (infra/modules/role-assignments.bicep)",
    )


def _age(oldest: Any) -> str:
    if oldest is None:
        return "no visible message"
    return f"oldest message {int((clock.utcnow() - oldest).total_seconds())} s old"


def diagnose(transport: Any, queue: str) -> dict[str, Any]:
    from workflow_core.transport.servicebus import ServiceBusTransport
    from workflow_core.transport.storage_queue import StorageQueueTransport

    if isinstance(transport, StorageQueueTransport):
        return _storage_queue(transport, queue)
    if isinstance(transport, ServiceBusTransport):
        return _service_bus(transport, queue)
    return _row(queue, None, f"{type(transport).__name__} offers no probe (depth not measurable here)")


def _storage_queue(transport: Any, queue: str) -> dict[str, Any]:
    try:
        client = transport._client(queue)
        sent = client.send_message(PROBE_BODY, visibility_timeout=300)
        client.delete_message(sent.id, pop_receipt=sent.pop_receipt)
        depth = client.get_queue_properties().approximate_message_count
        peeked = client.peek_messages(max_messages=1)
    except Exception as exc:
        return _failure(queue, exc)
    oldest = peeked[0].inserted_on if peeked else None
    return _row(queue, True, f"probe sent and deleted; depth {depth}; {_age(oldest)}")


def _service_bus(transport: Any, queue: str) -> dict[str, Any]:
    from azure.servicebus import ServiceBusMessage

    client = transport._client
    try:
        with client.get_queue_sender(queue) as sender:
            numbers = sender.schedule_messages(
                ServiceBusMessage(PROBE_BODY), clock.utcnow() + timedelta(hours=1)
            )
            sender.cancel_scheduled_messages(numbers)
    except Exception as exc:
        return _failure(queue, exc)
    try:
        with client.get_queue_receiver(queue) as receiver:
            peeked = receiver.peek_messages(max_message_count=1)
    except Exception:
        return _row(queue, True, "probe scheduled and cancelled; depth not readable with a send-only role")
    oldest = peeked[0].enqueued_time_utc if peeked else None
    return _row(queue, True, f"probe scheduled and cancelled; {_age(oldest)}")
