"""Scheduler role: the Durable Functions orchestrators that walk workflow definitions (docs/scheduler.md).

``blueprint`` binds the plain generator functions of ``workflow`` (testable without the decorators);
importing it makes the Durable SDK read history timestamps the fast way (``history_timestamps``).
"""

import azure.durable_functions as df

from orchestrators import history_timestamps, workflow
from workflow_core.contracts import COMPENSATION_ORCHESTRATOR, STEP_ORCHESTRATOR, WORKFLOW_ORCHESTRATOR

history_timestamps.install()

blueprint = df.Blueprint()

for name, orchestrator in (
    (WORKFLOW_ORCHESTRATOR, workflow.workflow_orchestrator),
    (COMPENSATION_ORCHESTRATOR, workflow.compensation_orchestrator),
    (STEP_ORCHESTRATOR, workflow.step_orchestrator),
):
    blueprint.function_name(name)(blueprint.orchestration_trigger(context_name="context")(orchestrator))
