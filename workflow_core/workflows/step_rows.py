"""The ledger's step rows of a workflow definition, one builder for the two roles that create them
(the HTTP starter, and ``create_workflow_steps`` for workflows too long for the starter's transaction)."""

from __future__ import annotations

from workflow_core.ledger.model import NewStep
from workflow_core.workflows.model import WorkflowDefinition
from workflow_core.workflows.steps import StepDefinition


def new_steps(definition: WorkflowDefinition) -> list[NewStep]:
    return [new_step(step) for step in definition.steps]


def new_step(step: StepDefinition) -> NewStep:
    return NewStep(
        step_id=step.id,
        step_name=step.name or step.id,
        agent=step.agent,
        compensator=step.compensation.agent if step.compensation else None,
        max_attempts=step.retry.max_attempts,
        heartbeat_timeout_seconds=step.heartbeat_timeout_seconds,
    )
