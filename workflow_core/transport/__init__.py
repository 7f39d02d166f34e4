"""Agent transport: how step work and step results travel between scheduler and agents.

:class:`Transport` is the interface; ``servicebus.ServiceBusTransport`` (production) and
``storage_queue.StorageQueueTransport`` (Azurite, CI) implement it; ``pump`` / ``settle_failure``
settle like the Functions host.
"""

from __future__ import annotations

from workflow_core.settings import Settings, TransportKind
from workflow_core.transport.base import (
    LockLostError,
    OutgoingMessage,
    ReceivedMessage,
    Settlement,
    Transport,
    TransportError,
    message_id_for,
    pump,
    settle_failure,
)


def create_transport(settings: Settings) -> Transport:
    """The transport ``AGENT_TRANSPORT`` names; only its SDK is imported."""
    if settings.transport is TransportKind.SERVICE_BUS:
        if settings.service_bus is None:
            raise TransportError("AGENT_TRANSPORT=servicebus but no Service Bus connection is configured")
        from workflow_core.transport.servicebus import ServiceBusTransport

        return ServiceBusTransport.from_connection(settings.service_bus)
    from workflow_core.transport.storage_queue import StorageQueueTransport

    return StorageQueueTransport.from_connection(
        settings.storage, dead_letter_queues={settings.work_queue: settings.dead_letter_queue}
    )
