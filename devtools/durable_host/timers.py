"""The loop, the clock and timers: one deterministic iteration (due timers, periodic callbacks,
episodes, activities, pumps) repeated until idle; only then does a virtual clock jump to the next
timer (docs/durable-test-host.md, "Time"). A TimeoutError carries the timeline's diagnosis."""

from __future__ import annotations

import heapq
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from azure.durable_functions.models.DurableOrchestrationStatus import DurableOrchestrationStatus

from workflow_core.clock import use_clock

from .aio import call_maybe_async
from .history import ActionType, flatten_actions, format_time, make_event
from .state import TERMINAL_STATUSES, H, _Execution, _Instance, _Periodic, _Task

#: Loop iterations one run to idle may take before the host calls it a livelock.
MAX_STEPS = 100_000
WAIT = ActionType.WAIT_FOR_EXTERNAL_EVENT


class _Loop:
    """Running the host: steps, idling, skipping virtual time, firing timers, and the timeline."""

    def add_pump(self, fn: Callable[[], int | None], name: str | None = None) -> Callable[[], int | None]:
        """Call ``fn()`` every loop iteration; while it reports work (0/None = idle), time never skips."""
        with self._lock:
            self._pumps.append((name or getattr(fn, "__name__", "pump"), fn))
            return fn

    def remove_pump(self, fn: Callable[[], Any]) -> None:
        with self._lock:
            self._pumps = [(n, f) for n, f in self._pumps if f is not fn]

    def add_periodic(
        self,
        fn: Callable[[], Any],
        every: timedelta,
        *,
        name: str | None = None,
        first_at: datetime | None = None,
    ) -> Callable[[], Any]:
        """Call ``fn()`` every ``every`` of host time (a timer trigger); time skips stop at each run."""
        if every <= timedelta(0):
            raise ValueError("every must be positive")
        with self._lock:
            next_at = first_at or (self.clock.now() + every)
            self._periodics.append(_Periodic(name or getattr(fn, "__name__", "periodic"), fn, every, next_at))
            return fn

    def remove_periodic(self, fn: Callable[[], Any]) -> None:
        with self._lock:
            self._periodics = [p for p in self._periodics if p.fn is not fn]

    @contextmanager
    def batched(self, *instance_ids: str) -> Iterator[None]:
        """Hold these instances' episodes while the block runs, so what arrives meanwhile forms one
        batch (docs/durable-test-host.md, "Batches")."""
        with self._lock:
            self._batching.update(instance_ids)
        try:
            yield
        finally:
            with self._lock:
                self._batching.difference_update(instance_ids)

    def step(self) -> int:
        """One loop iteration; returns the units of work done (0 = nothing could run now)."""
        with self._running():
            return self._step()

    def run_until_idle(self) -> int:
        """Run everything that can run at the current time; returns the work done. Never skips time."""
        with self._running():
            return self._run_idle()

    def run_until(
        self, predicate: Callable[[], bool], timeout_virtual: timedelta = timedelta(days=1)
    ) -> None:
        """Run, skipping time to the next timer whenever idle, until ``predicate()`` holds; raises
        ``TimeoutError`` after ``timeout_virtual`` of host time (real time with a real clock)."""
        with self._running():
            deadline = self.clock.now() + timeout_virtual
            while True:
                self._run_idle()
                if predicate():
                    return
                wake = self._next_wakeup()
                now = self.clock.now()
                if self.clock.is_virtual:
                    if wake is None:
                        raise TimeoutError(self._diagnose("nothing left to run and no timer pending"))
                    if wake > deadline:
                        late = f"next timer at {format_time(wake)} is after the timeout"
                        raise TimeoutError(self._diagnose(late))
                    self._log("", f"clock skips {_delta(wake - now)} to {format_time(wake)}")
                    self.clock.advance_to(wake)
                elif now >= deadline:
                    raise TimeoutError(self._diagnose("real-time timeout"))
                else:
                    pause = min(self.poll_interval, (min(deadline, wake or deadline) - now).total_seconds())
                    self._lock.release()
                    try:
                        time.sleep(max(pause, 0.0))
                    finally:
                        self._lock.acquire()

    def run_until_complete(
        self, instance_id: str, timeout_virtual: timedelta = timedelta(days=1)
    ) -> DurableOrchestrationStatus:
        """Run until the instance is Completed, Failed or Terminated; returns its status."""
        self._require(instance_id)
        self.run_until(lambda: self._instances[instance_id].status in TERMINAL_STATUSES, timeout_virtual)
        return self.get_status(instance_id)

    def advance(self, delta: timedelta) -> None:
        """Move the virtual clock forward by ``delta``, firing timers in order and running to idle."""
        if not self.clock.is_virtual:
            raise RuntimeError("advance() needs a virtual clock")
        with self._running():
            target = self.clock.now() + delta
            self._run_idle()
            while (wake := self._next_wakeup()) is not None and wake <= target:
                self.clock.advance_to(wake)
                self._run_idle()
            self.clock.advance_to(target)
            self._run_idle()

    @property
    def iteration_busy(self) -> bool:
        """Whether the iteration now calling a pump already did work. Such an iteration is always
        followed by another, and only an iteration without work lets a virtual clock skip, so a pump
        may put off a poll it expects to come back empty: the idle check still polls for real."""
        return self._iteration_work > 0

    @property
    def run_serial(self) -> int:
        """Counts entries into the loop: what a test did between two (e.g. queued a message itself)
        lies behind a new number."""
        return self._run_serial

    @contextmanager
    def _running(self) -> Iterator[None]:
        with self._lock:
            if self._loop_thread == threading.get_ident():
                raise RuntimeError("the durable host loop cannot be re-entered from inside a step")
            self._loop_thread = threading.get_ident()
            self._run_serial += 1
            try:
                with use_clock(self.clock.now):
                    yield
            finally:
                self._loop_thread = None

    def _run_idle(self) -> int:
        total = 0
        for _ in range(MAX_STEPS):
            work = self._step()
            if work == 0:
                return total
            total += work
        busy = f"still busy after {MAX_STEPS} steps: an orchestrator or a pump never goes idle"
        raise RuntimeError(self._diagnose(busy))

    def _step(self) -> int:
        work = self._fire_due_timers()
        work += self._run_due_periodics()
        for instance_id in list(self._dirty):
            if instance_id in self._batching:
                continue
            self._dirty.pop(instance_id, None)
            inst = self._instances.get(instance_id)
            if inst is None or inst.status in TERMINAL_STATUSES or not inst.inbox:
                continue
            self._run_episode(inst)
            work += 1
            if inst.inbox and inst.status not in TERMINAL_STATUSES:
                self._dirty[instance_id] = None
        for _ in range(len(self._activity_queue)):
            self._execute_activity(self._activity_queue.popleft())
            work += 1
        for name, pump in list(self._pumps):
            self._iteration_work = work
            try:
                done = call_maybe_async(self._async, pump)
            finally:
                self._iteration_work = 0
            if done:
                work += int(done)
                self._log("", f"pump {name}: {int(done)} unit(s) of work")
        return work

    def _next_wakeup(self) -> datetime | None:
        while self._timers and self._timer_task(self._timers[0]) is None:
            heapq.heappop(self._timers)
        candidates = [p.next_at for p in self._periodics]
        if self._timers:
            candidates.append(self._timers[0][0])
        return min(candidates) if candidates else None

    def _timer_task(self, entry: tuple) -> _Task | None:
        """The timer a queue entry stands for, or None once nobody can receive it (a cancelled one still
        fires into its running execution: docs/durable-test-host.md, "Timers")."""
        inst = self._live(entry[2], entry[3])
        return None if inst is None else inst.execution.tasks.get(entry[4])

    def _fire_due_timers(self) -> int:
        fired, now = 0, self.clock.now()
        while self._timers and self._timers[0][0] <= now:
            entry = heapq.heappop(self._timers)
            task = self._timer_task(entry)
            if task is None:
                continue
            inst = self._instances[entry[2]]
            event = make_event(H.TIMER_FIRED, now, TimerId=task.id, FireAt=format_time(task.fire_at))
            self._deliver(inst, event)
            late = " (it was cancelled: the orchestrator replays and has nothing to do)"
            self._log(inst.instance_id, f"timer #{task.id} fired{late if task.cancelled else ''}")
            fired += 1
        return fired

    def _run_due_periodics(self) -> int:
        work, now = 0, self.clock.now()
        for periodic in list(self._periodics):
            while periodic.next_at <= now:
                periodic.next_at += periodic.every
                done = call_maybe_async(self._async, periodic.fn)
                work += 1
                self._log("", f"periodic {periodic.name} ran" + (f": {done}" if done else ""))
        return work

    def _schedule_timer(self, inst: _Instance, task: _Task) -> None:
        entry = (task.fire_at, next(self._timer_seq), inst.instance_id, inst.execution.execution_id, task.id)
        heapq.heappush(self._timers, entry)

    def _cancel_timer(self, inst: _Instance, task: _Task) -> None:
        if not (task.cancelled or task.done):
            task.cancelled = True
            why = "no longer an open task; it still fires later"
            self._log(inst.instance_id, f"timer #{task.id} cancelled ({why})")

    def _open_tasks(self, execution: _Execution) -> list[_Task]:
        """Tasks the framework still waits for (``TaskOrchestrationContext.openTasks``)."""
        return [t for t in execution.tasks.values() if not t.done and not t.cancelled]

    # Tracing: timeline lines and diagnoses, in host time.

    def timeline(self, instance_id: str | None = None) -> list[tuple[datetime, str]]:
        """(host time, line) for one instance, or for all with the instance id as prefix."""
        with self._lock:
            if instance_id is not None:
                return [(t, text) for t, iid, text in self._timeline if iid == instance_id]
            return [(t, f"[{iid}] {text}" if iid else text) for t, iid, text in self._timeline]

    def format_timeline(self, instance_id: str | None = None) -> str:
        start = self.clock.start
        return "\n".join(f"{_offset(t - start)}  {text}" for t, text in self.timeline(instance_id))

    def _log(self, instance_id: str, text: str) -> None:
        self._timeline.append((self.clock.now(), instance_id, text))

    def _diagnose(self, reason: str) -> str:
        lines = [reason]
        for inst in self._instances.values():
            if inst.status in TERMINAL_STATUSES:
                continue
            open_timers = [t for t in self._open_tasks(inst.execution) if t.kind == "timer"]
            timers = ", ".join(f"#{t.id} at {format_time(t.fire_at)}" for t in open_timers)
            waits = [a for a in flatten_actions(inst.last_actions or []) if a.get("actionType") == WAIT]
            waiting = sorted({a.get("externalEventName") for a in waits})
            lines.append(
                f"  {inst.instance_id} ({inst.name}): {inst.status.value}; open timers: {timers or 'none'}; "
                f"events it has waited for: {waiting or 'none'}; undelivered messages: {len(inst.inbox)}"
            )
        tail = self.format_timeline().splitlines()[-15:]
        if tail:
            lines.append("last timeline lines:")
            lines.extend(f"  {line}" for line in tail)
        return "\n".join(lines)


def _short(value: Any, limit: int = 100) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _delta(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:g}s"
    if seconds < 7200:
        return f"{seconds / 60:g}m"
    return f"{seconds / 3600:g}h"


def _offset(delta: timedelta) -> str:
    total_ms = int(delta.total_seconds() * 1000)
    minutes, millis = divmod(abs(total_ms), 60_000)
    hours, minutes = divmod(minutes, 60)
    return f"{'-' if total_ms < 0 else '+'}{hours:02d}:{minutes:02d}:{millis // 1000:02d}.{millis % 1000:03d}"
