"""What both demos check before they start anything (definitions, agents, the input), so that a
broken YAML or a wrong input is one ``error:`` line saying what to fix, before Azurite or a server
starts, never the starter's 400. Its own module so the two demos need not import each other.
"""

from __future__ import annotations

import json
from typing import Any

from activities.worker.handlers.base import MissingAgentHandlers, app_served, check_agents_registered
from workflow_core.workflows import WorkflowDefinitionError, WorkflowInputError, load_workflows
from workflow_core.workflows.loader import skeleton_input


class DemoError(Exception):
    """What stops the demo before it starts: one ``error:`` line saying what and how to fix it."""


def check_definitions() -> None:
    """Load every definition the way the app does at start-up; DemoError saying which file and what
    is wrong, or which agent has no handler."""
    try:
        check_agents_registered(app_served(load_workflows()))
    except WorkflowDefinitionError as exc:
        where = "workflows/" if str(exc).split(":", 1)[0].endswith((".yaml", ".yml")) else ""
        raise DemoError(f"{where}{exc} (fix the file, or move it out of workflows/)") from None
    except MissingAgentHandlers as exc:
        raise DemoError(str(exc)) from None


def demo_input(definition: Any, given: str | None) -> dict[str, Any]:
    """The input to start ``definition`` with: ``given`` (``--input`` JSON) or its ``sample_input``,
    validated like the HTTP starter does; DemoError saying what to pass otherwise."""
    name = definition.name
    example = json.dumps(skeleton_input(definition))
    how = f"pass one with --input '{example}' or add sample_input: to workflows/{name}.yaml"
    if given is None:
        workflow_input = definition.sample_input
        if workflow_input is None:
            if definition.input.required:
                raise DemoError(f"{name} has no sample input; {how}")
            workflow_input = {}
        source = f"the sample_input of workflows/{name}.yaml"
    else:
        try:
            workflow_input = json.loads(given)
        except ValueError as exc:
            raise DemoError(
                f'--input is not valid JSON ({exc}); pass an object, e.g. --input \'{{"tenant_id": "t1"}}\''
            ) from None
        if not isinstance(workflow_input, dict):
            kind = type(workflow_input).__name__.replace("dict", "object").replace("list", "array")
            raise DemoError(f"--input must be a JSON object (the workflow input), got a JSON {kind}")
        source = "--input"
    try:
        definition.validate_input(workflow_input)
    except WorkflowInputError as exc:
        problems = "; ".join(exc.problems)
        raise DemoError(f"{source} is not a valid input for {name}: {problems} ({how})") from None
    return dict(workflow_input)
