"""The receive loop of ``sas-agent``: what the Functions host's queue trigger does for the app's worker.

docs/agents.md, "Run an agent outside the Function App", describes it (concurrency, lock renewal,
settling, SIGTERM). Every delivery goes through the app worker's entry point, so the ledger rules are
the app's; a message is never lost (a released or unrenewed one comes back to its queue) and never
runs twice in effect (the redelivery takes the Running step over; the ledger keeps the first outcome).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from activities.worker.agent_worker import default_worker_id, process_work_message
from workflow_core.runtime import Services
from workflow_core.transport import ReceivedMessage, TransportError, settle_failure

log = logging.getLogger("sas.agent_runner")
IDLE_POLL_SECONDS = 0.2  # between receives that found nothing (a Storage Queue receive never waits)
RECEIVE_ERROR_BACKOFF_SECONDS = 2.0


@dataclass(eq=False)
class InFlight:
    """One delivery being run. ``lock`` orders its settling, lock renewals and release at shutdown;
    ``done``: settled or released, so nothing touches the message again."""

    message: ReceivedMessage
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: bool = False


class AgentRunner:
    """Serve ``queues`` (each pool by its queue) with the app's worker until :meth:`stop`."""

    def __init__(
        self,
        services: Services,
        queues: Mapping[str, str],
        *,
        concurrency: int,
        lock_seconds: float,
        shutdown_grace: float,
    ) -> None:
        self.services = services
        self.transport = services.transport
        self.pools = dict(queues)
        self.queues = list(queues)
        self.concurrency = concurrency
        self.lock_seconds = lock_seconds
        self.shutdown_grace = shutdown_grace
        self.delivered = 0
        self._in_flight: set[InFlight] = set()
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._closed = threading.Event()  # after shutdown: lock renewal ends

    def stop(self) -> None:
        """Stop receiving; :meth:`run` then finishes or releases what is in flight and returns."""
        self._stopping.set()
        with self._changed:
            self._changed.notify_all()

    def run(self) -> int:
        """Serve until :meth:`stop`; returns how many deliveries were released unfinished."""
        threading.Thread(target=self._renew_locks, name="lock-renewal", daemon=True).start()
        turn = 0
        while not self._stopping.is_set():
            free = self._free_slots()
            got = 0
            for queue in self.queues[turn:] + self.queues[:turn]:  # each queue first in turn: fair
                if free - got <= 0 or self._stopping.is_set():
                    break
                got += self._receive(queue, free - got)
            turn = (turn + 1) % len(self.queues)
            if not got:
                self._stopping.wait(IDLE_POLL_SECONDS)
        return self._shut_down()

    def _free_slots(self) -> int:
        with self._changed:
            while len(self._in_flight) >= self.concurrency and not self._stopping.is_set():
                self._changed.wait()
            return self.concurrency - len(self._in_flight)

    def _receive(self, queue: str, most: int) -> int:
        try:
            received = self.transport.receive(queue, max_messages=most, lock_seconds=self.lock_seconds)
        except TransportError as exc:  # storage or broker unreachable for now: try again shortly
            log.warning("receive from %s failed: %s", queue, exc)
            self._stopping.wait(RECEIVE_ERROR_BACKOFF_SECONDS)
            return 0
        for message in received:
            entry = InFlight(message)
            with self._changed:
                self._in_flight.add(entry)
            threading.Thread(target=self._deliver, args=(entry,), daemon=True).start()
        return len(received)

    def _deliver(self, entry: InFlight) -> None:
        m = entry.message
        error: Exception | None = None
        try:
            process_work_message(
                m.body,
                delivery_count=m.delivery_count,
                services=self.services,
                worker_id=default_worker_id(uuid.uuid4().hex),  # one owner per delivery, as per invocation
                message_id=m.message_id,
                trace=m.application_properties,
                pool=self.pools[m.queue],
            )
        except Exception as exc:  # to be delivered again (or dead-lettered on its last delivery)
            error = exc
            log.warning(
                "delivery %d of %s failed: %s: %s", m.delivery_count, m.message_id, type(exc).__name__, exc
            )
        with entry.lock:
            if not entry.done:  # not released at shutdown meanwhile
                entry.done = True
                self._settle(m, error)
        with self._changed:
            self._in_flight.discard(entry)
            self.delivered += 1
            self._changed.notify_all()

    def _settle(self, m: ReceivedMessage, error: Exception | None) -> None:
        try:
            if error is None:
                self.transport.complete(m)
            else:
                description = f"{type(error).__name__}: {error}"
                settle_failure(
                    self.transport, m, self.services.settings.max_delivery_count, description=description
                )
        except TransportError as exc:  # the lock was lost or the queue is unreachable: it comes back,
            log.warning("could not settle %s: %s", m.message_id, exc)  # and the ledger decides again

    def _renew_locks(self) -> None:
        while not self._closed.wait(self.lock_seconds / 3):
            with self._changed:
                entries = list(self._in_flight)
            for entry in entries:
                with entry.lock:
                    if entry.done:
                        continue
                    try:
                        self.transport.renew_lock(entry.message, self.lock_seconds)
                    except TransportError as exc:
                        log.warning("could not renew the lock of %s: %s", entry.message.message_id, exc)

    def _shut_down(self) -> int:
        deadline = time.monotonic() + self.shutdown_grace
        with self._changed:
            if in_flight := len(self._in_flight):
                log.info(
                    "stopping: %d delivery(ies) in flight, %gs to finish", in_flight, self.shutdown_grace
                )
            while self._in_flight and (left := deadline - time.monotonic()) > 0:
                self._changed.wait(left)
            unfinished = list(self._in_flight)
        released = 0
        for entry in unfinished:
            with entry.lock:
                if entry.done:
                    continue
                entry.done = True
                released += 1
                try:
                    self.transport.abandon(entry.message)
                except TransportError as exc:  # its lock runs out instead: it comes back all the same
                    log.warning("could not release %s: %s", entry.message.message_id, exc)
        self._closed.set()
        return released
