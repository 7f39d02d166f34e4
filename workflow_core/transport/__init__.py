"""Agent transport: how step work and step results travel between scheduler and agents."""

from workflow_core.transport.base import (
    OutgoingMessage,
    ReceivedMessage,
    Transport,
    TransportError,
    message_id_for,
)

__all__ = ["OutgoingMessage", "ReceivedMessage", "Transport", "TransportError", "message_id_for"]
