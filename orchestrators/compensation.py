"""The compensation orchestrator: undo a workflow instance's completed steps.

It runs each compensator of the ledger's plan (``plan_compensation``) exactly like a work step; one
that exhausts its attempts is recorded CompensationFailed for an operator, and the remaining steps
are still undone. The scheduler and the supervisor start it under the same deterministic id.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from orchestrators.attempts import Status, StepRun, run_step
from orchestrators.decisions import call_activity
from orchestrators.state import CompensationPlan, CompensationStart
from workflow_core.contracts import (
    ACTIVITY_FINISH_COMPENSATION,
    ACTIVITY_PLAN_COMPENSATION,
    ACTIVITY_SETTLE_INSTANCE,
)


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
        if result.succeeded:
            outcomes.append({"step_id": entry.step_id, "outcome": "compensated", "error": None})
        else:
            status("finishing", result.attempts)
            yield call_activity(
                context,
                ACTIVITY_FINISH_COMPENSATION,
                {"instance_id": start.instance_id, "step_id": entry.step_id, "error": result.error},
            )
            outcomes.append(
                {"step_id": entry.step_id, "outcome": "compensation_failed", "error": result.error}
            )

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
