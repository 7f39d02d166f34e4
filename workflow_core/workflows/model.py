"""What a workflow is: its input schema and its steps, each with an agent, a deadline and a retry policy.

Validated when they load, so an orchestration never discovers a broken definition half-way through
a run, after it has already changed remote systems.

References inside a step's ``input`` mapping (``$input.<field>...``, ``$steps.<id>.output...``, ``$$``
for a literal ``$``): any other ``$`` string is refused at load, so a typo fails a deployment instead
of sending ``"$inputs.x"`` to a remote service. Resolution is pure, so orchestrators call it in replay.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from workflow_core.ledger.model import WORKFLOW_NAME, NewStep
from workflow_core.workflows.errors import StepInputError, WorkflowInputError
from workflow_core.workflows.steps import ParallelGroup, StepDefinition, StepItem, Strict

FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_STEPS = re.compile(r"^\$steps\.(?P<step>[^$]+?)\.output(?:\.(?P<path>.+))?$")
_INPUT = re.compile(r"^\$input(?:\.(?P<path>.+))?$")


@dataclass(frozen=True)
class Reference:
    text: str
    source: str  # "input" or "steps"
    step_id: str | None
    path: tuple[str, ...]


def parse_reference(value: Any) -> Reference | None:
    """The reference ``value`` denotes, ``None`` for a literal; ``ValueError`` for a malformed one."""
    if not isinstance(value, str) or not value.startswith("$") or value.startswith("$$"):
        return None
    if match := _STEPS.match(value):
        return Reference(value, "steps", match["step"], _split(value, match["path"]))
    if match := _INPUT.match(value):
        return Reference(value, "input", None, _split(value, match["path"]))
    raise ValueError(
        f"{value!r} is not a valid reference; use $input.<field>, $steps.<step_id>.output[.<key>], "
        "or start the string with $$ for a literal $"
    )


def _split(text: str, path: str | None) -> tuple[str, ...]:
    parts = tuple(path.split(".")) if path is not None else ()
    if "" in parts:
        raise ValueError(f"{text!r} has an empty path segment")
    return parts


def iter_references(value: Any, where: str) -> Iterator[tuple[str, Reference]]:
    """Every reference in a (possibly nested) input value, with a readable location for errors."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from iter_references(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from iter_references(item, f"{where}[{index}]")
    else:
        try:
            ref = parse_reference(value)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if ref is not None:
            yield where, ref


def resolve_value(
    value: Any, workflow_input: Mapping[str, Any], outputs: Mapping[str, Any], where: str
) -> Any:
    if isinstance(value, Mapping):
        return {k: resolve_value(v, workflow_input, outputs, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_value(item, workflow_input, outputs, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, str) and value.startswith("$$"):  # a literal "$..."
        return value[1:]
    try:
        ref = parse_reference(value)
    except ValueError as exc:
        raise StepInputError(f"{where}: {exc}") from None
    if ref is None:
        return value
    current: Any
    if ref.source == "input":
        current, root_name = workflow_input, "the workflow input"
    elif ref.step_id in outputs:
        current, root_name = outputs[ref.step_id], f"the output of step {ref.step_id!r}"
    else:
        raise StepInputError(
            f"{where}: {ref.text} needs the output of step {ref.step_id!r}, which has none yet"
        )
    for depth, key in enumerate(ref.path):
        if isinstance(current, Mapping) and key in current:
            current = current[key]
        elif isinstance(current, list) and key.isdigit() and int(key) < len(current):
            current = current[int(key)]
        else:
            so_far = ".".join(ref.path[:depth]) or "(top level)"
            raise StepInputError(
                f"{where}: {ref.text} cannot be resolved: {root_name} has no {key!r} under {so_far}"
            )
    # A copy: a caller that edits the resolved input must not edit the outputs it came from.
    return copy.deepcopy(current)


FieldType = Literal["string", "integer", "number", "boolean", "object", "array"]


# bool before int: ``bool`` is not an integer in JSON, although Python says it is
_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", dict: "object", list: "array"}


def json_type_name(value: Any) -> str:
    """The JSON name of a Python value's type, for error messages a caller of the HTTP API understands."""
    if value is None:
        return "null"
    return next((name for kind, name in _JSON_TYPES.items() if isinstance(value, kind)), type(value).__name__)


def type_matches(expected: FieldType, value: Any) -> bool:
    actual = json_type_name(value)
    return actual == expected or (expected == "number" and actual == "integer")


class InputProperty(Strict):
    type: FieldType
    description: str | None = None
    default: Any = None

    @model_validator(mode="after")
    def _default_type(self) -> InputProperty:
        if self.default is not None and not type_matches(self.type, self.default):
            raise ValueError(f"default {self.default!r} is not of type {self.type}")
        return self


class InputSchema(Strict):
    """A deliberately small schema: required fields, typed properties, optional defaults."""

    required: tuple[str, ...] = ()
    properties: dict[str, InputProperty] = Field(default_factory=dict)
    additional_properties: bool = False

    @field_validator("properties")
    @classmethod
    def _names(cls, value: dict[str, InputProperty]) -> dict[str, InputProperty]:
        for name in value:
            if not FIELD_NAME.fullmatch(name):
                raise ValueError(f"property name {name!r} must match {FIELD_NAME.pattern}")
        return value

    @model_validator(mode="after")
    def _required_declared(self) -> InputSchema:
        if undeclared := [name for name in self.required if name not in self.properties]:
            raise ValueError(
                f"required fields {undeclared} are not declared under properties (declare their type)"
            )
        if len(set(self.required)) != len(self.required):
            raise ValueError("required lists a field twice")
        return self

    def always_present(self) -> set[str]:
        """Fields a validated input always has: the required ones and those with a default."""
        return set(self.required) | {n for n, p in self.properties.items() if p.default is not None}


class WorkflowDefinition(Strict):
    model_config = ConfigDict(populate_by_name=True)

    name: str
    # A human label ("2.1", "add-dns-check"); the version that counts is the content hash
    # (workflow_core.workflows.store), which changes with any edit, labelled or not.
    version: str | None = Field(
        default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$"
    )
    description: str = ""
    input: InputSchema = Field(default_factory=InputSchema)
    # As written under ``steps``; readers use ``steps`` (every step) or ``stages`` (what runs together).
    items: tuple[StepItem, ...] = Field(alias="steps", min_length=1)
    history_checkpoint_every: int = Field(
        default=25,
        ge=1,
        le=1000,
        description="completed steps per orchestration generation (continue_as_new)",
    )
    on_scheduler_lost: Literal["resume", "compensate"] = Field(
        default="resume",
        description="what the watchdog does when the scheduler died: resume from the ledger, or compensate",
    )
    max_resumes: int = Field(
        default=3, ge=0, le=100, description="resumes after which the watchdog compensates instead"
    )
    business_key: str | None = Field(
        default=None, description="input field whose value names the instance for operators (e.g. tenant_id)"
    )
    # Days its finished instances are kept before retention purges them (None: RETENTION_DAYS).
    retention_days: int | None = Field(default=None, ge=1, le=36_500, exclude=True)
    # Excluded from the canonical dump, so not part of the version: editing it touches no instance.
    sample_input: dict[str, Any] | None = Field(
        default=None, exclude=True, description="an example input for the demo, checked by sas lint"
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not WORKFLOW_NAME.fullmatch(value):
            raise ValueError(
                f"workflow name {value!r} must be lowercase words joined by '-' (e.g. provision-tenant)"
            )
        return value

    @model_validator(mode="after")
    def _business_key_is_an_input_field(self) -> WorkflowDefinition:
        if self.business_key is not None and self.business_key not in self.input.properties:
            known = ", ".join(sorted(self.input.properties)) or "(none)"
            raise ValueError(
                f"business_key {self.business_key!r} is not an input field; input fields: {known}"
            )
        return self

    def business_key_of(self, workflow_input: dict[str, Any]) -> str | None:
        """As text; None also for an empty one (the ledger reads an empty text as absent)."""
        value = workflow_input.get(self.business_key) if self.business_key is not None else None
        return None if value is None else str(value)[:200] or None

    @model_validator(mode="after")
    def _steps_consistent(self) -> WorkflowDefinition:
        placed = list(self.located_steps())
        seen: dict[str, tuple[str, int]] = {}
        for where, step, stage in placed:
            if step.id in seen:
                raise ValueError(
                    f"{where}.id: duplicate step id {step.id!r} (first used by {seen[step.id][0]})"
                )
            seen[step.id] = (where, stage)
        present = self.input.always_present()
        for location, step, stage in placed:
            for where, ref in iter_references(step.input, f"{location}.input"):
                if ref.source == "input":
                    if ref.path and ref.path[0] not in present:
                        raise ValueError(
                            f"{where}: {ref.text} refers to input field {ref.path[0]!r}, which is not a "
                            "required input field and has no default (declare it under input.required or "
                            "give it a default)"
                        )
                elif ref.step_id not in seen:
                    raise ValueError(f"{where}: {ref.text} refers to unknown step {ref.step_id!r}")
                elif seen[ref.step_id][1] == stage and ref.step_id != step.id:
                    raise ValueError(
                        f"{where}: {ref.text} refers to step {ref.step_id!r}, which runs in the same "
                        f"parallel group as {step.id!r}; a step in a group can only use outputs of steps "
                        "before the group"
                    )
                elif seen[ref.step_id][1] >= stage:
                    raise ValueError(
                        f"{where}: {ref.text} refers to step {ref.step_id!r}, which does not run before "
                        f"{step.id!r}; a step can only use outputs of earlier steps"
                    )
        return self

    # Cached: the orchestrator asks on every replay, several times per step; recomputing them made a
    # long workflow's replay quadratic in its steps.

    def located_steps(self) -> Iterator[tuple[str, StepDefinition, int]]:
        """Every step with where it is written (``steps[2].parallel[0]``) and its stage's index."""
        for index, members in enumerate(self.stages):
            for member, step in enumerate(members):
                yield f"steps[{index}]" + (f".parallel[{member}]" if len(members) > 1 else ""), step, index

    @cached_property
    def steps(self) -> tuple[StepDefinition, ...]:
        return tuple(step for stage in self.stages for step in stage)

    @cached_property
    def stages(self) -> tuple[tuple[StepDefinition, ...], ...]:
        """What the scheduler runs one after the other: a step alone, or a parallel group's steps."""
        return tuple(item.parallel if isinstance(item, ParallelGroup) else (item,) for item in self.items)

    @property
    def step_ids(self) -> list[str]:
        return list(self._positions)

    @cached_property
    def _positions(self) -> dict[str, int]:
        return {step.id: n for n, step in enumerate(self.steps)}

    def position_of(self, step_id: str) -> int:
        try:
            return self._positions[step_id]
        except KeyError:
            steps = ", ".join(self.step_ids)
            raise KeyError(f"workflow {self.name!r} has no step {step_id!r}; steps: {steps}") from None

    @property
    def shortest_deadline_seconds(self) -> float:
        """No step can fall due sooner after the start: the starter's index row falls due by then,
        early enough for dispatches to watch their steps without moving it (``ledger/watch.py``)."""
        spans = [s.deadline_seconds for s in self.steps]
        return min(spans + [s.compensation.deadline_seconds for s in self.steps if s.compensation])

    def step(self, step_id: str) -> StepDefinition:
        return self.steps[self.position_of(step_id)]

    def agents_used(self) -> set[str]:
        return {step.agent for step in self.steps} | {s.compensator for s in self.steps if s.compensator}

    def validate_input(self, data: Any) -> dict[str, Any]:
        """The input with defaults filled in; ``WorkflowInputError`` lists every problem at once, so an
        API caller fixes them in one round trip."""
        if not isinstance(data, dict):
            raise WorkflowInputError(self.name, [f"input must be a JSON object, got {json_type_name(data)}"])
        schema = self.input
        problems = [f"missing required field {name!r}" for name in schema.required if name not in data]
        for key, value in data.items():
            if (prop := schema.properties.get(key)) is None:
                if not schema.additional_properties:
                    known = ", ".join(sorted(schema.properties)) or "none"
                    problems.append(f"unknown field {key!r} (known fields: {known})")
                continue
            if not type_matches(prop.type, value):
                article = "an" if prop.type[0] in "aeiou" else "a"
                problems.append(f"field {key!r} must be {article} {prop.type}, got {json_type_name(value)}")
        if problems:
            raise WorkflowInputError(self.name, problems)
        absent = [(name, p.default) for name, p in schema.properties.items() if name not in data]
        return {**data, **{name: default for name, default in absent if default is not None}}


def resolve_step_input(
    step: StepDefinition, workflow_input: dict[str, Any], outputs: dict[str, Any]
) -> dict[str, Any]:
    """``step``'s input with every reference replaced (pure: the orchestrator calls it on replay)."""
    return resolve_value(step.input, workflow_input, outputs, f"step {step.id!r} input")


def new_steps(definition: WorkflowDefinition) -> list[NewStep]:
    """The ledger's step rows of ``definition``: one builder for the HTTP starter and
    ``create_workflow_steps`` (workflows too long for the starter's transaction)."""
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
