"""The :class:`Transport` on Azure Service Bus queues (``azure-servicebus``, synchronous API); what it
guarantees: docs/transport.md. ``delivery_count`` is 1 on the first delivery (the AMQP header counts
deliveries so far - 1; the .NET SDK adds 1 too). Senders and receivers are cached per entity path, each
behind a lock, so threads can share one transport.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar

from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusReceiver,
    ServiceBusSender,
    ServiceBusSubQueue,
)
from azure.servicebus.amqp import AmqpMessageBodyType
from azure.servicebus.exceptions import (
    MessageAlreadySettled,
    MessageLockLostError,
    MessageNotFoundError,
    MessagingEntityNotFoundError,
    ServiceBusError,
)

from workflow_core import clock
from workflow_core.settings import ServiceBusConnection
from workflow_core.transport.base import (
    LockLostError,
    OutgoingMessage,
    ReceivedMessage,
    Transport,
    TransportError,
    as_utc,
    oldest_message_age,
)
from workflow_core.transport.envelope import DOCTOR_PROBE, body_from_text

DEAD_LETTER_SUFFIX = "/$DeadLetterQueue"
DEAD_LETTER_PROPERTIES = ("DeadLetterReason", "DeadLetterErrorDescription")
T = TypeVar("T")


class ServiceBusTransport(Transport):
    def __init__(self, client: ServiceBusClient, *, min_wait_seconds: float = 1.0) -> None:
        if min_wait_seconds <= 0:
            raise ValueError("min_wait_seconds must be > 0 (the SDK has no zero-wait receive)")
        self._client = client
        self._min_wait = min_wait_seconds
        self._senders: dict[str, tuple[ServiceBusSender, threading.Lock]] = {}
        self._receivers: dict[str, tuple[ServiceBusReceiver, threading.Lock]] = {}
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def from_connection_string(
        cls,
        connection_string: str,
        *,
        min_wait_seconds: float = 1.0,
        client_kwargs: dict[str, Any] | None = None,
    ) -> ServiceBusTransport:
        try:
            client = ServiceBusClient.from_connection_string(connection_string, **(client_kwargs or {}))
        except ValueError as exc:
            raise TransportError(f"Service Bus connection string is not valid: {exc}") from exc
        return cls(client, min_wait_seconds=min_wait_seconds)

    @classmethod
    def from_connection(
        cls, connection: ServiceBusConnection, *, min_wait_seconds: float = 1.0
    ) -> ServiceBusTransport:
        """By connection string, else by identity (settings.service_bus_connection refuses neither), which
        needs the Service Bus Data Sender and Data Receiver roles."""
        if connection.connection_string:
            return cls.from_connection_string(connection.connection_string, min_wait_seconds=min_wait_seconds)
        from azure.identity import DefaultAzureCredential

        credential = DefaultAzureCredential(managed_identity_client_id=connection.client_id)
        client = ServiceBusClient(connection.fully_qualified_namespace, credential)
        return cls(client, min_wait_seconds=min_wait_seconds)

    def ensure_queues(self, *queues: str) -> None:
        """A no-op: Service Bus queues are infrastructure (Bicep, or the emulator's config)."""

    def send(self, queue: str, message: OutgoingMessage) -> None:
        sb_message = _to_sb_message(message)
        sender, lock = self._sender(queue)
        with lock:
            self._call(f"send {message.message_id!r} to", queue, lambda: sender.send_messages(sb_message))

    def receive(
        self, queue: str, *, max_messages: int = 1, lock_seconds: float = 30.0, wait_seconds: float = 0.0
    ) -> list[ReceivedMessage]:
        """``queue`` may be a dead-letter sub-queue's path (``<queue>/$DeadLetterQueue``)."""
        if max_messages < 1:
            raise ValueError(f"max_messages must be >= 1, got {max_messages}")
        receiver, lock = self._receiver(queue)
        wait = max(self._min_wait, wait_seconds)
        with lock:
            received = self._call(
                "receive from",
                queue,
                lambda: receiver.receive_messages(max_message_count=max_messages, max_wait_time=wait),
            )
        return [_to_received(queue, m) for m in received]

    def complete(self, message: ReceivedMessage) -> None:
        self._settle(message, "complete", ServiceBusReceiver.complete_message)

    def abandon(self, message: ReceivedMessage) -> None:
        self._settle(message, "abandon", ServiceBusReceiver.abandon_message)

    def dead_letter(self, message: ReceivedMessage, reason: str, description: str = "") -> None:
        dead_letter = partial(
            ServiceBusReceiver.dead_letter_message, reason=reason, error_description=description
        )
        self._settle(message, "dead-letter", dead_letter)

    def renew_lock(self, message: ReceivedMessage, lock_seconds: float = 30.0) -> None:
        message.locked_until = as_utc(
            self._settle(message, "renew the lock of", ServiceBusReceiver.renew_message_lock)
        )

    def receive_dead_letters(
        self, queue: str, *, max_messages: int = 10, lock_seconds: float = 30.0, wait_seconds: float = 0.0
    ) -> list[ReceivedMessage]:
        return self.receive(queue + DEAD_LETTER_SUFFIX, max_messages=max_messages, wait_seconds=wait_seconds)

    def probe(self, queue: str) -> str:
        """A message *scheduled* an hour ahead and cancelled by sequence number (no receiver ever sees
        it); the oldest message by a peek, which needs Listen: the app holds it on the queues it hosts,
        not on remote pools' queues, where the depth is reported as not readable rather than failed."""
        with self._client.get_queue_sender(queue) as sender:
            at = clock.utcnow() + timedelta(hours=1)
            sender.cancel_scheduled_messages(sender.schedule_messages(ServiceBusMessage(DOCTOR_PROBE), at))
        try:
            with self._client.get_queue_receiver(queue) as receiver:
                peeked = receiver.peek_messages(max_message_count=1)
        except Exception:
            return "probe scheduled and cancelled; depth not readable with a send-only role"
        oldest = oldest_message_age(peeked[0].enqueued_time_utc if peeked else None)
        return f"probe scheduled and cancelled; {oldest}"

    @contextlib.contextmanager
    def receiver_apart(self, queue: str) -> Iterator[_ApartReceiver]:
        """A receiver of its own without prefetch, closed afterwards: the transport keeps its receivers
        open for the queues the app consumes, and none may still hold a message after the read."""
        with self._client.get_queue_receiver(queue, prefetch_count=0) as receiver:
            yield _ApartReceiver(receiver, self._min_wait)

    def close(self) -> None:
        """Close the links in parallel (the SDK takes up to a second per link), then the client."""
        with self._lock:
            self._closed = True
            handlers = [h for h, _ in [*self._senders.values(), *self._receivers.values()]]
            self._senders, self._receivers = {}, {}
        with ThreadPoolExecutor(max_workers=min(16, len(handlers) + 1)) as pool:
            closed = list(pool.map(_close_quietly, handlers))
        errors = [e for e in [*closed, _close_quietly(self._client)] if e is not None]
        if errors:
            raise TransportError(f"Service Bus: closing failed: {errors[0]}") from errors[0]

    def _check_open(self) -> None:
        if self._closed:
            raise TransportError("Service Bus transport is closed")

    def _sender(self, queue: str) -> tuple[ServiceBusSender, threading.Lock]:
        with self._lock:
            self._check_open()
            entry = self._senders.get(queue)
            if entry is None:
                entry = (self._client.get_queue_sender(queue), threading.Lock())
                self._senders[queue] = entry
            return entry

    def _receiver(self, entity: str) -> tuple[ServiceBusReceiver, threading.Lock]:
        with self._lock:
            self._check_open()
            entry = self._receivers.get(entity)
        if entry is not None:
            return entry
        queue, dead_letters, _ = entity.partition(DEAD_LETTER_SUFFIX)
        receiver = self._client.get_queue_receiver(
            queue,
            sub_queue=ServiceBusSubQueue.DEAD_LETTER if dead_letters else None,
            receive_mode=ServiceBusReceiveMode.PEEK_LOCK,
            prefetch_count=0,
        )
        # Open the link before the first receive: the SDK counts link set-up against max_wait_time.
        self._call("open a receiver on", entity, receiver.__enter__)
        with self._lock:
            entry = None if self._closed else self._receivers.setdefault(entity, (receiver, threading.Lock()))
        if entry is None or entry[0] is not receiver:
            receiver.close()  # the transport was closed meanwhile, or another thread won the race
        if entry is None:
            raise TransportError("Service Bus transport is closed")
        return entry

    def _settle(
        self,
        message: ReceivedMessage,
        action: str,
        operation: Callable[[ServiceBusReceiver, ServiceBusReceivedMessage], T],
    ) -> T:
        if not isinstance(message.raw, ServiceBusReceivedMessage) or not message.queue:
            raise TransportError(
                f"Message {message.message_id!r} was not received by a ServiceBusTransport: cannot {action}"
            )
        with self._lock:
            entry = self._receivers.get(message.queue)
        if entry is None:
            raise LockLostError(
                f"Service Bus {message.queue!r}: cannot {action} message {message.message_id!r}: "
                f"its receiver was closed, so its lock is gone; it will be delivered again"
            )
        receiver, lock = entry
        where = f"{action} message {message.message_id!r} on"
        with lock:
            return self._call(where, message.queue, lambda: operation(receiver, message.raw))

    def _call(self, action: str, entity: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except (MessageLockLostError, MessageAlreadySettled, MessageNotFoundError) as exc:
            raise LockLostError(
                f"Service Bus {entity!r}: could not {action} it: the lock was lost (it expired, or the "
                f"message was already settled); it will be, or has been, delivered again ({exc})"
            ) from exc
        except MessagingEntityNotFoundError as exc:
            raise TransportError(
                f"Service Bus: could not {action} {entity!r}: the queue does not exist in this namespace "
                f"(queues are created by the infrastructure templates / emulator config): {exc}"
            ) from exc
        except (ServiceBusError, ValueError, TypeError) as exc:
            raise TransportError(f"Service Bus: could not {action} {entity!r}: {exc}") from exc


class _ApartReceiver:
    """:meth:`ServiceBusTransport.receiver_apart`'s receiver: receive, complete, abandon on one link."""

    def __init__(self, receiver: ServiceBusReceiver, min_wait: float) -> None:
        self._receiver, self._min_wait = receiver, min_wait

    def receive(
        self, queue: str, *, max_messages: int = 1, lock_seconds: float = 30.0, wait_seconds: float = 0.0
    ) -> list[ReceivedMessage]:
        wait = max(wait_seconds, self._min_wait)
        found = self._receiver.receive_messages(max_message_count=max_messages, max_wait_time=wait)
        return [_to_received(queue, m) for m in found]

    def complete(self, message: ReceivedMessage) -> None:
        self._receiver.complete_message(message.raw)

    def abandon(self, message: ReceivedMessage) -> None:
        self._receiver.abandon_message(message.raw)


def _close_quietly(closable: Any) -> BaseException | None:
    try:
        closable.close()
    except Exception as exc:  # close everything, report the first failure
        return exc
    return None


def _to_sb_message(message: OutgoingMessage) -> ServiceBusMessage:
    return ServiceBusMessage(
        body=message.body_bytes(),
        message_id=message.message_id,
        correlation_id=message.correlation_id,
        subject=message.subject,
        application_properties=dict(message.application_properties) or None,
        content_type="application/json",
        time_to_live=message.time_to_live(clock.utcnow()),
    )


def _to_received(entity: str, m: ServiceBusReceivedMessage) -> ReceivedMessage:
    # Service Bus also stores a dead-letter reason as properties: they surface as dead_letter_* only.
    hidden = DEAD_LETTER_PROPERTIES if entity.endswith(DEAD_LETTER_SUFFIX) else ()
    props = {_text(k): _value(v) for k, v in (m.application_properties or {}).items()}
    return ReceivedMessage(
        body=_body(m),
        message_id=_text(m.message_id) or "",
        delivery_count=(m.delivery_count or 0) + 1,
        correlation_id=_text(m.correlation_id),
        subject=_text(m.subject),
        application_properties={k: v for k, v in props.items() if k not in hidden},
        enqueued_time=as_utc(m.enqueued_time_utc),
        locked_until=as_utc(m.locked_until_utc),
        queue=entity,
        dead_letter_reason=m.dead_letter_reason,
        dead_letter_description=m.dead_letter_error_description,
        raw=m,
    )


def _body(m: ServiceBusReceivedMessage) -> dict[str, Any]:
    if m.body_type == AmqpMessageBodyType.VALUE and isinstance(m.body, dict):
        return {_text(k): _value(v) for k, v in m.body.items()}
    if m.body_type == AmqpMessageBodyType.DATA:
        raw = m.body if isinstance(m.body, bytes | bytearray) else b"".join(m.body)
        return body_from_text(bytes(raw).decode("utf-8", errors="replace"))
    return {"value": _value(m.body)}


def _text(value: Any) -> Any:
    return None if value is None else str(_value(value))


def _value(value: Any) -> Any:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes | bytearray) else value
