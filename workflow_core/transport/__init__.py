"""Agent transport: how step work and step results travel between scheduler and agents.

:class:`Transport` is the interface; ``servicebus.ServiceBusTransport`` (production) and
``storage_queue.StorageQueueTransport`` (Azurite, CI) implement it; :func:`create_transport` picks one
from the settings; ``delivery.pump`` / ``delivery.settle_failure`` settle like the Functions host.
"""

from workflow_core.transport.base import (
    LockLostError,
    OutgoingMessage,
    ReceivedMessage,
    Transport,
    TransportError,
    message_id_for,
)
from workflow_core.transport.delivery import Delivery, Settlement, pump, settle_failure
from workflow_core.transport.factory import create_transport

__all__ = [
    "Delivery",
    "LockLostError",
    "OutgoingMessage",
    "ReceivedMessage",
    "Settlement",
    "Transport",
    "TransportError",
    "create_transport",
    "message_id_for",
    "pump",
    "settle_failure",
]
