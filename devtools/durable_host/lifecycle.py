"""Instance lifecycle (start, completion, failure, continue-as-new, what a parent hears) and activity
work, with the fault injection and ``crash`` that act on an activity's result before it is committed.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import deque
from datetime import datetime
from typing import Any

from .aio import call_maybe_async
from .history import activity_failure, make_event
from .state import (
    RUNNING_STATUSES,
    TERMINAL_STATUSES,
    H,
    Status,
    _Execution,
    _Instance,
    _Message,
    _ParentRef,
    _played,
    _Task,
    _WorkItem,
)
from .timers import _short


class _Lifecycle:
    """What the framework does when an instance starts, ends or continues as new, and activity work."""

    def _create_instance(
        self, name: str, instance_id: str, input_json: str | None, *, parent: _ParentRef | None = None
    ) -> None:
        now = self.clock.now()
        execution = _Execution(uuid.uuid4().hex, input_json)
        inst = _Instance(instance_id, name, Status.Pending, now, now, execution, parent=parent)
        self._instances[instance_id] = inst
        self._deliver(inst, self._execution_started(inst, now))
        where = f" (sub-orchestration of {parent.instance_id})" if parent else ""
        self._log(instance_id, f"scheduled {name!r}{where} with input {_short(input_json)}")

    def _execution_started(self, inst: _Instance, now: datetime) -> dict:
        parent = inst.parent
        parent_json = parent and {
            "Name": parent.name,
            "OrchestrationInstance": {"InstanceId": parent.instance_id, "ExecutionId": parent.execution_id},
            "TaskScheduleId": parent.task_id,
        }
        return make_event(
            H.EXECUTION_STARTED,
            now,
            Name=inst.name,
            Input=inst.execution.input,
            Version="",
            OrchestrationInstance={
                "InstanceId": inst.instance_id,
                "ExecutionId": inst.execution.execution_id,
            },
            ParentInstance=parent_json,
            Tags=None,
            ParentTraceContext=None,  # DurableTask.Core's distributed-trace context; the app carries its own
            Generation=len(inst.past_histories) + 1,
        )

    def _dispatch(self, inst: _Instance, task: _Task) -> None:
        if task.kind == "activity":
            self._queue_activity(inst, task)
            attempt = f" (attempt {task.retry.attempts})" if task.retry and task.retry.attempts > 1 else ""
            self._log(inst.instance_id, f"activity {task.name!r} #{task.id} scheduled{attempt}")
            return
        child_id = task.child_instance_id
        existing = self._instances.get(child_id)
        if existing is not None and existing.status in RUNNING_STATUSES:
            # A "Duplicate start event": nobody answers the parent (docs/durable-test-host.md, "Fidelity").
            dropped = f"start message for {child_id} dropped (it is already {existing.status.value})"
            task_label = f"sub-orchestration {task.name!r} #{task.id}"
            self._log(inst.instance_id, f"{task_label}: {dropped}; this task will get no answer")
            self._log(child_id, f"duplicate start event from {inst.instance_id} dropped")
            return
        parent = _ParentRef(inst.instance_id, inst.execution.execution_id, task.id, inst.name)
        self._create_instance(task.name, child_id, task.input, parent=parent)

    def _queue_activity(self, inst: _Instance, task: _Task) -> None:
        self._activity_queue.append(
            _WorkItem(inst.instance_id, inst.execution.execution_id, task.id, task.name, task.input)
        )

    def _held(self, inst: _Instance, outcome: str) -> bool:
        """Whether the instance must stay Running although its code finished (``outcome``):
        ``TaskOrchestrationExecutor.ExecuteCore`` ends it only ``if (!this.context.HasOpenTasks)``."""
        open_tasks = self._open_tasks(inst.execution)
        if not open_tasks:
            return False
        if inst.execution.held != outcome:
            what = ", ".join(f"{t.kind} #{t.id}" for t in open_tasks)
            why = f"orchestrator {outcome}, but open task(s) {what} keep it Running until they finish"
            self._log(inst.instance_id, why)
        inst.execution.held = outcome
        return True

    def _complete(self, inst: _Instance, output: Any) -> None:
        if self._held(inst, "returned"):
            return
        result = json.dumps(output)
        ended = make_event(
            H.EXECUTION_COMPLETED, self.clock.now(), OrchestrationStatus="Completed", Result=result
        )
        self._finish(inst, Status.Completed, output, ended, {"Result": result})
        self._log(inst.instance_id, f"completed: {_short(output)}")

    def _fail(self, inst: _Instance, message: str, details: str) -> None:
        failure = {"ErrorMessage": message, "StackTrace": details}
        ended = make_event(
            H.EXECUTION_COMPLETED,
            self.clock.now(),
            OrchestrationStatus="Failed",
            Result=message,
            FailureDetails=failure,
        )
        self._finish(inst, Status.Failed, message, ended, {"Reason": message, "Details": details})
        self._log(inst.instance_id, f"FAILED: {message}")

    def _finish(self, inst: _Instance, status: Status, output: Any, ended: dict, answer: dict) -> None:
        """End the execution with the ``ended`` event; the parent hears ``answer``, the fields of a
        SubOrchestrationInstanceFailed (when it has a Reason) or Completed."""
        inst.history.append(_played(ended))
        inst.status = status
        inst.output = output
        inst.updated = self.clock.now()
        ref = inst.parent
        parent = ref and self._live(ref.instance_id, ref.execution_id)
        if parent is not None:
            failed = "Reason" in answer
            kind = H.SUB_ORCHESTRATION_INSTANCE_FAILED if failed else H.SUB_ORCHESTRATION_INSTANCE_COMPLETED
            self._deliver(parent, make_event(kind, inst.updated, TaskScheduledId=ref.task_id, **answer))

    def _continue_as_new(self, inst: _Instance, input_json: str | None, carried: list[_Message]) -> None:
        """Start the next execution with ``carried`` events from the batch, then any that arrived since
        (``TaskOrchestrationContext.HandleEventRaisedEvent``: ``AddEventToNextIteration``)."""
        now = self.clock.now()
        carried = [*carried, *(m for m in inst.inbox if m.event["EventType"] == H.EVENT_RAISED)]
        # DurableTask.Core's ContinueAsNewEvent; the old history is kept for ``histories``.
        ended = make_event(H.CONTINUE_AS_NEW, now, OrchestrationStatus="ContinuedAsNew", Result=input_json)
        inst.history.append(_played(ended))
        inst.past_histories.append(inst.history)
        inst.execution = _Execution(uuid.uuid4().hex, input_json)
        inst.history = []
        inst.status = Status.ContinuedAsNew
        inst.updated = now
        inst.inbox = [_Message(self._execution_started(inst, now)), *carried]
        self._dirty[inst.instance_id] = None
        kept = f", {len(carried)} event(s) carried over" if carried else ""
        generation = f"generation {len(inst.past_histories) + 1}"
        self._log(inst.instance_id, f"continued as new ({generation}) with input {_short(input_json)}{kept}")

    def crash_activity_once(
        self, name: str, exc: BaseException | None = None, *, after: bool = False, times: int = 1
    ) -> None:
        """Make the next ``times`` calls of activity ``name`` raise ``exc``, instead of running
        (``after=False``) or after running (``after=True``, the side effect happened)."""
        injected = exc or RuntimeError(f"injected failure in {name!r}")
        self._add_fault(name, "after" if after else "before", injected, times)

    def lose_activity_result_once(self, name: str, *, times: int = 1) -> None:
        """Call activity ``name``, then lose its result as a worker crash would: it is redelivered."""
        self._add_fault(name, "lose_result", None, times)

    def _add_fault(self, name: str, mode: str, exc: BaseException | None, times: int) -> None:
        with self._lock:
            self._faults.setdefault(name, deque()).extend([(mode, exc)] * times)

    def crash(self, instance_id: str | None = None) -> None:
        """Drop in-memory orchestration state, keeping only what a durable backend would keep
        (docs/durable-test-host.md, "Crashes and faults")."""
        with self._lock:
            targets = [self._require(instance_id)] if instance_id else list(self._instances.values())
            for inst in targets:
                lost = [m for m in inst.inbox if m.task_id is not None]
                inst.inbox = [m for m in inst.inbox if m.task_id is None]
                for message in lost:
                    self._queue_activity(inst, inst.execution.tasks[message.task_id])
                inst.last_actions = None
                detail = f"; {len(lost)} uncommitted activity result(s) lost, redelivering" if lost else ""
                self._log(inst.instance_id, f"CRASH: in-memory state dropped{detail}")
                if inst.inbox and inst.status not in TERMINAL_STATUSES:
                    self._dirty[inst.instance_id] = None

    def _execute_activity(self, item: _WorkItem) -> None:
        activity = self.functions.activities[item.name]
        faults = self._faults.get(item.name)
        fault, injected = faults.popleft() if faults else (None, None)
        started = time.perf_counter()
        try:
            if fault == "before":
                raise injected
            value = activity.decode_input(item.input)
            self.activity_calls[item.name] += 1
            result = call_maybe_async(self._async, activity.invoke, value)
            if fault == "after":
                raise injected
            answer = {"Result": activity.encode_output(result)}
            kind, outcome = H.TASK_COMPLETED, f"completed -> {_short(answer['Result'])}"
        except Exception as exc:
            reason, details = activity_failure(item.name, exc)
            answer = {"Reason": reason, "Details": details}
            kind, outcome = H.TASK_FAILED, f"failed: {type(exc).__name__}: {exc}"
        elapsed = f"{(time.perf_counter() - started) * 1000:.1f} ms"
        what = f"activity {item.name!r} #{item.task_id}"
        if fault == "lose_result":
            self._activity_queue.append(item)
            self._log(item.instance_id, f"{what} ran ({elapsed}) but its result was lost; redelivering")
            return
        inst = self._live(item.instance_id, item.execution_id)
        discarded = "; result discarded" if inst is None else ""
        self._log(item.instance_id, f"{what} {outcome} ({elapsed}){discarded}")
        if inst is not None:
            event = make_event(kind, self.clock.now(), TaskScheduledId=item.task_id, **answer)
            self._deliver(inst, event, task_id=item.task_id)
