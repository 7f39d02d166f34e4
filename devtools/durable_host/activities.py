"""Activities and faults: running activity functions as the extension's activity shim does.

Activities are queued work items executed inline by the loop; their results reach the orchestrator
as TaskCompleted / TaskFailed messages. Fault injection and ``crash`` live here because both are
about what happens to an activity's result between running and being committed to history.
"""

from __future__ import annotations

import time
from collections import deque

from .aio import call_maybe_async
from .failures import activity_failure
from .history import (
    make_event,
)
from .state import (
    TERMINAL_STATUSES,
    H,
    _Fault,
    _WorkItem,
)
from .tracing import _short


class _Activities:
    """Activity execution, fault injection and crash recovery."""

    def crash_activity_once(
        self, name: str, exc: BaseException | None = None, *, after: bool = False, times: int = 1
    ) -> None:
        """Make the next ``times`` calls of activity ``name`` raise ``exc``.

        ``after=False``: raise instead of calling the activity (no side effect);
        ``after=True``: call it, then raise (the side effect happened, the result is a failure).
        Either way the orchestrator sees a TaskFailed.
        """
        self._add_fault(
            name,
            _Fault(exc or RuntimeError(f"injected failure in {name!r}"), "after" if after else "before"),
            times,
        )

    def lose_activity_result_once(self, name: str, *, times: int = 1) -> None:
        """Call activity ``name``, then lose its result as a worker crash would: it is redelivered."""
        self._add_fault(name, _Fault(None, "lose_result"), times)

    def _add_fault(self, name: str, fault: _Fault, times: int) -> None:
        with self._lock:
            queue = self._faults.setdefault(name, deque())
            queue.extend(fault for _ in range(times))

    def crash(self, instance_id: str | None = None) -> None:
        """Drop in-memory orchestration state, keeping only what a durable backend would keep.

        Kept: history, queued work and timers (queue messages), raised events. Lost: activity results
        not yet appended to history (their activities are redelivered, so they run again) and any
        cached replay state. The next loop iteration replays from history.
        """
        with self._lock:
            targets = [self._require(instance_id)] if instance_id else list(self._instances.values())
            for inst in targets:
                lost = [m for m in inst.inbox if m.volatile]
                inst.inbox = [m for m in inst.inbox if not m.volatile]
                for message in lost:
                    task = inst.execution.tasks.get(message.task_id)
                    if task is not None and task.kind == "activity":
                        self._activity_queue.append(
                            _WorkItem(
                                inst.instance_id, inst.execution.execution_id, task.id, task.name, task.input
                            )
                        )
                inst.last_actions = None
                detail = f"; {len(lost)} uncommitted activity result(s) lost, redelivering" if lost else ""
                self._log(inst.instance_id, f"CRASH: in-memory state dropped{detail}")
                if inst.inbox and inst.status not in TERMINAL_STATUSES:
                    self._dirty[inst.instance_id] = None

    def _execute_activity(self, item: _WorkItem) -> None:
        activity = self.functions.activities[item.name]
        faults = self._faults.get(item.name)
        fault = faults.popleft() if faults else None
        started = time.perf_counter()
        event: dict | None = None
        try:
            if fault is not None and fault.mode == "before":
                raise fault.exc
            value = activity.decode_input(item.input)
            self.activity_calls[item.name] += 1
            result = call_maybe_async(self._async, activity.invoke, value)
            if fault is not None and fault.mode == "after":
                raise fault.exc
            encoded = activity.encode_output(result)
            event = make_event(
                H.TASK_COMPLETED, self.clock.now(), TaskScheduledId=item.task_id, Result=encoded
            )
            outcome = f"completed -> {_short(encoded)}"
        except Exception as exc:
            reason, details = activity_failure(item.name, exc)
            event = make_event(
                H.TASK_FAILED,
                self.clock.now(),
                TaskScheduledId=item.task_id,
                Reason=reason,
                Details=details,
            )
            outcome = f"failed: {type(exc).__name__}: {exc}"
        elapsed = f"{(time.perf_counter() - started) * 1000:.1f} ms"
        if fault is not None and fault.mode == "lose_result":
            self._activity_queue.append(item)
            self._log(
                item.instance_id,
                f"activity {item.name!r} #{item.task_id} ran ({elapsed}) but its result was lost; "
                "redelivering",
            )
            return
        inst = self._live(item.instance_id, item.execution_id)
        if inst is None:
            self._log(
                item.instance_id,
                f"activity {item.name!r} #{item.task_id} {outcome} ({elapsed}); result discarded",
            )
            return
        self._log(item.instance_id, f"activity {item.name!r} #{item.task_id} {outcome} ({elapsed})")
        self._deliver(inst, event, volatile=True, task_id=item.task_id)
