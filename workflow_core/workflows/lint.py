"""The rules every workflow definition must pass beyond its schema: ``sas lint``.

What the loader cannot see alone, checked over whatever is in ``workflows/`` so a new definition
meets the same rules as the shipped ones: every agent has a handler (the caller passes the names:
this layer imports no role), a description for operators, and a ``sample_input`` the starter accepts
that resolves every ``$input`` reference. ``lint_directory`` reads each file on its own, so one broken
file is one problem line, not the end.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow_core.workflows.errors import StepInputError, WorkflowDefinitionError, WorkflowInputError
from workflow_core.workflows.loader import DEFAULT_DIRECTORY, read_directory
from workflow_core.workflows.model import WorkflowDefinition, iter_references, resolve_value


@dataclass(frozen=True)
class LintProblem:
    """One thing to fix, in one file, at one field (``""`` when the file as a whole is at fault)."""

    file: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.message}" if self.field else f"{self.file}: {self.message}"


def lint_definition(
    definition: WorkflowDefinition, *, source: str, agents: Collection[str] | None = None
) -> list[LintProblem]:
    """Every problem of one loaded definition; ``agents=None`` skips the handler check (as it is for a
    definition whose agents only pools outside the app serve: ``workflow_core.canary``)."""
    from workflow_core.canary import SERVED_OUTSIDE_THE_APP

    if definition.name in SERVED_OUTSIDE_THE_APP:
        agents = None
    problems = []
    if not definition.description.strip():
        problems.append(
            LintProblem(source, "description", "empty; say what the workflow does, for operators")
        )
    for where, step, _ in definition.located_steps():
        for at, name in ((f"{where}.agent", step.agent), (f"{where}.compensation.agent", step.compensator)):
            if agents is not None and name is not None and name not in agents:
                message = f"agent {name!r} has no handler; register one with @agent({name!r}) in a module of "
                message += "activities/worker/handlers/ imported by its __init__.py (docs/agents.md)"
                problems.append(LintProblem(source, at, message))
    if definition.sample_input is None:
        return problems
    try:
        validated = definition.validate_input(definition.sample_input)
    except WorkflowInputError as exc:
        return problems + [LintProblem(source, "sample_input", problem) for problem in exc.problems]
    for where, step, _ in definition.located_steps():
        for at, ref in iter_references(step.input, f"{where}.input"):
            try:
                if ref.source == "input":
                    resolve_value(ref.text, validated, {}, at)
            except StepInputError as exc:
                problems.append(LintProblem(source, "sample_input", str(exc)))
    return problems


def lint_directory(
    directory: Path | None = None, *, agents: Collection[str] | None = None
) -> tuple[dict[str, WorkflowDefinition], list[LintProblem]]:
    """The definitions that load from ``directory`` and every problem of every file."""
    directory = directory or DEFAULT_DIRECTORY
    if not directory.is_dir():
        return {}, [LintProblem(str(directory), "", "no such directory")]
    found: dict[str, WorkflowDefinition] = {}
    problems: list[LintProblem] = []
    for file, definition in read_directory(directory):
        if isinstance(definition, WorkflowDefinitionError):
            problems.append(_load_problem(file, str(definition)))
            continue
        found[definition.name] = definition
        problems += lint_definition(definition, source=file, agents=agents)
    return found, problems


def _load_problem(file: str, message: str) -> LintProblem:
    rest = message.removeprefix(f"{file}: ")
    field, sep, text = rest.partition(": ")
    if sep and " " not in field:
        return LintProblem(file, field, text)
    return LintProblem(file, "", rest)


def lint_summary(definitions: Mapping[str, WorkflowDefinition]) -> list[str]:
    lines = []
    for name, definition in sorted(definitions.items()):
        sample = (
            "no sample input (the demo needs --input)" if definition.sample_input is None else "sample input"
        )
        steps, agents = len(definition.steps), len(definition.agents_used())
        lines.append(f"ok  {name}: {steps} step(s), {agents} agent(s), {sample}")
    return lines


def skeleton_input(definition: WorkflowDefinition) -> dict[str, Any]:
    """A placeholder for every required field, by type: what to put in ``--input`` or ``sample_input``."""
    placeholders = {"string": "...", "integer": 1, "number": 1.5, "boolean": True, "object": {}, "array": []}
    return {name: placeholders[definition.input.properties[name].type] for name in definition.input.required}
