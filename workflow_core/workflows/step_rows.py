"""The ledger's step rows of a workflow definition: what creating an instance's steps writes.

Its own module because two roles create steps from one definition and must write the same rows: the
HTTP starter, in the instance record's own transaction, and the orchestration's ``create_workflow_steps``
activity, for instances whose steps the starter did not create (started before it did, workflows too
long for one transaction, inputs of a scheduler the watchdog restarts).
"""

from __future__ import annotations

from workflow_core.ledger.model import NewStep
from workflow_core.workflows.model import WorkflowDefinition
from workflow_core.workflows.steps import StepDefinition


def new_steps(definition: WorkflowDefinition) -> list[NewStep]:
    """Every step of ``definition``, in order, as the ledger creates it (Pending, no input yet)."""
    return [new_step(step) for step in definition.steps]


def new_step(step: StepDefinition) -> NewStep:
    """One step of a definition as the ledger creates it (what a first dispatch writing against the
    starter's version knows the row holds, without reading it)."""
    return NewStep(
        step_id=step.id,
        step_name=step.name or step.id,
        agent=step.agent,
        compensator=step.compensation.agent if step.compensation else None,
        max_attempts=step.retry.max_attempts,
        heartbeat_timeout_seconds=step.heartbeat_timeout_seconds,
    )
