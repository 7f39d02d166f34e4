"""The one interface both transports (Service Bus, Storage Queues) implement: what our code sends
with, and what the durable test host and the contract suite receive and settle with, by :func:`pump`
and :func:`settle_failure`, like the Functions host settles trigger messages in Azure (complete on
success; on an exception abandon, and dead-letter on the last allowed delivery), so they exercise
the same poison-message path."""

from __future__ import annotations

import abc
import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from workflow_core import clock

log = logging.getLogger(__name__)


class TransportError(RuntimeError):
    """Sending or settling failed; the caller decides whether to retry (dispatch is idempotent)."""


class LockLostError(TransportError):
    """This receiver no longer holds the message's lock: the broker delivers it again, so the work
    is not lost, and the caller must not settle it again."""


def as_utc(value: datetime | None) -> datetime | None:
    """A naive SDK time read as UTC."""
    return value if value is None or value.tzinfo else value.replace(tzinfo=UTC)


def message_id_for(instance_id: str, step_id: str, attempt: int, kind: str = "work") -> str:
    """Stable per step attempt, so a re-send after a crash between "ledger written" and "message
    sent" is deduplicated (Service Bus duplicate detection, the ledger) rather than doubled."""
    return f"{kind}:{instance_id}:{step_id}:{attempt}"


@dataclass(frozen=True)
class OutgoingMessage:
    body: dict[str, Any]
    message_id: str
    correlation_id: str | None = None
    subject: str | None = None
    application_properties: dict[str, str | int | float | bool] = field(default_factory=dict)
    # After this instant the message is useless (its attempt expired): sent with a matching
    # time-to-live on both transports, so the broker drops it instead of delivering it.
    expires_at: datetime | None = None

    def time_to_live(self, now: datetime) -> timedelta | None:
        """What is left until ``expires_at`` (at least a second), or None: the queue's default."""
        if self.expires_at is None:
            return None
        return max(self.expires_at - now, timedelta(seconds=1))

    def body_bytes(self) -> bytes:
        return json.dumps(self.body, separators=(",", ":"), sort_keys=True).encode()


@dataclass
class ReceivedMessage:
    body: dict[str, Any]
    message_id: str
    delivery_count: int  # 1 on first delivery
    correlation_id: str | None = None
    subject: str | None = None
    application_properties: dict[str, Any] = field(default_factory=dict)
    enqueued_time: datetime | None = None
    locked_until: datetime | None = None
    queue: str = ""  # the entity it was received from: "q", "q/$DeadLetterQueue" or "q-poison"
    dead_letter_reason: str | None = None  # set on messages from receive_dead_letters
    dead_letter_description: str | None = None
    raw: Any = None  # the SDK object needed to settle it (ServiceBusReceivedMessage / QueueMessage)


class Transport(abc.ABC):
    """Queues with peek-lock semantics. Implementations: Service Bus, Azure Storage Queues."""

    @abc.abstractmethod
    def ensure_queues(self, *queues: str) -> None:
        """Create the queues if missing (Storage Queues; a no-op where infra owns them)."""

    @abc.abstractmethod
    def send(self, queue: str, message: OutgoingMessage) -> None: ...

    @abc.abstractmethod
    def receive(
        self, queue: str, *, max_messages: int = 1, lock_seconds: float = 30.0, wait_seconds: float = 0.0
    ) -> list[ReceivedMessage]:
        """Lock and return up to ``max_messages`` messages; they reappear if not settled in time
        (``lock_seconds``: Storage Queues only; Service Bus locks for the queue's ``LockDuration``)."""

    @abc.abstractmethod
    def complete(self, message: ReceivedMessage) -> None: ...

    @abc.abstractmethod
    def abandon(self, message: ReceivedMessage) -> None:
        """Release the lock now so the message is redelivered (delivery count + 1)."""

    @abc.abstractmethod
    def dead_letter(self, message: ReceivedMessage, reason: str, description: str = "") -> None: ...

    @abc.abstractmethod
    def renew_lock(self, message: ReceivedMessage, lock_seconds: float = 30.0) -> None:
        """Extend the lock and update ``message.locked_until`` (Service Bus: by its ``LockDuration``)."""

    @abc.abstractmethod
    def receive_dead_letters(
        self, queue: str, *, max_messages: int = 10, lock_seconds: float = 30.0, wait_seconds: float = 0.0
    ) -> list[ReceivedMessage]:
        """Lock and return messages dead-lettered from ``queue``; ``complete`` removes them."""

    def probe(self, queue: str) -> str:
        """Send ``queue`` a message no consumer ever sees and remove it (the send right proven), then say
        what this identity may read of the queue's depth and oldest message (doctor's queue rows)."""
        raise NotImplementedError(f"{type(self).__name__} offers no probe")

    @contextlib.contextmanager
    def receiver_apart(self, queue: str) -> Iterator[Transport]:
        """Something to ``receive``, ``complete`` and ``abandon`` messages of ``queue`` with for one short
        read outside the app's own consumption, closed afterwards (doctor's answer round trip). By
        default the transport itself: a transport that keeps no link per queue holds nothing after."""
        yield self

    def close(self) -> None:  # noqa: B027 - optional hook
        pass

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# The reason Service Bus itself writes when it dead-letters after too many deliveries.
MAX_DELIVERY_REASON = "MaxDeliveryCountExceeded"
MAX_DESCRIPTION_CHARS = 1024


class Settlement(StrEnum):
    COMPLETED = "completed"
    ABANDONED = "abandoned"
    DEAD_LETTERED = "dead-lettered"
    LOCK_LOST = "lock-lost"  # settling failed because the lock had expired; it will be redelivered


@dataclass(frozen=True)
class Delivery:
    message: ReceivedMessage
    settlement: Settlement
    error: BaseException | None = None


def settle_failure(
    transport: Transport,
    message: ReceivedMessage,
    max_delivery_count: int,
    reason: str = MAX_DELIVERY_REASON,
    description: str = "",
) -> Settlement:
    """After a failed delivery: dead-letter it if this was delivery ``max_delivery_count``, else abandon."""
    if max_delivery_count < 1:
        raise ValueError(f"max_delivery_count must be >= 1, got {max_delivery_count}")
    if message.delivery_count >= max_delivery_count:
        transport.dead_letter(message, reason, description[:MAX_DESCRIPTION_CHARS])
        return Settlement.DEAD_LETTERED
    transport.abandon(message)
    return Settlement.ABANDONED


def pump(
    transport: Transport,
    queue: str,
    handler: Callable[[ReceivedMessage], object],
    *,
    max_delivery_count: int,
    max_messages: int = 1,
    lock_seconds: float = 30.0,
    wait_seconds: float = 0.0,
) -> list[Delivery]:
    """Receive up to ``max_messages`` and run ``handler`` on each, settling like the Functions host;
    its exceptions are reported in the result, never raised."""
    deliveries = []
    for message in transport.receive(
        queue, max_messages=max_messages, lock_seconds=lock_seconds, wait_seconds=wait_seconds
    ):
        error: BaseException | None = None
        try:
            try:
                handler(message)
            except Exception as exc:
                error = exc
                log.warning(
                    "handler failed on message %s (delivery %d of %d): %r",
                    message.message_id,
                    message.delivery_count,
                    max_delivery_count,
                    exc,
                )
                outcome = settle_failure(
                    transport, message, max_delivery_count, description=f"{type(exc).__name__}: {exc}"
                )
            else:
                transport.complete(message)
                outcome = Settlement.COMPLETED
        except LockLostError as exc:
            log.warning("lock lost while settling message %s: %s", message.message_id, exc)
            outcome = Settlement.LOCK_LOST
            error = error or exc
        deliveries.append(Delivery(message, outcome, error))
    return deliveries


def oldest_message_age(enqueued: datetime | None) -> str:
    """Doctor's words for the age of a queue's oldest visible message."""
    if enqueued is None:
        return "no visible message"
    return f"oldest message {int((clock.utcnow() - enqueued).total_seconds())} s old"
