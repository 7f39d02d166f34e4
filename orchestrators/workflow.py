"""The scheduler: one generic orchestrator that walks any workflow definition step by step.

A parallel group runs each of its steps in its own ``step_orchestrator`` (below) and waits for all; a
step that gives up starts ``compensation_orchestrator`` (below), which the supervisor starts too, under
the same deterministic id: it runs each compensator of the ledger's plan exactly like a work step, and
one that exhausts its attempts is recorded CompensationFailed while the remaining steps are still undone.
Deterministic: time comes from ``context.current_utc_datetime`` and all I/O goes through activities.
"""

from __future__ import annotations

from collections.abc import Generator
from functools import partial
from typing import Any

from orchestrators.attempts import Status, StepResult, StepRun, run_step
from orchestrators.decisions import call_activity, should_checkpoint
from orchestrators.shortcuts import LedgerShortcuts, next_write_proves
from orchestrators.state import CompensationPlan, CompensationStart, Progress, WorkflowStart
from workflow_core.contracts import (
    ACTIVITY_CREATE_STEPS,
    ACTIVITY_FINISH_COMPENSATION,
    ACTIVITY_GIVE_UP_STEP,
    ACTIVITY_PLAN_COMPENSATION,
    ACTIVITY_SETTLE_INSTANCE,
    COMPENSATION_ORCHESTRATOR,
    STEP_ORCHESTRATOR,
    compensation_instance_id,
    step_instance_id,
)
from workflow_core.workflows import (
    RetryPolicy,
    StepDefinition,
    StepInputError,
    WorkflowDefinition,
    resolve_step_input,
)


def workflow_orchestrator(context: Any) -> Generator[Any, Any, dict[str, Any] | None]:
    """For each stage, run its step (or group) to an outcome; when a step gives up, compensate; at the
    end, settle (docs/scheduler.md). What it knows of the ledger unread travels in ``ledger``."""
    start = WorkflowStart.model_validate(context.get_input())
    definition = start.pinned()  # the definition it started on, never the YAML deployed now
    workflow_input = definition.validate_input(start.input)
    progress = start.state or Progress()
    stages = _remaining_stages(definition, progress)
    status = Status(
        context,
        lambda: {
            "completed_steps": len(status.progress.completed),
            "total_steps": len(definition.steps),
            "generation": status.progress.generation,
        },
        orchestration="workflow",
        workflow=definition.name,
    )
    status.progress = progress
    ledger = LedgerShortcuts(context, definition, start, status)
    compensate = partial(_give_up_and_compensate, context, definition, status=status, trace=start.trace)
    if start.state is None:
        status("creating_steps")
        create = {"instance_id": context.instance_id, "workflow": definition.name, "version": start.version}
        yield call_activity(context, ACTIVITY_CREATE_STEPS, create)

    completed_here = 0  # steps completed in this generation (a group counts as its steps)
    for index, stage in enumerate(stages):
        steps_left = len(definition.steps) - progress.position
        checkpoint = should_checkpoint(completed_here, definition.history_checkpoint_every, steps_left)
        if checkpoint or len(stage) > 1:  # neither carries a success taken unread: ask the ledger
            progress, failed = yield from ledger.confirm(progress)
            if failed:
                return (yield from compensate(failed, progress))
        if checkpoint:
            return _continue_as_new(context, start, workflow_input, progress, status)
        if len(stage) > 1:
            progress, failed = yield from _run_group(
                context, definition, stage, workflow_input, progress, status, start
            )
            ledger.forget_instance()  # the members wrote the instance record in their own orchestrations
        else:
            (step,) = stage
            prepare = partial(
                _prepare, definition, context.instance_id, step, workflow_input, trace=start.trace
            )
            proves = next_write_proves(definition, stages, index, completed_here, steps_left)
            progress, failed = yield from ledger.run_single(step, prepare, proves, progress)
        if failed:
            return (yield from compensate(failed, progress))
        completed_here += len(stage)

    progress, failed = yield from ledger.settle(progress)
    if failed:
        return (yield from compensate(failed, progress))
    status("succeeded")
    return {"status": "succeeded", "outputs": progress.outputs, "failed_step": None, "error": None}


def _continue_as_new(
    context: Any, start: WorkflowStart, workflow_input: dict[str, Any], progress: Progress, status: Status
) -> None:
    """Checkpoint: the next generation starts from ``progress`` with a fresh, short history."""
    status.step = None
    status("checkpointing")
    next_generation = progress.model_copy(update={"generation": progress.generation + 1})
    carried = start.model_copy(update={"input": workflow_input, "state": next_generation})
    # the next generation reads the rows: these versions may be stale
    context.continue_as_new(
        carried.model_dump(exclude={"rows"} | ({"trace"} if start.trace is None else set()))
    )


def _remaining_stages(definition: WorkflowDefinition, progress: Progress) -> list[tuple[StepDefinition, ...]]:
    """The stages from ``progress.position`` on, if the checkpoint matches the definition (its completed
    steps are the definition's prefix, up to a stage boundary); otherwise resuming by position could
    skip or repeat a step, so it fails loudly and leaves the decision to an operator."""
    start, remaining, boundaries = 0, [], {0}
    for stage in definition.stages:
        if start >= progress.position:
            remaining.append(stage)
        start += len(stage)
        boundaries.add(start)
    expected = definition.step_ids[: progress.position]
    if progress.completed != expected or progress.position not in boundaries:
        raise ValueError(
            f"checkpoint of workflow {definition.name!r} does not match its definition: completed "
            f"{progress.completed} but the definition's first {progress.position} steps are {expected} "
            "(or position is beyond the end, or inside a parallel group)"
        )
    return remaining


def _prepare(
    definition: WorkflowDefinition,
    instance_id: str,
    step: StepDefinition,
    workflow_input: dict[str, Any],
    progress: Progress,
    trace: dict[str, str] | None = None,
) -> StepRun | StepResult:
    """The run of one work step, or its failure (no retry) when its input references do not resolve."""
    try:
        step_input = resolve_step_input(step, workflow_input, progress.outputs)
    except StepInputError as exc:
        return StepResult(False, 0, error=str(exc))
    return StepRun(
        kind="work",
        instance_id=instance_id,
        workflow=definition.name,
        step_id=step.id,
        deadline_seconds=step.deadline_seconds,
        retry=step.retry,
        input=step_input,
        trace=trace,
    )


def _run_group(
    context: Any,
    definition: WorkflowDefinition,
    stage: tuple[StepDefinition, ...],
    workflow_input: dict[str, Any],
    progress: Progress,
    status: Status,
    start: WorkflowStart,
) -> Generator[Any, Any, tuple[Progress, list[tuple[str, StepResult]]]]:
    """One ``step_orchestrator`` per step, all started at once; the progress and the steps that gave up."""
    instance_id = context.instance_id
    status.step = ", ".join(step.id for step in stage)
    prepared = [
        _prepare(definition, instance_id, step, workflow_input, progress, start.trace) for step in stage
    ]
    unresolved = [(step.id, p) for step, p in zip(stage, prepared, strict=True) if isinstance(p, StepResult)]
    if unresolved:  # nothing of the group is dispatched
        return progress, unresolved
    runs = [p for p in prepared if isinstance(p, StepRun)]

    status("running_group")
    children = [
        context.call_sub_orchestrator(
            STEP_ORCHESTRATOR,
            run.to_payload(),
            instance_id=step_instance_id(instance_id, run.step_id, start.epoch),
        )
        for run in runs
    ]
    answers = yield context.task_all(children)
    failed: list[tuple[str, StepResult]] = []
    for run, answer in zip(runs, answers, strict=True):
        result = StepResult(**answer)
        if result.succeeded:
            progress = progress.after(run.step_id, result.output)
        else:
            failed.append((run.step_id, result))
    status.progress = progress
    return progress, failed


def step_orchestrator(context: Any) -> Generator[Any, Any, dict[str, Any]]:
    """One step of a parallel group (the ``StepRun`` in the input) to an outcome, as a sub-orchestration:
    its result events come here; giving up and compensating stay with the workflow orchestrator."""
    payload = context.get_input()
    run = StepRun(**{**payload, "retry": RetryPolicy.model_validate(payload["retry"])})
    status = Status(context, orchestration="step", workflow=run.workflow, instance_id=run.instance_id)
    status.step = run.step_id
    result = yield from run_step(context, run, status)
    status("succeeded" if result.succeeded else "failed", result.attempts)
    return result.to_payload()


def _give_up_and_compensate(
    context: Any,
    definition: WorkflowDefinition,
    failed: list[tuple[str, StepResult]],
    progress: Progress,
    status: Status,
    trace: dict[str, str] | None = None,
) -> Generator[Any, Any, dict[str, Any]]:
    """Record that the step(s) gave up (every one of a group that did, in its order; the output
    names the first), then undo what was done through the compensation orchestrator."""
    instance_id = context.instance_id
    reasons = []
    for step_id, result in failed:
        reason = f"step {step_id!r} gave up after {result.attempts} attempt(s): {result.error}"
        reasons.append(reason)
        status.step = step_id
        status("giving_up", result.attempts)
        yield call_activity(
            context, ACTIVITY_GIVE_UP_STEP, {"instance_id": instance_id, "step_id": step_id, "reason": reason}
        )
    step_id, result = failed[0]
    reason = "; ".join(reasons)

    status("compensating", result.attempts)
    try:
        compensation = yield context.call_sub_orchestrator(
            COMPENSATION_ORCHESTRATOR,
            {
                "instance_id": instance_id,
                "workflow": definition.name,
                "reason": reason,
                **({"trace": trace} if trace else {}),
            },
            instance_id=compensation_instance_id(instance_id),
        )
    except Exception as exc:  # the sub-orchestration failed outright; the ledger keeps the detail
        compensation = {"status": "compensation_failed", "steps": [], "error": str(exc)}
    outcome = "compensated" if (compensation or {}).get("status") == "compensated" else "compensation_failed"

    status.step = step_id
    status(outcome, result.attempts)
    return {
        "status": outcome,
        "outputs": progress.outputs,
        "failed_step": step_id,
        "error": result.error,
        "compensation": compensation,
    }


def compensation_orchestrator(context: Any) -> Generator[Any, Any, dict[str, Any]]:
    """Compensate per the plan; return ``{"status", "steps": [{"step_id", "outcome", "error"}]}``."""
    start = CompensationStart.model_validate(context.get_input())
    plan: CompensationPlan | None = None
    outcomes: list[dict[str, Any]] = []
    status = Status(
        context,
        lambda: {"compensated_steps": len(outcomes), "total_steps": len(plan.steps) if plan else None},
        orchestration="compensation",
        workflow=start.workflow,
        instance_id=start.instance_id,
    )
    status("planning")
    plan = CompensationPlan.model_validate(
        (yield call_activity(context, ACTIVITY_PLAN_COMPENSATION, {"instance_id": start.instance_id}))
    )

    for entry in plan.steps:  # the plan's order is the undo order: never re-sorted here
        status.step = entry.step_id
        run = StepRun(
            kind="compensate",
            instance_id=start.instance_id,
            workflow=start.workflow,
            step_id=entry.step_id,
            deadline_seconds=entry.deadline_seconds,
            retry=entry.retry,
            # The compensator sees what the step was asked to do and what it reported doing.
            input={"input": entry.input or {}, "output": entry.output},
            trace=start.trace,
        )
        result = yield from run_step(context, run, status)
        if not result.succeeded:
            status("finishing", result.attempts)
            yield call_activity(
                context,
                ACTIVITY_FINISH_COMPENSATION,
                {"instance_id": start.instance_id, "step_id": entry.step_id, "error": result.error},
            )
        outcome = "compensated" if result.succeeded else "compensation_failed"
        outcomes.append({"step_id": entry.step_id, "outcome": outcome, "error": result.error})

    failed = next((o for o in outcomes if o["outcome"] != "compensated"), None)
    overall = "compensation_failed" if failed else "compensated"
    status.step = None
    status("settling")
    yield call_activity(
        context,
        ACTIVITY_SETTLE_INSTANCE,
        {
            "instance_id": start.instance_id,
            "outcome": overall,
            "failed_step": failed["step_id"] if failed else None,
            "error": (failed["error"] if failed else None) or start.reason or None,
        },
    )
    status(overall)
    return {"status": overall, "steps": outcomes}
