"""Workflow definitions: what steps a workflow has, which agent runs each, by when, and how to undo it.

Definitions live as YAML in the repository's ``workflows/`` folder (schema: ``workflows/README.md``).
"""

from workflow_core.workflows.errors import (
    StepInputError,
    UnknownVersion,
    UnknownWorkflow,
    WorkflowDefinitionError,
    WorkflowInputError,
)
from workflow_core.workflows.loader import (
    DEFAULT_DIRECTORY,
    agents_used,
    clear_workflow_cache,
    get_workflow,
    load_workflows,
    parse_workflow,
)
from workflow_core.workflows.model import WorkflowDefinition, resolve_step_input
from workflow_core.workflows.steps import ParallelGroup, RetryPolicy, StepDefinition
from workflow_core.workflows.store import PinnedDefinition, from_canonical, pin, version_of
