"""The scheduler: one generic orchestrator that walks any workflow definition step by step.

For each step it records intent in the ledger (``dispatch_step``) before waiting, races the result
event against the step's deadline, retries with durable-timer backoff, and when a step gives up it
hands over to the compensation orchestrator. A parallel group runs each of its steps the same way in
its own ``step_orchestrator`` sub-orchestration and waits for all of them. It checkpoints with
continue_as_new every ``history_checkpoint_every`` completed steps so its history stays bounded.
Everything here is deterministic: time comes from ``context.current_utc_datetime`` and all I/O goes
through activities.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import replace
from datetime import datetime
from typing import Any

from orchestrators.attempts import StepResult, StepRun, run_step
from orchestrators.decisions import call_activity, should_checkpoint, to_iso
from orchestrators.provisional import Taken, basis_refused, next_write_proves
from orchestrators.state import Progress, WorkflowStart
from workflow_core.contracts import (
    ACTIVITY_CREATE_STEPS,
    ACTIVITY_GIVE_UP_STEP,
    ACTIVITY_SETTLE_INSTANCE,
    COMPENSATION_ORCHESTRATOR,
    STEP_ORCHESTRATOR,
    compensation_instance_id,
    step_instance_id,
)
from workflow_core.workflows import (
    StepDefinition,
    StepInputError,
    WorkflowDefinition,
    get_workflow,
    resolve_step_input,
)
from workflow_core.workflows.step_rows import new_step


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
    # A pinned instance never reads the YAML deployed now; an unpinned one (started before
    # definitions were versioned) runs on it, as it always did.
    definition = start.pinned() if start.definition is not None else get_workflow(start.workflow)
    workflow_input = definition.validate_input(start.input)
    progress = start.state or Progress()
    _check_resumable(definition, progress)
    instance_id = context.instance_id
    status = _Status(context, definition, progress)

    if start.state is None:
        status("creating_steps")
        create: dict[str, Any] = {"instance_id": instance_id, "workflow": definition.name}
        if start.version is not None:
            create["version"] = start.version
        yield call_activity(context, ACTIVITY_CREATE_STEPS, create)

    # Every iteration either completes its stage or returns; ``completed_here`` counts the steps
    # completed in this generation (a parallel group counts as its steps, and is never split).
    completed_here = 0
    # The instance record's latest version this scheduler knows (the starter's, then each confirmed
    # result's): a first dispatch writes against it and its step's starter ETag without reading.
    known = start.rows.instance if start.rows is not None else None
    # The last step's success, taken unread (``Taken``) until a write proves it: the next dispatch or
    # the settle carries its basis; anything else (a group, a checkpoint, a step whose input cannot
    # be resolved) asks the ledger first. A write that refuses it sends the scheduler back to it.
    taken: Taken | None = None
    stages = _remaining_stages(definition, progress.position)
    for index, stage in enumerate(stages):
        steps_left = len(definition.steps) - progress.position
        checkpoint = should_checkpoint(completed_here, definition.history_checkpoint_every, steps_left)
        if taken is not None and (checkpoint or len(stage) > 1):
            progress, known, ended = yield from _confirm(context, definition, taken, status, start.trace)
            taken = None
            if ended is not None:
                return ended
        if checkpoint:
            status.step = None
            status("checkpointing")
            next_generation = progress.model_copy(update={"generation": progress.generation + 1})
            carried = start.model_copy(
                update={"input": workflow_input, "state": next_generation}
            ).model_dump()
            if start.definition is None:  # an unpinned instance keeps its input's old shape
                carried.pop("version")
                carried.pop("definition")
            if start.trace is None:
                carried.pop("trace")
            carried.pop("rows")  # the next generation reads the rows: these versions may be stale
            context.continue_as_new(carried)
            return None

        if len(stage) > 1:
            progress, failed = yield from _run_group(
                context, definition, stage, workflow_input, progress, status, start.epoch, start.trace
            )
            status.progress = progress
            if failed:
                return (
                    yield from _give_up_and_compensate(
                        context, definition, failed, progress, status, start.trace
                    )
                )
            completed_here += len(stage)
            known = None  # the members wrote the instance record in their own orchestrations
            continue

        (step,) = stage
        while True:
            status.step = step.id
            prepared = _prepare(definition, instance_id, step, workflow_input, progress.outputs, start.trace)
            if isinstance(prepared, StepResult):
                result = prepared
            else:
                run = replace(
                    prepared,
                    expected=expected_rows(definition, start, step, known),
                    basis=taken.basis if taken is not None else None,
                    provisional=next_write_proves(definition, stages, index, completed_here, steps_left),
                )
                result = yield from run_step(context, run, status)
            if taken is None or not (result.basis_refused or isinstance(prepared, StepResult)):
                break
            # the input was built on a success taken unread, and the ledger refused it (or the input
            # cannot be resolved from it): ask the ledger about that step, then build this one again
            progress, known, ended = yield from _confirm(context, definition, taken, status, start.trace)
            taken = None
            if ended is not None:
                return ended
        known = result.instance

        if not result.succeeded:
            return (
                yield from _give_up_and_compensate(
                    context, definition, [(step.id, result)], progress, status, start.trace
                )
            )
        if result.provisional is not None:
            taken = Taken(run, result.provisional, progress)
        progress = progress.after(step.id, result.output)
        status.progress = progress
        completed_here += 1

    while True:
        status.step = None
        status("settling")
        settle: dict[str, Any] = {"instance_id": instance_id, "outcome": "succeeded"}
        if known is not None:  # the last result's snapshot: a settle without a read
            settle["expected"] = known
        if taken is not None:
            settle["basis"] = taken.basis
        settled = yield call_activity(context, ACTIVITY_SETTLE_INSTANCE, settle)
        if taken is None or not basis_refused(settled):
            break
        progress, known, ended = yield from _confirm(context, definition, taken, status, start.trace)
        taken = None
        if ended is not None:
            return ended
    status("succeeded")
    return {"status": "succeeded", "outputs": progress.outputs, "failed_step": None, "error": None}


def _confirm(
    context: Any, definition: WorkflowDefinition, taken: Taken, status: _Status, trace: dict[str, str] | None
) -> Generator[Any, Any, tuple[Progress, dict[str, Any] | None, dict[str, Any] | None]]:
    """Ask the ledger about the success ``taken`` unread (``Taken.confirm``): the progress and
    snapshot to go on with, and the workflow's outcome when the step failed after all (compensated
    here) or None."""
    progress, known, failed = yield from taken.confirm(context, status)
    if failed:
        return (
            progress,
            known,
            (yield from _give_up_and_compensate(context, definition, failed, progress, status, trace)),
        )
    status.progress = progress
    return progress, known, None


def expected_rows(
    definition: WorkflowDefinition,
    start: WorkflowStart,
    step: StepDefinition,
    instance: dict[str, Any] | None,
) -> dict[str, Any] | None:
    """``contracts.ExpectedRows`` for the first dispatch of ``step``: its row as the starter created
    it (the ETag from the start, the fields from the pinned definition, as ``new_step`` writes them)
    and the instance's snapshot; None when either version is unknown."""
    etag = start.rows.steps.get(step.id) if start.rows is not None else None
    if etag is None or instance is None:
        return None
    sequence = definition.position_of(step.id)
    row = new_step(step)
    return {
        "step_etag": etag,
        "step_name": row.step_name,
        "agent": row.agent,
        "sequence": sequence,
        "compensator": row.compensator,
        "max_attempts": row.max_attempts,
        "heartbeat_timeout_seconds": row.heartbeat_timeout_seconds,
        "workflow_version": start.version,
        "instance": instance,
    }


def _remaining_stages(definition: WorkflowDefinition, position: int) -> list[tuple[StepDefinition, ...]]:
    """The stages from step index ``position`` on (``_check_resumable`` made it a stage boundary)."""
    start, remaining = 0, []
    for stage in definition.stages:
        if start >= position:
            remaining.append(stage)
        start += len(stage)
    return remaining


def _prepare(
    definition: WorkflowDefinition,
    instance_id: str,
    step: StepDefinition,
    workflow_input: dict[str, Any],
    outputs: dict[str, Any],
    trace: dict[str, str] | None = None,
) -> StepRun | StepResult:
    """The run of one work step, or its failure when its input references cannot be resolved:
    retrying cannot fix a missing reference, so such a step gives up before anything is dispatched."""
    try:
        step_input = resolve_step_input(step, workflow_input, outputs)
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
    status: _Status,
    epoch: int = 0,
    trace: dict[str, str] | None = None,
) -> Generator[Any, Any, tuple[Progress, list[tuple[str, StepResult]]]]:
    """Run a parallel group: one ``step_orchestrator`` per step, all started in this episode, then
    wait for every one of them. Returns the progress with the succeeded steps' outputs recorded (in
    the group's order) and the steps that gave up (empty when the whole group succeeded)."""
    instance_id = context.instance_id
    status.step = ", ".join(step.id for step in stage)
    prepared = [
        (step.id, _prepare(definition, instance_id, step, workflow_input, progress.outputs, trace))
        for step in stage
    ]
    unresolved = [(step_id, p) for step_id, p in prepared if isinstance(p, StepResult)]
    if unresolved:  # nothing of the group is dispatched
        return progress, unresolved
    runs = [p for _, p in prepared if isinstance(p, StepRun)]

    status("running_group")
    children = [
        context.call_sub_orchestrator(
            STEP_ORCHESTRATOR, run.to_payload(), instance_id=step_instance_id(instance_id, run.step_id, epoch)
        )
        for run in runs
    ]
    answers = yield context.task_all(children)
    failed: list[tuple[str, StepResult]] = []
    for run, answer in zip(runs, answers, strict=True):
        result = StepResult.from_payload(answer)
        if result.succeeded:
            progress = progress.after(run.step_id, result.output)
        else:
            failed.append((run.step_id, result))
    return progress, failed


def _check_resumable(definition: WorkflowDefinition, progress: Progress) -> None:
    """A checkpoint must match the definition it resumes: the completed steps are its prefix.

    Otherwise the definition changed while the instance was in flight, and resuming by position
    could skip or repeat a step; failing loudly leaves the decision to an operator.
    """
    expected = definition.step_ids[: progress.position]
    boundaries, start = {0}, 0
    for stage in definition.stages:
        start += len(stage)
        boundaries.add(start)
    if progress.completed != expected or progress.position not in boundaries:
        raise ValueError(
            f"checkpoint of workflow {definition.name!r} does not match its definition: completed "
            f"{progress.completed} but the definition's first {progress.position} steps are {expected} "
            "(or position is beyond the end, or inside a parallel group)"
        )


def _give_up_and_compensate(
    context: Any,
    definition: WorkflowDefinition,
    failed: list[tuple[str, StepResult]],
    progress: Progress,
    status: _Status,
    trace: dict[str, str] | None = None,
) -> Generator[Any, Any, dict[str, Any]]:
    """Record that the step(s) gave up, then undo what was done through the compensation orchestrator.

    ``failed`` is one step, or every step of a parallel group that gave up (in the group's order);
    the output names the first of them as ``failed_step``.
    """
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
