"""Test support for message-only agents: send one agent's work to a queue of its own, the way pool
routing will, so that no in-process worker serves it (the app's worker reads only the work queue)."""

from __future__ import annotations

from typing import Any

from devtools.harness import PatternHarness
from workflow_core.transport import OutgoingMessage


class RoutedTransport:
    """The app's transport, with ``agent``'s work messages sent to ``queue`` instead."""

    def __init__(self, real: Any, agent: str, work_queue: str, queue: str, copies: int) -> None:
        self.real, self.agent, self.work_queue = real, agent, work_queue
        self.queue, self.copies = queue, copies

    def send(self, queue: str, message: OutgoingMessage) -> None:
        if queue != self.work_queue or message.application_properties.get("agent") != self.agent:
            return self.real.send(queue, message)
        for _ in range(self.copies):  # at-least-once delivery: copies > 1 delivers duplicates
            self.real.send(self.queue, message)
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def route_agent(h: PatternHarness, agent: str, pool: str, copies: int = 1) -> str:
    """Send ``agent``'s work (``copies`` times) to the pool queue ``<WORK_QUEUE_NAME>-<pool>``; that
    queue's name."""
    queue = f"{h.settings.work_queue}-{pool}"
    h.transport.real.ensure_queues(queue)
    routed = RoutedTransport(h.transport, agent, h.settings.work_queue, queue, copies)
    h.services.__dict__["transport"] = routed
    return queue
