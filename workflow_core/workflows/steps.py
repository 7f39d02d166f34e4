"""What a step is: an agent, a deadline, a retry policy and how to undo it; and groups of steps that
run at the same time. Validated when the definition loads, like the ledger validates its rows."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator
from pydantic.functional_validators import AfterValidator

from workflow_core.ledger.errors import InvalidLedgerInput
from workflow_core.ledger.model import AGENT_NAME, validate_step_id
from workflow_core.workflows.retry import RetryPolicy

ERROR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")
MAX_DEADLINE_SECONDS = 7 * 24 * 3600  # a first deadline beyond a week is a definition mistake


def _check_agent(value: str) -> str:
    if not AGENT_NAME.fullmatch(value):
        raise ValueError(
            f"agent {value!r} must be lowercase dotted words such as 'storage.create' "
            f"(pattern {AGENT_NAME.pattern})"
        )
    return value


def _check_error_names(names: tuple[str, ...]) -> tuple[str, ...]:
    for name in names:
        if not ERROR_NAME.fullmatch(name):
            raise ValueError(
                f"non_retryable_errors: {name!r} is not an exception class name such as CardDeclined"
            )
    if len(set(names)) != len(names):
        raise ValueError(f"non_retryable_errors lists a name twice: {list(names)}")
    return names


AgentName = Annotated[str, AfterValidator(_check_agent)]
ErrorNames = Annotated[tuple[str, ...], AfterValidator(_check_error_names)]


class CompensationDefinition(BaseModel):
    """How to undo a step: another agent, with its own deadline and retries."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent: AgentName
    deadline_seconds: float = Field(gt=0, le=MAX_DEADLINE_SECONDS)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    non_retryable_errors: ErrorNames = ()


class StepDefinition(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    name: str = ""
    description: str | None = None
    agent: AgentName
    input: dict[str, Any] = Field(default_factory=dict)
    deadline_seconds: float = Field(gt=0, le=MAX_DEADLINE_SECONDS)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    heartbeat_timeout_seconds: float | None = Field(default=None, gt=0, le=MAX_DEADLINE_SECONDS)
    # exception type names retrying cannot fix (``CardDeclined``): such a failure gives up at once
    non_retryable_errors: ErrorNames = ()
    compensation: CompensationDefinition | None = None

    @model_validator(mode="before")
    @classmethod
    def _default_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("name") and isinstance(data.get("id"), str):
            return {**data, "name": data["id"]}
        return data

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        try:
            return validate_step_id(value)  # the ledger keys rows by step id: same rules here
        except InvalidLedgerInput as exc:  # pydantic only reports plain ValueErrors as field errors
            raise ValueError(str(exc)) from None

    @property
    def compensator(self) -> str | None:
        return self.compensation.agent if self.compensation else None


class ParallelGroup(BaseModel):
    """Steps that run at the same time; if one gives up, the instance is compensated once all finished."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    parallel: tuple[StepDefinition, ...] = Field(min_length=2)

    @field_validator("parallel", mode="before")
    @classmethod
    def _not_nested(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            for index, item in enumerate(value):
                if isinstance(item, dict) and "parallel" in item:
                    raise ValueError(
                        f"[{index}]: parallel groups cannot be nested; list the steps of the inner group "
                        "directly in the outer one"
                    )
        return value


def _item_kind(value: Any) -> str:
    """Which kind of ``steps`` item a value is, so a mistake is reported against one kind only."""
    if isinstance(value, dict):
        return "<parallel>" if "parallel" in value else "<step>"
    return "<parallel>" if isinstance(value, ParallelGroup) else "<step>"


# The tags start with "<" so the loader leaves them out of error locations (steps[1].parallel[0].id).
StepItem = Annotated[
    Annotated[StepDefinition, Tag("<step>")] | Annotated[ParallelGroup, Tag("<parallel>")],
    Discriminator(_item_kind),
]
