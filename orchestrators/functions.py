"""The Durable Functions registrations of the orchestrators, on one ``df.Blueprint``.

Kept apart from the orchestrator logic so ``workflow.py`` and ``compensation.py`` stay plain
generator functions (importable and testable without the decorator machinery), while the app
registers exactly one blueprint: ``function_app.py`` does ``app.register_blueprint(blueprint)``.
Importing it also makes the Durable SDK read history timestamps the fast way
(``orchestrators.history_timestamps``), before any replay runs.
"""

from __future__ import annotations

import azure.durable_functions as df

from orchestrators import compensation, history_timestamps, step, workflow
from workflow_core.contracts import COMPENSATION_ORCHESTRATOR, STEP_ORCHESTRATOR, WORKFLOW_ORCHESTRATOR

history_timestamps.install()

bp = df.Blueprint()


@bp.function_name(WORKFLOW_ORCHESTRATOR)
@bp.orchestration_trigger(context_name="context")
def workflow_orchestrator(context: df.DurableOrchestrationContext):
    """Scheduler: walks a workflow definition (see ``orchestrators.workflow``)."""
    return (yield from workflow.workflow_orchestrator(context))


@bp.function_name(COMPENSATION_ORCHESTRATOR)
@bp.orchestration_trigger(context_name="context")
def compensation_orchestrator(context: df.DurableOrchestrationContext):
    """Undoes a workflow instance's completed steps (see ``orchestrators.compensation``)."""
    return (yield from compensation.compensation_orchestrator(context))


@bp.function_name(STEP_ORCHESTRATOR)
@bp.orchestration_trigger(context_name="context")
def step_orchestrator(context: df.DurableOrchestrationContext):
    """Runs one step of a parallel group (see ``orchestrators.step``)."""
    return (yield from step.step_orchestrator(context))
