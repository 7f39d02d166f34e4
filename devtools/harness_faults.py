"""The pattern harness's fault hooks: kill an agent process, crash a dispatch between its ledger
write and its send, pause agents, hold / release / duplicate messages, fail a send. A mixin of
:class:`devtools.harness.PatternHarness`, split out so the harness module stays about running the app.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from activities.worker.handlers.base import AgentCrash
from devtools.faulty_transport import SendFault, body_matches
from workflow_core.transport import (
    ReceivedMessage,
)

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
        five minutes with the Azure Storage provider). Meanwhile the orchestration waits on the activity
        and only the watchdog can notice the step. (The durable test host redelivers lost activity
        results at once, so the delay is added here, around its activity executor.)"""
        self.fail_send(step_id, attempt=attempt, kind="work", exc=ProcessDied(f"died sending {step_id}"))
        host = self.host
        execute = host._execute_activity

        def execute_or_die(item: Any) -> None:
            payload = json.loads(item.input or "{}")
            if item.name != "dispatch_step" or (payload.get("step_id"), payload.get("attempt")) != (
                step_id,
                attempt,
            ):
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
        body = message.body
        with self._lock:
            for entry in self._holds:
                if entry.queue != kind or (entry.times is not None and entry.matched >= entry.times):
                    continue
                if not body_matches(body, entry.step_id, entry.attempt, entry.kind):
                    continue
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
        handle = self._work_handler if kind == "work" else self._result_handler
        self._settle(message, handle)

    def release(self, entry: _Hold | None = None) -> int:
        """Let the holding agent(s) process what they kept, on the next pump run; returns how many."""
        with self._lock:
            holds = [entry] if entry is not None else list(self._holds)
            count = 0
            for h in holds:
                self._released.extend((h.queue, m) for m in h.held)
                count += len(h.held)
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
