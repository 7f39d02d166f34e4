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
    make_event,
)
from .state import (
    RUNNING_STATUSES,
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
            ParentTraceContext=None,  # DurableTask.Core's distributed-trace context; the app carries its own
            Generation=inst.generations,
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
            # The start message of a sub-orchestration reaches the running instance: the Azure Storage
            # provider's ``DedupeExecutionStartedMessagesAsync`` skips it (it filters top-level starts
            # only), and ``TaskOrchestrationDispatcher`` then drops it as a "Duplicate start event"
            # because the instance already has an ExecutionStarted. Nobody answers the parent: its
            # task stays open until something else ends the parent.
            self._log(
                inst.instance_id,
                f"sub-orchestration {task.name!r} #{task.id}: start message for {child_id} dropped "
                f"(it is already {existing.status.value}); this task will get no answer",
            )
            self._log(child_id, f"duplicate start event from {inst.instance_id} dropped")
            return
        parent = _ParentRef(inst.instance_id, execution.execution_id, task.id, inst.name)
        self._create_instance(task.name, child_id, task.input, parent=parent)

    def _held(self, inst: _Instance, outcome: str) -> bool:
        """Whether the instance must stay Running although its code finished (``outcome``).

        ``TaskOrchestrationExecutor.ExecuteCore`` completes or fails an orchestration only
        ``if (!this.context.HasOpenTasks)``: an activity or sub-orchestration without a result, or a
        timer neither fired nor cancelled, keeps it Running. The next episode replays the code, which
        finishes the same way again, and ends it once nothing is open.
        """
        open_tasks = self._open_tasks(inst.execution) if self.hold_for_open_tasks else []
        if not open_tasks:
            return False
        if inst.execution.held != outcome:
            what = ", ".join(f"{t.kind} #{t.id}" for t in open_tasks)
            self._log(
                inst.instance_id,
                f"orchestrator {outcome}, but open task(s) {what} keep it Running until they finish",
            )
        inst.execution.held = outcome
        return True

    def _complete(self, inst: _Instance, output: Any) -> None:
        if self._held(inst, "returned"):
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

    def _continue_as_new(self, inst: _Instance, input_json: str | None, carried: list[_Message]) -> None:
        """Start the next execution with ``carried`` events from the batch, then any that arrived since.

        ``TaskOrchestrationContext.HandleEventRaisedEvent`` hands an EventRaised processed after
        ``ContinueAsNew`` (same batch) to ``AddEventToNextIteration``, and the dispatcher puts those
        carry-over events into the new execution (the Azure Storage provider's default behaviour).
        """
        now = self.clock.now()
        carried = [*carried, *(m for m in inst.inbox if m.event["EventType"] == H.EVENT_RAISED)]
        # The generation ends as the framework ends it (DurableTask.Core's ContinueAsNewEvent: an
        # ExecutionCompleted of status ContinuedAsNew whose Result is the next input); its history
        # is kept, so every generation of a run can be recorded and replayed (``histories``).
        ended = make_event(H.CONTINUE_AS_NEW, now, OrchestrationStatus="ContinuedAsNew", Result=input_json)
        inst.history.append(_played(ended))
        inst.past_histories.append(inst.history)
        inst.execution = _Execution(uuid.uuid4().hex, input_json)
        inst.history = []
        inst.generations += 1
        inst.status = Status.ContinuedAsNew
        inst.updated = now
        inst.inbox = [_Message(self._execution_started(inst, now)), *carried]
        self._dirty[inst.instance_id] = None
        kept = f", {len(carried)} event(s) carried over" if carried else ""
        self._log(
            inst.instance_id,
            f"continued as new (generation {inst.generations}) with input {_short(input_json)}{kept}",
        )

    def _notify_parent(
        self,
        inst: _Instance,
        *,
        failed: bool,
        result: str | None = None,
        reason: str = "",
        details: str | None = "",
    ) -> None:
        ref = inst.parent
        if ref is None:
            return
        parent = self._live(ref.instance_id, ref.execution_id)
        if parent is None:
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
