"""The harness's transport: the real one, except for the sends you break (``fail_send`` /
``duplicate_send``). It counts what was sent by MessageId, so tests can see a re-send or a
duplicate, and keeps which agent queues are known to be empty, for the pumps.

A queue ("work", "results", "dead"...) is known empty when its last poll came back with fewer
messages than it asked for and nothing that may fill it went through this transport since, in the
current entry into the host loop (``run_serial``). Pumps skip such polls only in a busy iteration
(``DurableTestHost.iteration_busy``), so every queue is polled for real before time moves.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workflow_core.transport import OutgoingMessage, ReceivedMessage, Transport


@dataclass
class SendFault:
    """Fail (raise ``exc``) or duplicate the next ``times`` sends matching queue kind, step, attempt, kind."""

    queue: str  # "work" or "results"
    step_id: str | None
    attempt: int | None
    kind: str | None
    action: str  # "fail" or "duplicate"
    times: int
    exc: BaseException | None = None
    fired: int = 0


def body_matches(body: dict, step_id: str | None, attempt: int | None, kind: str | None) -> bool:
    """Whether a message body is for this step, attempt and kind (None matches any)."""
    wanted = (("step_id", step_id), ("attempt", attempt), ("kind", kind))
    return all(value is None or body.get(key) == value for key, value in wanted)


class FaultyTransport(Transport):
    def __init__(self, real: Transport, queue_kind: Callable[[str], str]) -> None:
        self.real = real
        self._queue_kind = queue_kind
        self._faults: list[SendFault] = []
        self._lock = threading.Lock()
        self.sent_ids: Counter[str] = Counter()
        self._empty: set[str] = set()  # queue kinds known to be empty
        self._serial: int | None = None

    def known_empty(self, kind: str, serial: int) -> bool:
        with self._lock:
            if serial != self._serial:
                self._empty.clear()
                self._serial = serial
            return kind in self._empty

    def polled(self, kind: str, drained: bool) -> None:
        with self._lock:
            if drained:
                self._empty.add(kind)
            else:
                self._empty.discard(kind)

    def _forget(self, kind: str | None) -> None:
        """A queue of that kind ("work", "results"; None: any) may no longer be empty."""
        with self._lock:
            self._empty = set() if kind is None else self._empty - {kind}

    def add_fault(self, fault: SendFault) -> SendFault:
        with self._lock:
            self._faults.append(fault)
        return fault

    def _take(self, kind: str, message: OutgoingMessage) -> SendFault | None:
        with self._lock:
            for fault in self._faults:
                live = fault.fired < fault.times and fault.queue == kind
                if live and body_matches(message.body, fault.step_id, fault.attempt, fault.kind):
                    fault.fired += 1
                    return fault
        return None

    def send(self, queue: str, message: OutgoingMessage) -> None:
        kind = self._queue_kind(queue)
        try:
            fault = self._take(kind, message)
            action = fault.action if fault is not None else None
            if action == "fail":
                raise fault.exc or RuntimeError(f"injected send failure on {queue}")
            for _ in range(2 if action == "duplicate" else 1):  # same body and MessageId
                self.real.send(queue, message)
                with self._lock:
                    self.sent_ids[message.message_id] += 1
        finally:
            self._forget(kind if kind in ("work", "results") else None)

    # everything else is the real transport's
    def ensure_queues(self, *queues: str) -> None:
        self.real.ensure_queues(*queues)

    def receive(self, queue: str, **kwargs: Any) -> list[ReceivedMessage]:
        return self.real.receive(queue, **kwargs)

    def complete(self, message: ReceivedMessage) -> None:
        self.real.complete(message)

    # These may put a message back in any queue: afterwards no queue is known to be empty.
    def abandon(self, message: ReceivedMessage) -> None:
        self._then_forget(self.real.abandon, message)

    def dead_letter(self, message: ReceivedMessage, reason: str, description: str = "") -> None:
        self._then_forget(self.real.dead_letter, message, reason, description)

    def renew_lock(self, message: ReceivedMessage, lock_seconds: float = 30.0) -> None:
        self._then_forget(self.real.renew_lock, message, lock_seconds)

    def _then_forget(self, operation: Callable[..., None], *args: Any) -> None:
        try:
            operation(*args)
        finally:
            self._forget(None)

    def receive_dead_letters(self, queue: str, **kwargs: Any) -> list[ReceivedMessage]:
        return self.real.receive_dead_letters(queue, **kwargs)

    def close(self) -> None:
        self.real.close()
