"""Build the configured :class:`Transport` from :class:`Settings` (``AGENT_TRANSPORT``)."""

from __future__ import annotations

from workflow_core.settings import Settings, TransportKind
from workflow_core.transport.base import Transport, TransportError


def create_transport(settings: Settings) -> Transport:
    """``servicebus``: the Service Bus namespace of ``ServiceBusConnection``; ``storage-queue``: the
    queues of ``AzureWebJobsStorage`` (Azurite locally), with the work queue's dead letters in
    ``DEAD_LETTER_QUEUE_NAME``. The SDK modules are imported only for the chosen transport."""
    if settings.transport is TransportKind.SERVICE_BUS:
        if settings.service_bus is None:
            raise TransportError("AGENT_TRANSPORT=servicebus but no Service Bus connection is configured")
        from workflow_core.transport.servicebus import ServiceBusTransport

        return ServiceBusTransport.from_connection(settings.service_bus)
    if settings.transport is TransportKind.STORAGE_QUEUE:
        from workflow_core.transport.storage_queue import StorageQueueTransport

        return StorageQueueTransport.from_connection(
            settings.storage, dead_letter_queues={settings.work_queue: settings.dead_letter_queue}
        )
    raise TransportError(f"Unknown transport kind {settings.transport!r}")
