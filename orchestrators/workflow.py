"""The scheduler: one generic orchestrator that walks any workflow definition step by step.

For each step it records intent in the ledger (``dispatch_step``) before waiting, races the result
event against the step's deadline, retries with durable-timer backoff, and when a step gives up it
hands over to the compensation orchestrator. It checkpoints with continue_as_new every
``history_checkpoint_every`` completed steps so its history stays bounded. Everything here is
deterministic: time comes from ``context.current_utc_datetime`` and all I/O goes through activities.
"""

from __future__ import annotations

from collections.abc import Generator
from datetime import datetime
from typing import Any

from orchestrators.attempts import StepResult, StepRun, run_step
from orchestrators.decisions import should_checkpoint, to_iso
from orchestrators.state import Progress, WorkflowStart
from workflow_core.contracts import (
    ACTIVITY_CREATE_STEPS,
    ACTIVITY_GIVE_UP_STEP,
    COMPENSATION_ORCHESTRATOR,
    compensation_instance_id,
)
from workflow_core.workflows import StepInputError, WorkflowDefinition, get_workflow, resolve_step_input


class _Status:
    """Keeps the instance's custom status current: which workflow, step, attempt and phase."""

    def __init__(self, context: Any, definition: WorkflowDefinition, progress: Progress) -> None:
        self._context = context
        self._definition = definition
        self.progress = progress
        self.step: str | None = None

    def __call__(self, phase: str, attempt: int | None = None, until: datetime | None = None) -> None:
        self._context.set_custom_status(
            {
                "orchestration": "workflow",
                "workflow": self._definition.name,
                "step": self.step,
                "attempt": attempt,
                "phase": phase,
                "until": to_iso(until) if until else None,
                "completed_steps": len(self.progress.completed),
                "total_steps": len(self._definition.steps),
                "generation": self.progress.generation,
            }
        )


def workflow_orchestrator(context: Any) -> Generator[Any, Any, dict[str, Any] | None]:
    """Run the workflow named in the input; return its outcome (see docs/scheduler.md)."""
    start = WorkflowStart.model_validate(context.get_input())
    definition = get_workflow(start.workflow)
    workflow_input = definition.validate_input(start.input)
    progress = start.state or Progress()
    _check_resumable(definition, progress)
    instance_id = context.instance_id
    status = _Status(context, definition, progress)

    if start.state is None:
        status("creating_steps")
        yield context.call_activity(
            ACTIVITY_CREATE_STEPS, {"instance_id": instance_id, "workflow": definition.name}
        )

    # Every iteration either completes its step or returns, so the index counts completed steps.
    for completed_here, step in enumerate(definition.steps[progress.position :]):
        steps_left = len(definition.steps) - progress.position
        if should_checkpoint(completed_here, definition.history_checkpoint_every, steps_left):
            status.step = None
            status("checkpointing")
            next_generation = progress.model_copy(update={"generation": progress.generation + 1})
            context.continue_as_new(
                WorkflowStart(
                    workflow=definition.name, input=workflow_input, state=next_generation
                ).model_dump()
            )
            return None

        status.step = step.id
        try:
            step_input = resolve_step_input(step, workflow_input, progress.outputs)
        except StepInputError as exc:
            # Retrying cannot fix a missing reference: give up at once (nothing was dispatched).
            result = StepResult(False, 0, error=str(exc))
        else:
            run = StepRun(
                kind="work",
                instance_id=instance_id,
                workflow=definition.name,
                step_id=step.id,
                deadline_seconds=step.deadline_seconds,
                retry=step.retry,
                input=step_input,
            )
            result = yield from run_step(context, run, status)

        if not result.succeeded:
            return (
                yield from _give_up_and_compensate(context, definition, step.id, result, progress, status)
            )
        progress = progress.after(step.id, result.output)
        status.progress = progress

    status.step = None
    status("succeeded")
    return {"status": "succeeded", "outputs": progress.outputs, "failed_step": None, "error": None}


def _check_resumable(definition: WorkflowDefinition, progress: Progress) -> None:
    """A checkpoint must match the definition it resumes: the completed steps are its prefix.

    Otherwise the definition changed while the instance was in flight, and resuming by position
    could skip or repeat a step; failing loudly leaves the decision to an operator.
    """
    expected = definition.step_ids[: progress.position]
    if progress.completed != expected or progress.position > len(definition.steps):
        raise ValueError(
            f"checkpoint of workflow {definition.name!r} does not match its definition: completed "
            f"{progress.completed} but the definition's first {progress.position} steps are {expected}"
        )


def _give_up_and_compensate(
    context: Any,
    definition: WorkflowDefinition,
    step_id: str,
    result: StepResult,
    progress: Progress,
    status: _Status,
) -> Generator[Any, Any, dict[str, Any]]:
    """Record that the step gave up, then undo what was done through the compensation orchestrator."""
    instance_id = context.instance_id
    reason = f"step {step_id!r} gave up after {result.attempts} attempt(s): {result.error}"
    status("giving_up", result.attempts)
    yield context.call_activity(
        ACTIVITY_GIVE_UP_STEP, {"instance_id": instance_id, "step_id": step_id, "reason": reason}
    )

    status("compensating", result.attempts)
    try:
        compensation = yield context.call_sub_orchestrator(
            COMPENSATION_ORCHESTRATOR,
            {"instance_id": instance_id, "workflow": definition.name, "reason": reason},
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
