"""The pattern harness's agent pumps: the Functions host's queue triggers, in process (see the picture in
:mod:`devtools.harness`). A mixin of :class:`devtools.harness.PatternHarness`, split out so the harness
module stays about running the app."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from devtools.harness_faults import AgentKilled
from workflow_core.transport import LockLostError, ReceivedMessage, settle_failure
from workflow_core.workflows.pools import DEFAULT_POOL

RECEIVE_BATCH = 16  # messages a pump asks for per poll


class KnownEmpty:
    """The agent queues ("work", "results", "dead") whose last poll took every message there was (it
    came back with fewer than it asked for), with nothing put into them through the harness's
    transport since, in the current run of the host loop.

    The pumps skip such a poll only in a loop iteration that already did other work
    (``DurableTestHost.iteration_busy``): the host never counts as idle, nor skips virtual time, before
    an iteration in which every pump polled for real, so a message that arrived another way (a lock
    that expired, a test's own send) is still seen before time moves. Each entry into the host loop
    (``run_serial``) starts from nothing known.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._empty: set[str] = set()
        self._serial: int | None = None

    def known(self, kind: str, serial: int) -> bool:
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

    def forget(self, kind: str | None = None) -> None:
        with self._lock:
            if kind is None:
                self._empty.clear()
            else:
                self._empty.discard(kind)


class HarnessPumps:
    """Mixin: the agent pumps of :class:`devtools.harness.PatternHarness`."""

    def _queue_kind(self, queue: str) -> str:
        if queue == self.settings.work_queue:
            return "work"
        if queue == self.settings.result_queue:
            return "results"
        return queue

    def _drain(self, queue: str) -> None:
        while batch := self.transport.receive(queue, max_messages=32, lock_seconds=30):
            for message in batch:
                self.transport.complete(message)

    def _work_handler(self, message: ReceivedMessage) -> None:
        from activities import process_work_message

        process_work_message(
            message.body,
            delivery_count=message.delivery_count,
            services=self.services,
            worker_id=f"worker:w{next(self._deliveries)}",
            message_id=message.message_id,
            trace=message.application_properties,
            pool=self._pool_queues.get(message.queue, DEFAULT_POOL),
        )

    def _result_handler(self, message: ReceivedMessage) -> None:
        from activities import handle_result

        self.host.run_async(
            handle_result(
                message.body,
                self.host.client,
                self.services,
                message_id=message.message_id,
                trace=message.application_properties,
            )
        )

    def _pump_work(self) -> int:
        """The work queues of the pools the harness hosts (``hosted_pools``); another pool's work waits
        for whatever serves it (a ``sas-agent`` process, an agent in another language)."""
        hosted = [q for q, pool in self._pool_queues.items() if pool in self.settings.hosted_pools]
        return sum(self._consume(self._queue_kind(q), q, self._work_handler) for q in hosted)

    def _pump_results(self) -> int:
        return self._consume("results", self.settings.result_queue, self._result_handler)

    def _pump_dead_letters(self) -> int:
        from activities import handle_dead_letter

        return sum(
            self._pump_dead_letters_of(q, pool, handle_dead_letter) for q, pool in self._dead_letter_pools
        )

    def _pump_dead_letters_of(self, queue: str, pool: str, handle_dead_letter: Callable[..., Any]) -> int:
        kind = "dead" if pool == DEFAULT_POOL else f"dead-{pool}"
        if self.agents_paused or self._may_skip_poll(kind):
            return 0
        received = self.transport.receive_dead_letters(queue, max_messages=RECEIVE_BATCH, lock_seconds=30)
        self._known_empty.polled(kind, drained=len(received) < RECEIVE_BATCH)
        for message in received:
            self.host.run_async(
                handle_dead_letter(
                    message.body,
                    reason=message.dead_letter_reason,
                    description=message.dead_letter_description,
                    client=self.host.client,
                    services=self.services,
                    message_id=message.message_id,
                    trace=message.application_properties,
                    pool=pool,
                )
            )
            self.transport.complete(message)
        return len(received)

    def _consume(self, kind: str, queue: str, handle: Callable[[ReceivedMessage], None]) -> int:
        """Receive, then settle each message like the Functions host (see the module docstring)."""
        if self.agents_paused:
            return 0
        with self._lock:
            released = [m for k, m in self._released if k == kind]
            self._released = [(k, m) for k, m in self._released if k != kind]
        wait = self._orphan_wait() if kind == "work" else 0.0
        if not released and not wait and self._may_skip_poll(kind):
            return 0
        received = self.transport.receive(
            queue, max_messages=RECEIVE_BATCH, lock_seconds=self.lock_seconds, wait_seconds=wait
        )
        self._known_empty.polled(kind, drained=len(received) < RECEIVE_BATCH)
        for message in released:
            self._settle(message, handle)
        for message in received:
            if not self._hold_if_matching(kind, message):
                self._settle(message, handle)
        return len(released) + len(received)

    def _may_skip_poll(self, kind: str) -> bool:
        """Whether this pump may leave its queue unpolled in this loop iteration (see :class:`KnownEmpty`):
        the iteration already did work, and the last poll drained the queue with nothing sent since.
        While an agent holds a message, or a killed agent's message is due back, every poll is made."""
        if not self._skip_empty_polls or not self.host.iteration_busy:
            return False
        with self._lock:
            if self._orphans or any(h.held for h in self._holds):
                return False
        return self._known_empty.known(kind, self.host.run_serial)

    def _settle(self, message: ReceivedMessage, handle: Callable[[ReceivedMessage], None]) -> None:
        try:
            try:
                handle(message)
            except AgentKilled:
                # The process died: nothing settles the message; it reappears when its lock expires.
                with self._lock:
                    self._orphans.append(time.monotonic() + self.lock_seconds)
                return
            except Exception as exc:
                settle_failure(
                    self.transport,
                    message,
                    self.settings.max_delivery_count,
                    description=f"{type(exc).__name__}: {exc}",
                )
                return
            self.transport.complete(message)
        except LockLostError:
            pass  # the lock expired meanwhile: the queue delivers it again, as in Azure

    def _orphan_wait(self) -> float:
        """Seconds to wait for a killed agent's message to reappear (0 if none is pending).

        Waiting here (real time; the host clock stands still) is the host restarting the agent: it
        keeps the redelivery ahead of the step's deadline, as a lock much shorter than the deadline
        does in Azure.
        """
        with self._lock:
            now = time.monotonic()
            self._orphans = [t for t in self._orphans if t > now]
            return min(self._orphans) - now + 0.3 if self._orphans else 0.0
