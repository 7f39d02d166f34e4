"""Instance lifecycle: creation, sub-orchestrations, completion, failure, continue-as-new.

These are the framework's decisions after an episode (when an instance may complete or fail, what a
parent hears from its child, what crosses a continue-as-new), separate from the replay itself.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from .history import (
    format_time,
    make_event,
)
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
from .tracing import _short


class _Lifecycle:
    """What the framework does when an instance starts, ends or continues as new."""

    def _create_instance(
        self,
        name: str,
        instance_id: str,
        input_json: str | None,
        *,
        version: str = "",
        parent: _ParentRef | None = None,
    ) -> _Instance:
        now = self.clock.now()
        execution = _Execution(uuid.uuid4().hex, input_json)
        inst = _Instance(
            instance_id, name, Status.Pending, now, now, execution, version=version, parent=parent
        )
        self._instances[instance_id] = inst
        self._deliver(inst, self._execution_started(inst, now))
        where = f" (sub-orchestration of {parent.instance_id})" if parent else ""
        self._log(instance_id, f"scheduled {name!r}{where} with input {_short(input_json)}")
        return inst

    def _execution_started(self, inst: _Instance, now: datetime) -> dict:
        parent = inst.parent
        parent_json = None
        if parent is not None:
            parent_json = {
                "Name": parent.name,
                "OrchestrationInstance": {
                    "InstanceId": parent.instance_id,
                    "ExecutionId": parent.execution_id,
                },
                "TaskScheduleId": parent.task_id,
            }
        return make_event(
            H.EXECUTION_STARTED,
            now,
            Name=inst.name,
            Input=inst.execution.input,
            Version=inst.version,
            OrchestrationInstance={
                "InstanceId": inst.instance_id,
                "ExecutionId": inst.execution.execution_id,
            },
            ParentInstance=parent_json,
            Tags=None,
        )

    def _dispatch(self, inst: _Instance, task: _Task) -> None:
        execution = inst.execution
        if task.kind == "activity":
            self._activity_queue.append(
                _WorkItem(inst.instance_id, execution.execution_id, task.id, task.name, task.input)
            )
            attempt = f" (attempt {task.retry.attempts})" if task.retry and task.retry.attempts > 1 else ""
            self._log(inst.instance_id, f"activity {task.name!r} #{task.id} scheduled{attempt}")
            return
        child_id = task.child_instance_id
        existing = self._instances.get(child_id)
        if existing is not None and existing.status in RUNNING_STATUSES:
            event = make_event(
                H.SUB_ORCHESTRATION_INSTANCE_FAILED,
                self.clock.now(),
                TaskScheduledId=task.id,
                Reason=f"An Orchestration instance with the status {existing.status.value} already exists.",
                Details="",
            )
            self._deliver(inst, event)
            return
        parent = _ParentRef(inst.instance_id, execution.execution_id, task.id, inst.name)
        self._create_instance(task.name, child_id, task.input, parent=parent)

    def _complete(self, inst: _Instance, output: Any) -> None:
        execution = inst.execution
        open_timers = self._open_timers(execution) if self.hold_completion_for_open_timers else []
        if open_timers:
            if not execution.completion_held:
                when = ", ".join(f"#{t.id} at {format_time(t.fire_at)}" for t in open_timers)
                self._log(
                    inst.instance_id,
                    f"orchestrator returned, but un-cancelled timer(s) {when} keep it Running "
                    "until they fire",
                )
            execution.completion_held = True
            return
        now = self.clock.now()
        inst.status = Status.Completed
        inst.output = output
        inst.updated = now
        result = json.dumps(output)
        inst.history.append(
            _played(make_event(H.EXECUTION_COMPLETED, now, OrchestrationStatus="Completed", Result=result))
        )
        self._log(inst.instance_id, f"completed: {_short(output)}")
        self._notify_parent(inst, failed=False, result=result)

    def _fail(self, inst: _Instance, message: str, details: str) -> None:
        now = self.clock.now()
        inst.status = Status.Failed
        inst.output = message
        inst.failure_details = details
        inst.updated = now
        inst.history.append(
            _played(
                make_event(
                    H.EXECUTION_COMPLETED,
                    now,
                    OrchestrationStatus="Failed",
                    Result=message,
                    FailureDetails={"ErrorMessage": message, "StackTrace": details},
                )
            )
        )
        self._log(inst.instance_id, f"FAILED: {message}")
        self._notify_parent(inst, failed=True, reason=message, details=details)

    def _continue_as_new(self, inst: _Instance, input_json: str | None) -> None:
        now = self.clock.now()
        carried = [m for m in inst.inbox if m.event["EventType"] == H.EVENT_RAISED]
        inst.execution = _Execution(uuid.uuid4().hex, input_json)
        inst.history = []
        inst.generations += 1
        inst.status = Status.ContinuedAsNew
        inst.updated = now
        inst.inbox = [_Message(self._execution_started(inst, now)), *carried]
        self._dirty[inst.instance_id] = None
        kept = f", {len(carried)} pending event(s) carried over" if carried else ""
        self._log(
            inst.instance_id,
            f"continued as new (generation {inst.generations}) with input {_short(input_json)}{kept}",
        )

    def _notify_parent(
        self, inst: _Instance, *, failed: bool, result: str | None = None, reason: str = "", details: str = ""
    ) -> None:
        ref = inst.parent
        if ref is None:
            return
        parent = self._instances.get(ref.instance_id)
        if (
            parent is None
            or parent.execution.execution_id != ref.execution_id
            or parent.status in TERMINAL_STATUSES
        ):
            return
        now = self.clock.now()
        if failed:
            event = make_event(
                H.SUB_ORCHESTRATION_INSTANCE_FAILED,
                now,
                TaskScheduledId=ref.task_id,
                Reason=reason,
                Details=details,
            )
        else:
            event = make_event(
                H.SUB_ORCHESTRATION_INSTANCE_COMPLETED, now, TaskScheduledId=ref.task_id, Result=result
            )
        self._deliver(parent, event)
