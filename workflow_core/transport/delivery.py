"""Settle messages the way the Functions host settles trigger messages (complete on success; on an
exception abandon, and dead-letter on the last allowed delivery), for code that runs without it, so
the durable test host, the demo and the contract suite exercise the same poison-message path."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from workflow_core.transport.base import LockLostError, ReceivedMessage, Transport

log = logging.getLogger(__name__)

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
