"""What a workflow's input may be: a deliberately small schema (required fields, typed properties,
defaults), checked when the definition loads and against every input the HTTP starter receives."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

FieldType = Literal["string", "integer", "number", "boolean", "object", "array"]


def type_matches(expected: FieldType, value: Any) -> bool:
    """JSON-schema-like type check; ``bool`` is not an integer here, although Python says it is."""
    if expected == "string":
        return isinstance(value, str)
    if expected == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if expected == "boolean":
        return isinstance(value, bool)
    if expected == "object":
        return isinstance(value, dict)
    return isinstance(value, list)


def json_type_name(value: Any) -> str:
    """The JSON name of a Python value's type, for error messages a caller of the HTTP API understands."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


class InputProperty(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    type: FieldType
    description: str | None = None
    default: Any = None

    @model_validator(mode="after")
    def _default_type(self) -> InputProperty:
        if self.default is not None and not type_matches(self.type, self.default):
            raise ValueError(f"default {self.default!r} is not of type {self.type}")
        return self


class InputSchema(BaseModel):
    """A deliberately small schema: required fields, typed properties, optional defaults."""

    model_config = ConfigDict(frozen=True, extra="forbid")

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
        undeclared = [name for name in self.required if name not in self.properties]
        if undeclared:
            raise ValueError(
                f"required fields {undeclared} are not declared under properties (declare their type)"
            )
        if len(set(self.required)) != len(self.required):
            raise ValueError("required lists a field twice")
        return self

    def always_present(self) -> set[str]:
        """Fields a validated input always has: the required ones and those with a default."""
        return set(self.required) | {n for n, p in self.properties.items() if p.default is not None}
