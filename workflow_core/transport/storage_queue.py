"""The :class:`Transport` on Azure Storage Queues (Azurite locally and in CI); how Service Bus
concepts map onto it (visibility timeout as lock, ``<queue>-poison``, the JSON envelope, no duplicate
detection: the ledger dedupes) is in docs/transport.md. Messages are decoded leniently, so one
foreign message cannot break a receive.
"""

from __future__ import annotations

import base64
import binascii
import math
import threading
import time
from collections.abc import Mapping
from typing import Any

from azure.core.exceptions import AzureError, ResourceExistsError, ResourceNotFoundError
from azure.storage.queue import QueueClient, QueueMessage, QueueServiceClient, TextBase64EncodePolicy

from workflow_core import clock, storage_clients
from workflow_core.settings import StorageConnection
from workflow_core.transport.base import (
    LockLostError,
    OutgoingMessage,
    ReceivedMessage,
    Transport,
    TransportError,
    as_utc,
    oldest_message_age,
)
from workflow_core.transport.envelope import DOCTOR_PROBE, read_envelope, write_envelope

POISON_SUFFIX = "-poison"
MAX_MESSAGE_BYTES = 64 * 1024  # after base64 encoding
MAX_VISIBILITY_SECONDS = 7 * 24 * 3600
MAX_MESSAGES_PER_CALL = 32
POLL_SECONDS = 0.2  # between empty receives while waiting for a message


class StorageQueueTransport(Transport):
    def __init__(
        self, service: QueueServiceClient, *, dead_letter_queues: Mapping[str, str] | None = None
    ) -> None:
        """``dead_letter_queues`` overrides ``<queue>-poison`` (not for queues the Functions host reads)."""
        self._service = service
        self._dead_letter_queues = dict(dead_letter_queues or {})
        self._clients: dict[str, QueueClient] = {}
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def from_connection_string(cls, connection_string: str, **kwargs) -> StorageQueueTransport:
        return cls(storage_clients.queue_service_client_from_connection_string(connection_string), **kwargs)

    @classmethod
    def from_connection(
        cls, connection: StorageConnection, *, credential: Any = None, **kwargs: Any
    ) -> StorageQueueTransport:
        """By connection string, else by identity (settings.storage_connection refuses neither), which
        needs the Storage Queue Data Contributor role; ``credential``: the managed identity's by default."""
        if connection.connection_string:
            return cls.from_connection_string(connection.connection_string, **kwargs)
        if credential is None:
            from azure.identity import DefaultAzureCredential

            credential = DefaultAzureCredential(managed_identity_client_id=connection.client_id)
        service = storage_clients.queue_service_client_from_uri(connection.queue_service_uri, credential)
        return cls(service, **kwargs)

    def dead_letter_queue_for(self, queue: str) -> str:
        return self._dead_letter_queues.get(queue, queue + POISON_SUFFIX)

    def _client(self, queue: str) -> QueueClient:
        with self._lock:
            if self._closed:
                raise TransportError("Storage queue transport is closed")
            client = self._clients.get(queue)
            if client is None:
                # Encode on send for the Functions host; decode ourselves (leniently) on receive.
                client = self._service.get_queue_client(queue, message_encode_policy=TextBase64EncodePolicy())
                self._clients[queue] = client
            return client

    def ensure_queues(self, *queues: str) -> None:
        for queue in queues:
            for name in (queue, self.dead_letter_queue_for(queue)):
                try:
                    self._client(name).create_queue()
                except ResourceExistsError:
                    pass
                except AzureError as exc:
                    raise TransportError(f"Storage queue {name!r}: could not create it: {exc}") from exc

    def send(self, queue: str, message: OutgoingMessage) -> None:
        ttl = message.time_to_live(clock.utcnow())
        seconds = None if ttl is None else math.ceil(ttl.total_seconds())
        self._send_text(queue, write_envelope(message), message.message_id, time_to_live=seconds)

    def receive(
        self, queue: str, *, max_messages: int = 1, lock_seconds: float = 30.0, wait_seconds: float = 0.0
    ) -> list[ReceivedMessage]:
        if max_messages < 1:
            raise ValueError(f"max_messages must be >= 1, got {max_messages}")
        visibility = _visibility(lock_seconds)
        client = self._client(queue)
        deadline = time.monotonic() + max(0.0, wait_seconds)
        while True:
            try:
                received = list(
                    client.receive_messages(
                        messages_per_page=min(max_messages, MAX_MESSAGES_PER_CALL),
                        max_messages=max_messages,
                        visibility_timeout=visibility,
                    )
                )
            except AzureError as exc:
                raise _queue_error(queue, "receive", exc) from exc
            if received or time.monotonic() >= deadline:
                return [_to_received(queue, qm) for qm in received]
            time.sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))

    def complete(self, message: ReceivedMessage) -> None:
        qm = self._queue_message(message)
        try:
            self._client(message.queue).delete_message(qm.id, pop_receipt=qm.pop_receipt)
        except AzureError as exc:
            raise self._settle_error("complete", message, exc) from exc

    def abandon(self, message: ReceivedMessage) -> None:
        self._update_visibility(message, 0, "abandon")

    def renew_lock(self, message: ReceivedMessage, lock_seconds: float = 30.0) -> None:
        self._update_visibility(message, _visibility(lock_seconds), "renew the lock of")

    def dead_letter(self, message: ReceivedMessage, reason: str, description: str = "") -> None:
        """Check the lock (extend it briefly), copy the message to the poison queue, then delete it:
        a failed delete may put it there twice, never zero times."""
        self._update_visibility(message, 30, "dead-letter")
        text = write_envelope(message, dead_letter_reason=reason, dead_letter_description=description)
        dlq = self.dead_letter_queue_for(message.queue)
        try:
            self._send_text(dlq, text, message.message_id)
        except TransportError as exc:
            if not isinstance(exc.__cause__, ResourceNotFoundError):
                raise
            self.ensure_queues(dlq)
            self._send_text(dlq, text, message.message_id)
        self.complete(message)

    def receive_dead_letters(
        self, queue: str, *, max_messages: int = 10, lock_seconds: float = 30.0, wait_seconds: float = 0.0
    ) -> list[ReceivedMessage]:
        options = {"max_messages": max_messages, "lock_seconds": lock_seconds, "wait_seconds": wait_seconds}
        return self.receive(self.dead_letter_queue_for(queue), **options)

    def probe(self, queue: str) -> str:
        """A message invisible for five minutes, deleted by id and pop receipt; the depth and the oldest
        message by a peek."""
        client = self._client(queue)
        sent = client.send_message(DOCTOR_PROBE, visibility_timeout=300)
        client.delete_message(sent.id, pop_receipt=sent.pop_receipt)
        depth = client.get_queue_properties().approximate_message_count
        peeked = client.peek_messages(max_messages=1)
        oldest = oldest_message_age(peeked[0].inserted_on if peeked else None)
        return f"probe sent and deleted; depth {depth}; {oldest}"

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()
        self._service.close()

    def _send_text(self, queue: str, text: str, message_id: str, time_to_live: int | None = None) -> None:
        size = len(base64.b64encode(text.encode()))
        if size > MAX_MESSAGE_BYTES:
            raise TransportError(
                f"Storage queue {queue!r}: message {message_id!r} is {size} bytes after base64 encoding; "
                f"the limit is {MAX_MESSAGE_BYTES}. Store large payloads elsewhere and send a reference."
            )
        try:
            self._client(queue).send_message(text, time_to_live=time_to_live)
        except AzureError as exc:
            raise _queue_error(queue, f"send {message_id!r}", exc) from exc

    def _queue_message(self, message: ReceivedMessage) -> QueueMessage:
        if not isinstance(message.raw, QueueMessage) or not message.queue:
            raise TransportError(
                f"Message {message.message_id!r} was not received by a StorageQueueTransport: cannot settle"
            )
        return message.raw

    def _update_visibility(self, message: ReceivedMessage, seconds: int, action: str) -> None:
        qm = self._queue_message(message)
        try:
            updated = self._client(message.queue).update_message(
                qm.id, pop_receipt=qm.pop_receipt, visibility_timeout=seconds
            )
        except AzureError as exc:
            raise self._settle_error(action, message, exc) from exc
        # The pop receipt changes on every update: keep the new one, it is the lock token now.
        qm.pop_receipt = updated.pop_receipt
        qm.next_visible_on = updated.next_visible_on
        message.locked_until = updated.next_visible_on

    @staticmethod
    def _settle_error(action: str, message: ReceivedMessage, exc: AzureError) -> TransportError:
        where = f"Storage queue {message.queue!r}: could not {action} message {message.message_id!r}"
        # 400 PopReceiptMismatch: received again by someone else; 404 MessageNotFound: already deleted.
        code = getattr(exc, "error_code", None)
        code = str(getattr(code, "value", code) or "")
        if isinstance(exc, ResourceNotFoundError) or code in ("PopReceiptMismatch", "MessageNotFound"):
            return LockLostError(
                f"{where}: the lock was lost (its visibility timeout expired and it was received again, "
                f"or it was already settled); it will be, or has been, delivered again"
            )
        return TransportError(f"{where}: {exc}")


def _queue_error(queue: str, action: str, exc: AzureError) -> TransportError:
    if isinstance(exc, ResourceNotFoundError):
        return TransportError(
            f"Storage queue {queue!r} does not exist (call ensure_queues): could not {action}"
        )
    return TransportError(f"Storage queue {queue!r}: could not {action}: {exc}")


def _visibility(lock_seconds: float) -> int:
    """Storage visibility timeouts are whole seconds, 1 s to 7 days; round up so a lock is never shorter."""
    if lock_seconds <= 0:
        raise ValueError(f"lock_seconds must be > 0, got {lock_seconds}")
    return min(MAX_VISIBILITY_SECONDS, max(1, math.ceil(lock_seconds)))


def _decode_text(content: object) -> str:
    if isinstance(content, bytes):
        content = content.decode("utf-8", errors="replace")
    text = str(content or "")
    try:
        return base64.b64decode(text, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return text  # not base64 (e.g. sent with no encoding by another tool): take it as it is


def _to_received(queue: str, qm: QueueMessage) -> ReceivedMessage:
    envelope = read_envelope(_decode_text(qm.content))
    return ReceivedMessage(
        body=envelope.body,
        message_id=envelope.message_id if envelope.message_id is not None else str(qm.id),
        delivery_count=int(qm.dequeue_count or 1),
        correlation_id=envelope.correlation_id,
        subject=envelope.subject,
        application_properties=dict(envelope.application_properties),
        enqueued_time=as_utc(qm.inserted_on),
        locked_until=as_utc(qm.next_visible_on),
        queue=queue,
        dead_letter_reason=envelope.dead_letter_reason,
        dead_letter_description=envelope.dead_letter_description,
        raw=qm,
    )
