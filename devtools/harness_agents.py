"""The pattern harness's agents: the pumps that stand in for the Functions host's queue triggers
(receive, call the real worker / result-handler / dead-letter bodies, complete on success, abandon on
an exception, dead-letter after MAX_DELIVERY_COUNT deliveries), and the fault hooks that break them
(kill an agent process, crash a dispatch between its ledger write and its send, pause agents, hold /
release / duplicate messages, fail a send). Mixins of :class:`devtools.harness.PatternHarness`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from activities import handle_dead_letter, handle_result, process_work_message
from activities.worker.handlers.base import AgentCrash
from devtools.faulty_transport import SendFault, body_matches
from workflow_core.transport import LockLostError, ReceivedMessage, settle_failure
from workflow_core.workflows.pools import DEFAULT_POOL

HELD_LOCK_SECONDS = 3600.0  # a message an agent holds on purpose (``hold``) stays invisible this long


class HarnessError(RuntimeError):
    """The harness could not do what was asked (starter refused the request, a hold never matched...)."""


class ProcessDied(Exception):
    """Injected by :meth:`PatternHarness.crash_dispatch_before_send`: the process running an activity died."""


class AgentKilled(AgentCrash):
    """Raise from a handler to kill the agent process mid-step (see :meth:`PatternHarness.kill_agent`).

    Unlike an exception the Functions host catches (the message is abandoned and redelivered at once),
    a killed process settles nothing: the message reappears when its lock (visibility timeout) expires.
    It is an ``AgentCrash``, so the worker records nothing and lets it propagate.
    """


@dataclass
class _Hold:
    queue: str  # "work" or "results"
    step_id: str
    attempt: int | None
    kind: str
    times: int | None  # None: every matching message
    held: list[ReceivedMessage] = field(default_factory=list)
    matched: int = 0


class HarnessFaults:
    """Mixin: the fault hooks of :class:`devtools.harness.PatternHarness`."""

    def kill_agent(
        self, agent: str, *, step_id: str | None = None, after_effect: bool = False, times: int = 1
    ) -> None:
        """The agent process running ``agent`` (optionally only for ``step_id``) dies, ``times`` times:
        before its handler runs, or right after the handler made its effect. The message is left
        unsettled and comes back when its lock expires (see :class:`AgentKilled`)."""
        with self._lock:
            self._kills.append([agent, step_id, after_effect, times])

    def _maybe_kill(self, ctx: Any, *, after_effect: bool) -> None:
        with self._lock:
            for rule in self._kills:
                agent, step_id, when, left = rule
                matches = agent == ctx.agent and step_id in (None, ctx.step_id) and when == after_effect
                if left > 0 and matches:
                    rule[3] -= 1
                    break
            else:
                return
        moment = "after its effect" if after_effect else "before doing anything"
        raise AgentKilled(f"{ctx.agent} process killed {moment} (step {ctx.step_id}, attempt {ctx.attempt})")

    def crash_dispatch_before_send(
        self, step_id: str, *, attempt: int = 1, redeliver_after: timedelta = timedelta(minutes=5)
    ) -> None:
        """The process running ``dispatch_step`` for this attempt dies after its ledger write, before
        its send; the Durable runtime redelivers the activity when its lease expires (``redeliver_after``;
        five minutes with the Azure Storage provider), so meanwhile only the watchdog can notice the step.
        The durable test host redelivers lost results at once: the delay is added around its executor."""
        self.fail_send(step_id, attempt=attempt, kind="work", exc=ProcessDied(f"died sending {step_id}"))
        host = self.host
        execute = host._execute_activity

        def execute_or_die(item: Any) -> None:
            payload = json.loads(item.input or "{}")
            mine = (payload.get("step_id"), payload.get("attempt")) == (step_id, attempt)
            if item.name != "dispatch_step" or not mine:
                return execute(item)
            host._execute_activity = execute  # once
            try:
                host.functions.activities[item.name].invoke(payload)
            except ProcessDied:
                pass
            else:
                raise HarnessError(f"dispatch of {step_id} attempt {attempt} did not reach its send")

            def redeliver() -> None:
                host._activity_queue.append(item)
                host.remove_periodic(redeliver)

            host.add_periodic(redeliver, timedelta(days=365), first_at=host.clock.now() + redeliver_after)
            return None

        host._execute_activity = execute_or_die

    def pause_agents(self) -> None:
        """Agents stop receiving (messages wait in their queues) until :meth:`resume_agents`."""
        self.agents_paused = True

    def resume_agents(self) -> None:
        self.agents_paused = False

    def hold(
        self,
        step_id: str,
        *,
        queue: str = "work",
        attempt: int | None = None,
        kind: str = "work",
        times: int | None = 1,
    ) -> _Hold:
        """The next ``times`` messages of ``queue`` ("work" or "results") for this step are taken by an
        agent that keeps them (locked, unanswered) until :meth:`release`: a slow agent, a late reply."""
        entry = _Hold(queue, step_id, attempt, kind, times)
        with self._lock:
            self._holds.append(entry)
        return entry

    def _hold_if_matching(self, kind: str, message: ReceivedMessage) -> bool:
        with self._lock:
            for entry in self._holds:
                live = entry.queue == kind and (entry.times is None or entry.matched < entry.times)
                if live and body_matches(message.body, entry.step_id, entry.attempt, entry.kind):
                    entry.matched += 1
                    entry.held.append(message)
                    break
            else:
                return False
        self.transport.renew_lock(message, HELD_LOCK_SECONDS)
        return True

    def held(self, entry: _Hold | None = None) -> list[ReceivedMessage]:
        with self._lock:
            holds = [entry] if entry is not None else self._holds
            return [m for h in holds for m in h.held]

    def take_held(self, entry: _Hold) -> list[ReceivedMessage]:
        """Take the messages ``entry`` holds (still locked) to deliver them yourself (:meth:`deliver`)."""
        with self._lock:
            taken, entry.held[:] = list(entry.held), []
            return taken

    def deliver(self, kind: str, message: ReceivedMessage) -> None:
        """Handle and settle one received message exactly as the ``kind`` pump ("work"/"results") does."""
        self._settle(message, self._work_handler if kind == "work" else self._result_handler)

    def release(self, entry: _Hold | None = None) -> int:
        """Let the holding agent(s) process what they kept, on the next pump run; returns how many."""
        with self._lock:
            holds = [entry] if entry is not None else list(self._holds)
            count = sum(len(h.held) for h in holds)
            for h in holds:
                self._released.extend((h.queue, m) for m in h.held)
                h.held.clear()
                h.times = h.matched  # matches no more
            return count

    def fail_send(
        self,
        step_id: str | None = None,
        *,
        queue: str = "work",
        attempt: int | None = None,
        kind: str | None = None,
        exc: BaseException | None = None,
        times: int = 1,
    ) -> SendFault:
        """The next ``times`` sends to ``queue`` matching the step (and attempt, kind) raise ``exc``."""
        return self.transport.add_fault(SendFault(queue, step_id, attempt, kind, "fail", times, exc))

    def duplicate_send(
        self,
        step_id: str | None = None,
        *,
        queue: str = "work",
        attempt: int | None = None,
        kind: str | None = None,
        times: int = 1,
    ) -> SendFault:
        """The next ``times`` matching sends are sent twice (same body, same MessageId)."""
        return self.transport.add_fault(SendFault(queue, step_id, attempt, kind, "duplicate", times))


RECEIVE_BATCH = 16  # messages a pump asks for per poll


class HarnessPumps:
    """Mixin: the agent pumps of :class:`devtools.harness.PatternHarness`."""

    def _queue_kind(self, queue: str) -> str:
        return {self.settings.work_queue: "work", self.settings.result_queue: "results"}.get(queue, queue)

    def _work_handler(self, message: ReceivedMessage) -> None:
        process_work_message(
            message.body,
            delivery_count=message.delivery_count,
            services=self.services,
            worker_id=f"worker:w{next(self._deliveries)}",
            pool=self._pool_queues.get(message.queue, DEFAULT_POOL),
            **_delivery(message),
        )

    def _result_handler(self, message: ReceivedMessage) -> None:
        self.host.run_async(
            handle_result(message.body, self.host.client, self.services, **_delivery(message))
        )

    def _pump_work(self) -> int:
        """The work queues of the pools the harness hosts (``hosted_pools``); another pool's work waits
        for whatever serves it (a ``sas-agent`` process, an agent in another language)."""
        hosted = [q for q, pool in self._pool_queues.items() if pool in self.settings.hosted_pools]
        return sum(self._consume(self._queue_kind(q), q, self._work_handler) for q in hosted)

    def _pump_results(self) -> int:
        return self._consume("results", self.settings.result_queue, self._result_handler)

    def _pump_dead_letters(self) -> int:
        work = 0
        for queue, pool in self._dead_letter_pools:
            kind = "dead" if pool == DEFAULT_POOL else f"dead-{pool}"
            if self.agents_paused or self._may_skip_poll(kind):
                continue
            received = self.transport.receive_dead_letters(queue, max_messages=RECEIVE_BATCH, lock_seconds=30)
            self.transport.polled(kind, drained=len(received) < RECEIVE_BATCH)
            for message in received:
                self.host.run_async(
                    handle_dead_letter(
                        message.body,
                        reason=message.dead_letter_reason,
                        description=message.dead_letter_description,
                        client=self.host.client,
                        services=self.services,
                        pool=pool,
                        **_delivery(message),
                    )
                )
                self.transport.complete(message)
            work += len(received)
        return work

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
        self.transport.polled(kind, drained=len(received) < RECEIVE_BATCH)
        for message in released:
            self._settle(message, handle)
        for message in received:
            if not self._hold_if_matching(kind, message):
                self._settle(message, handle)
        return len(released) + len(received)

    def _may_skip_poll(self, kind: str) -> bool:
        """Whether this pump may leave its queue unpolled: the iteration already did work and the queue
        is known empty (devtools/faulty_transport.py). While an agent holds a message, or a killed
        agent's message is due back, every poll is made."""
        if not self._skip_empty_polls or not self.host.iteration_busy:
            return False
        with self._lock:
            if self._orphans or any(h.held for h in self._holds):
                return False
        return self.transport.known_empty(kind, self.host.run_serial)

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
                why = f"{type(exc).__name__}: {exc}"
                settle_failure(self.transport, message, self.settings.max_delivery_count, description=why)
                return
            self.transport.complete(message)
        except LockLostError:
            pass  # the lock expired meanwhile: the queue delivers it again, as in Azure

    def _orphan_wait(self) -> float:
        """Seconds to wait for a killed agent's message to reappear (0 if none is pending): the host
        restarting the agent, in real time while the host clock stands still, keeps the redelivery
        ahead of the step's deadline, as a lock much shorter than the deadline does in Azure."""
        with self._lock:
            now = time.monotonic()
            self._orphans = [t for t in self._orphans if t > now]
            return min(self._orphans) - now + 0.3 if self._orphans else 0.0


def _delivery(message: ReceivedMessage) -> dict[str, Any]:
    """What every handler is told about the delivery it handles."""
    return {"message_id": message.message_id, "trace": message.application_properties}
