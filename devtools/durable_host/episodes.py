"""Episodes: one replay of an orchestrator on a batch of new messages, and turning the actions it
returns into history and work, numbered as the extension's shim numbers them
(docs/durable-test-host.md, "Sequence numbers" and "Retries")."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from .history import (
    ActionType,
    action_label,
    event_label,
    flatten_actions,
    format_time,
    make_event,
    orchestrator_failure,
    parse_failure,
    parse_time,
    replay,
    schema_fields,
    unknown_function,
)
from .state import (
    TERMINAL_STATUSES,
    H,
    Status,
    _Decisions,
    _Execution,
    _Instance,
    _Message,
    _OrchestrationError,
    _played,
    _Retry,
    _Task,
)
from .timers import _delta

#: The events that answer a task, and the field naming the task they answer.
_ANSWERS = {
    H.TASK_COMPLETED: "TaskScheduledId",
    H.TASK_FAILED: "TaskScheduledId",
    H.SUB_ORCHESTRATION_INSTANCE_COMPLETED: "TaskScheduledId",
    H.SUB_ORCHESTRATION_INSTANCE_FAILED: "TaskScheduledId",
    H.TIMER_FIRED: "TimerId",
}


#: The call actions: the kind of task each makes, and the role its function must have.
_CALLS = {
    ActionType.CALL_ACTIVITY: ("activity", "activity"),
    ActionType.CALL_ACTIVITY_WITH_RETRY: ("activity", "activity"),
    ActionType.CALL_SUB_ORCHESTRATOR: ("suborchestration", "orchestrator"),
    ActionType.CALL_SUB_ORCHESTRATOR_WITH_RETRY: ("suborchestration", "orchestrator"),
}


class _Episodes:
    """Running episodes and recording what the orchestrator decided."""

    def _deliver(self, inst: _Instance, event: dict, task_id: int | None = None) -> None:
        inst.inbox.append(_Message(event, task_id))
        self._dirty[inst.instance_id] = None

    def _live(self, instance_id: str, execution_id: str) -> _Instance | None:
        """The instance while ``execution_id`` is its running execution: a message for a finished or
        continued-as-new execution is dropped, as ``TaskOrchestrationDispatcher`` drops it."""
        inst = self._instances.get(instance_id)
        if inst is None or inst.execution.execution_id != execution_id or inst.status in TERMINAL_STATUSES:
            return None
        return inst

    def _is_retry_relevant(self, execution: _Execution, event: dict) -> bool:
        """Events after which the engine allocates a sequence number for a retry."""
        kind = event["EventType"]
        if kind not in (H.TASK_FAILED, H.SUB_ORCHESTRATION_INSTANCE_FAILED, H.TIMER_FIRED):
            return False
        task = execution.tasks.get(event[_ANSWERS[kind]])
        if task is None or task.retry is None:
            return False
        if kind == H.TIMER_FIRED:
            return task.retry.timer_id == task.id and task.retry.attempts < task.retry.max_attempts
        return task.retry.current_task_id == task.id

    def _take_batch(self, inst: _Instance) -> list[_Message]:
        """All new messages, retry-relevant ones first after an ExecutionStarted (stable otherwise).

        The SDK numbers a retry's timer or attempt when it replays the failure (or retry timer), the
        engine before the replay; those events never resume the orchestrator code, so putting them
        first keeps both numberings in step when the episode also schedules new work.
        """

        def rank(message: _Message) -> int:
            if message.event["EventType"] == H.EXECUTION_STARTED:
                return 0
            return 1 if self._is_retry_relevant(inst.execution, message.event) else 2

        batch, inst.inbox = sorted(inst.inbox, key=rank), []
        return batch

    def _run_episode(self, inst: _Instance) -> None:
        execution = inst.execution
        orchestrator = self.functions.orchestrators[inst.name]
        now = self.clock.now()
        out = _Decisions(now)
        batch = self._take_batch(inst)
        new_events = [make_event(H.ORCHESTRATOR_STARTED, now)] + [m.event for m in batch]
        execution.episodes += 1
        labels = ", ".join(event_label(m.event) for m in batch)
        old = f"{len(inst.history)} old event(s)"
        self._log(inst.instance_id, f"replay #{execution.episodes} with {old} + {labels}")
        for message in batch:
            self._account(inst, message.event, out)

        context = {
            "history": [*inst.history, *new_events],
            "instanceId": inst.instance_id,
            "isReplaying": bool(inst.history),
            "parentInstanceId": inst.parent.instance_id if inst.parent else None,
            "input": execution.input,
            **schema_fields(self.schema_version),
        }
        try:
            state, error, details = replay(orchestrator.handler, context), None, ""
        except Exception as exc:
            state, error, details = parse_failure(exc)

        inst.history.extend(_played(e) for e in new_events)
        if inst.status in (Status.Pending, Status.ContinuedAsNew):
            inst.status = Status.Running
        inst.updated = now
        if state.get("customStatus") is not None:
            inst.custom_status = state["customStatus"]
        inst.last_actions = state.get("actions")

        # Scheduled even when the orchestrator raised (``ScheduleDurableTaskEvents`` replays the actions
        # before it throws); that work keeps the instance open until it is done.
        broken = None
        try:
            self._apply_actions(inst, state.get("actions") or [], out)
        except _OrchestrationError as exc:
            broken = exc
        inst.history.extend(_played(e) for e in [*out.events, make_event(H.ORCHESTRATOR_COMPLETED, now)])
        if broken is not None:
            # At once, as the framework's NonDeterministicOrchestrationException does.
            self._fail(inst, *orchestrator_failure(inst.name, str(broken), ""))
            return

        for action in out.after_commit:
            action()
        if error is not None:
            if not self._held(inst, "raised"):
                self._fail(inst, *orchestrator_failure(inst.name, error, details))
        elif state.get("isDone") and (continue_as_new := _continue_as_new_action(state)) is not None:
            # Continue-as-new is a completion too: it waits for open tasks like any other.
            execution.carried.extend(self._carried_over(orchestrator, context, batch))
            if not self._held(inst, "continued as new"):
                self._continue_as_new(inst, continue_as_new.get("input"), execution.carried)
        elif state.get("isDone"):
            self._complete(inst, state.get("output"))

    def _carried_over(self, orchestrator: Any, context: dict, batch: list[_Message]) -> list[_Message]:
        """The EventRaised messages of ``batch`` after its continue-as-new point, found by replaying
        the batch's prefixes (``TaskOrchestrationContext.HandleEventRaisedEvent``;
        docs/durable-test-host.md, "Continue-as-new")."""
        history = context["history"]
        old = history[: len(history) - len(batch)]
        for k in range(1, len(batch)):
            trial = {**context, "history": [*old, *(m.event for m in batch[:k])]}
            try:
                state = replay(orchestrator.handler, trial)
            except Exception:
                continue
            if state.get("isDone") and _continue_as_new_action(state):
                return [m for m in batch[k:] if m.event["EventType"] == H.EVENT_RAISED]
        return []

    def _account(self, inst: _Instance, event: dict, out: _Decisions) -> None:
        """Engine bookkeeping for an event entering history; retry follow-ups are decided here."""
        execution = inst.execution
        kind = event["EventType"]
        task = execution.tasks.get(event[_ANSWERS[kind]]) if kind in _ANSWERS else None
        if task is None:
            return
        relevant = self._is_retry_relevant(execution, event)
        task.done = True
        if not relevant:
            return
        retry = task.retry
        if kind == H.TIMER_FIRED:
            retry.timer_id = None
            retry.attempts += 1
            attempt = _Task(next(execution.ids), retry.kind, name=retry.name, input=retry.input, retry=retry)
            retry.current_task_id = self._add_task(inst, attempt, out, retry.instance_id)
            return
        retry.current_task_id = None
        timer = _Task(next(execution.ids), "timer", fire_at=out.now + retry.first_interval, retry=retry)
        retry.timer_id = self._add_task(inst, timer, out)
        failed = f"{retry.kind} {retry.name!r} attempt {retry.attempts}/{retry.max_attempts} failed"
        self._log(inst.instance_id, f"{failed}; retry timer #{timer.id} at {format_time(timer.fire_at)}")

    def _apply_actions(self, inst: _Instance, actions: list, out: _Decisions) -> None:
        execution = inst.execution
        flat = list(flatten_actions(actions))
        known = len(execution.actions)
        if len(flat) < known:
            raise _OrchestrationError(
                f"Non-Deterministic workflow detected: a previous execution scheduled {known} action(s) "
                f"but this replay scheduled only {len(flat)}. Was the orchestrator code changed while the "
                "instance was running, or does it depend on something other than its history?"
            )
        for index, action in enumerate(flat):
            signature = _signature(action)
            if index >= known:
                task_id = self._schedule_action(inst, action, out)
                execution.actions.append((signature, task_id))
                continue
            previous, task_id = execution.actions[index]
            if signature != previous:
                raise _OrchestrationError(
                    f"Non-Deterministic workflow detected: action #{index} was "
                    f"{_describe_signature(previous)} in a previous execution "
                    f"but is {_describe_signature(signature)} in this replay."
                )
            if action.get("actionType") == ActionType.CREATE_TIMER and action.get("isCanceled"):
                self._cancel_timer(inst, execution.tasks[task_id])

    def _schedule_action(self, inst: _Instance, action: dict, out: _Decisions) -> int | None:
        execution = inst.execution
        kind = action.get("actionType")
        if kind == ActionType.CREATE_TIMER:
            task = _Task(next(execution.ids), "timer", fire_at=parse_time(action["fireAt"]))
            when = f"{format_time(task.fire_at)} (in {_delta(task.fire_at - out.now)})"
            self._log(inst.instance_id, f"timer #{task.id} created for {when}")
            if action.get("isCanceled"):
                self._cancel_timer(inst, task)
            return self._add_task(inst, task, out)
        if kind == ActionType.WAIT_FOR_EXTERNAL_EVENT:
            self._log(inst.instance_id, f"waiting for external event {action.get('externalEventName')!r}")
        if kind in (ActionType.WAIT_FOR_EXTERNAL_EVENT, ActionType.CONTINUE_AS_NEW):
            return None
        if kind not in _CALLS:
            raise _OrchestrationError(f"{action_label(kind)} is not supported by the durable test host")

        task_kind, role = _CALLS[kind]
        name, requested = action["functionName"], action.get("instanceId")
        if name not in (self.functions.activities if role == "activity" else self.functions.orchestrators):
            raise _OrchestrationError(unknown_function(name, role))
        if requested is not None and requested in (inst.instance_id, inst.parent and inst.parent.instance_id):
            raise _OrchestrationError(
                "The instance ID of a sub-orchestration must be different than the instance ID of a "
                "parent orchestration."
            )
        task = _Task(next(execution.ids), task_kind, name=name, input=action.get("input"))
        if kind in (ActionType.CALL_ACTIVITY_WITH_RETRY, ActionType.CALL_SUB_ORCHESTRATOR_WITH_RETRY):
            options = action.get("retryOptions") or {}
            first_interval = timedelta(milliseconds=options.get("firstRetryIntervalInMilliseconds", 1000))
            attempts = int(options.get("maxNumberOfAttempts", 1))
            task.retry = _Retry(
                task.kind, name, task.input, requested, first_interval, attempts, current_task_id=task.id
            )
        return self._add_task(inst, task, out, requested)

    def _add_task(
        self, inst: _Instance, task: _Task, out: _Decisions, requested_id: str | None = None
    ) -> int:
        """Record ``task`` and the event that schedules it; its work starts once the episode is stored."""
        inst.execution.tasks[task.id] = task
        if task.kind == "timer":
            event = make_event(H.TIMER_CREATED, out.now, task.id, FireAt=format_time(task.fire_at))
        elif task.kind == "activity":
            event = make_event(
                H.TASK_SCHEDULED, out.now, task.id, Name=task.name, Input=task.input, Version=""
            )
        else:
            task.child_instance_id = child = requested_id or f"{inst.execution.execution_id}:{task.id}"
            fields = {"Name": task.name, "Input": task.input, "InstanceId": child, "Version": ""}
            event = make_event(H.SUB_ORCHESTRATION_INSTANCE_CREATED, out.now, task.id, **fields)
        out.events.append(event)
        if task.kind != "timer":
            out.after_commit.append(lambda: self._dispatch(inst, task))
        elif not task.cancelled:
            out.after_commit.append(lambda: self._schedule_timer(inst, task))
        return task.id


def _signature(action: dict) -> tuple:
    kind = action.get("actionType")
    if kind == ActionType.WAIT_FOR_EXTERNAL_EVENT:
        return (kind, action.get("externalEventName"))
    return (kind, action.get("functionName"))


def _describe_signature(signature: tuple) -> str:
    kind, name = signature
    return f"{action_label(kind)}({name!r})" if name else action_label(kind)


def _continue_as_new_action(state: dict) -> dict | None:
    actions = flatten_actions(state.get("actions") or [])
    return next((a for a in actions if a.get("actionType") == ActionType.CONTINUE_AS_NEW), None)
