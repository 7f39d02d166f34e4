"""What a step is: an agent, a deadline, a retry policy and how to undo it; and groups of steps that
run at the same time. Validated when the definition loads, like the ledger validates its rows.

``df.RetryOptions`` has only a first interval and an attempt count, so a :class:`RetryPolicy`'s backoff,
cap and jitter are computed here and waited out with durable timers; the jitter is a hash of a seed,
not a random number, so every replay computes the same delay.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator
from pydantic.functional_validators import AfterValidator

from workflow_core.ledger.errors import InvalidLedgerInput
from workflow_core.ledger.model import AGENT_NAME, validate_step_id

ERROR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")
MAX_DEADLINE_SECONDS = 7 * 24 * 3600  # a first deadline beyond a week is a definition mistake
MAX_INTERVAL_SECONDS = 24 * 3600


class Strict(BaseModel):
    """A part of a definition: immutable once loaded, and a key it does not know (a typo) is an error."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class RetryPolicy(Strict):
    max_attempts: int = Field(default=3, ge=1, le=100, description="attempts in total, the first included")
    initial_interval_seconds: float = Field(default=5.0, gt=0, le=MAX_INTERVAL_SECONDS)
    backoff_coefficient: float = Field(default=2.0, ge=1, le=100)
    max_interval_seconds: float = Field(default=300.0, gt=0, le=MAX_INTERVAL_SECONDS)
    jitter: float = Field(default=0.1, ge=0, le=1, description="fraction of the delay that may be shaved off")

    @model_validator(mode="after")
    def _interval_order(self) -> RetryPolicy:
        if self.max_interval_seconds < self.initial_interval_seconds:
            raise ValueError(
                f"max_interval_seconds ({self.max_interval_seconds:g}) must not be smaller than "
                f"initial_interval_seconds ({self.initial_interval_seconds:g})"
            )
        return self

    def base_delay_seconds(self, attempt: int) -> float:
        """Delay after attempt ``attempt`` (1-based) failed, before jitter."""
        if attempt < 1:
            raise ValueError(f"attempt must be >= 1, got {attempt}")
        try:
            grown = self.initial_interval_seconds * self.backoff_coefficient ** (attempt - 1)
        except OverflowError:  # huge attempt numbers: the cap applies long before
            return self.max_interval_seconds
        return min(self.max_interval_seconds, grown)

    def delay_seconds(self, attempt: int, seed: str) -> float:
        """The jitter only shortens the delay, so the cap holds and instances that failed together
        spread out instead of retrying in lockstep."""
        digest = hashlib.sha256(f"{seed}:{attempt}".encode()).digest()  # stable, unlike hash()
        unit = int.from_bytes(digest[:8], "big") / 2**64  # in [0, 1)
        return self.base_delay_seconds(attempt) * (1.0 - self.jitter * unit)


def _check_agent(value: str) -> str:
    if not AGENT_NAME.fullmatch(value):
        raise ValueError(
            f"agent {value!r} must be lowercase dotted words such as 'storage.create' "
            f"(pattern {AGENT_NAME.pattern})"
        )
    return value


def _check_error_names(names: tuple[str, ...]) -> tuple[str, ...]:
    if bad := [name for name in names if not ERROR_NAME.fullmatch(name)]:
        raise ValueError(
            f"non_retryable_errors: {bad[0]!r} is not an exception class name such as CardDeclined"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"non_retryable_errors lists a name twice: {list(names)}")
    return names


AgentName = Annotated[str, AfterValidator(_check_agent)]
ErrorNames = Annotated[tuple[str, ...], AfterValidator(_check_error_names)]


class CompensationDefinition(Strict):
    """How to undo a step: another agent, with its own deadline and retries."""

    agent: AgentName
    deadline_seconds: float = Field(gt=0, le=MAX_DEADLINE_SECONDS)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    non_retryable_errors: ErrorNames = ()


class StepDefinition(Strict):
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


class ParallelGroup(Strict):
    """Steps that run at the same time; if one gives up, the instance is compensated once all finished."""

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
    parallel = "parallel" in value if isinstance(value, dict) else isinstance(value, ParallelGroup)
    return "<parallel>" if parallel else "<step>"


# The tags start with "<" so the loader leaves them out of error locations (steps[1].parallel[0].id).
StepItem = Annotated[
    Annotated[StepDefinition, Tag("<step>")] | Annotated[ParallelGroup, Tag("<parallel>")],
    Discriminator(_item_kind),
]
