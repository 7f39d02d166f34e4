"""Scheduler role: the Durable Functions orchestrators that walk workflow definitions (docs/scheduler.md).

``blueprint`` binds the plain generator functions of ``workflow`` and ``compensation``, which stay
testable without the decorators. Importing it also makes the Durable SDK read history timestamps the
fast way (``history_timestamps``).
"""

import azure.durable_functions as df

from orchestrators import compensation, history_timestamps, workflow
from workflow_core.contracts import COMPENSATION_ORCHESTRATOR, STEP_ORCHESTRATOR, WORKFLOW_ORCHESTRATOR

history_timestamps.install()

blueprint = df.Blueprint()


@blueprint.function_name(WORKFLOW_ORCHESTRATOR)
@blueprint.orchestration_trigger(context_name="context")
def workflow_orchestrator(context: df.DurableOrchestrationContext):
    return (yield from workflow.workflow_orchestrator(context))


@blueprint.function_name(COMPENSATION_ORCHESTRATOR)
@blueprint.orchestration_trigger(context_name="context")
def compensation_orchestrator(context: df.DurableOrchestrationContext):
    return (yield from compensation.compensation_orchestrator(context))


@blueprint.function_name(STEP_ORCHESTRATOR)
@blueprint.orchestration_trigger(context_name="context")
def step_orchestrator(context: df.DurableOrchestrationContext):
    return (yield from workflow.step_orchestrator(context))
