"""Settle messages the way the Functions host settles trigger messages, for code that runs without it.

In Azure the host receives, runs the function, completes on success and, on an exception, abandons
the message until it has been delivered ``maxDeliveryCount`` (Service Bus) / ``maxDequeueCount``
(queue trigger) times, after which it is dead-lettered (by the broker, or by the host moving it to
``<queue>-poison``). :func:`settle_failure` and :func:`pump` reproduce that on any :class:`Transport`,
so the durable test host, the demo and the contract suite exercise the same poison-message path.
"""

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
    """Receive up to ``max_messages`` and run ``handler`` on each, settling like the Functions host.

    Success completes the message; an exception abandons it, or dead-letters it with reason
    ``MaxDeliveryCountExceeded`` and the exception as description on its last allowed delivery. If
    the lock was lost meanwhile, the outcome is ``LOCK_LOST`` (the broker redelivers it).
    Exceptions from ``handler`` are reported in the result, never raised.
    """
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
