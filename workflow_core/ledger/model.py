"""What a step is: its status machine, its record, its audit entry, and how ids are validated.

The transition table is the one definition of the legal status changes: the ledger refuses anything
else, so no bug in a role can put a step in a state the pattern cannot recover from.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from workflow_core.ledger.errors import InvalidLedgerInput


class StepStatus(StrEnum):
    PENDING = "Pending"  # written with the workflow, not yet dispatched
    DISPATCHED = "Dispatched"  # ledger row says who owns it and by when; work message sent (or about to be)
    RUNNING = "Running"  # an agent claimed it
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"  # the agent reported failure (or the message was dead-lettered)
    TIMED_OUT = "TimedOut"  # the deadline passed without a result
    RETRYING = "Retrying"  # waiting out the backoff before the next attempt
    COMPENSATING = "Compensating"  # its compensator is running
    COMPENSATED = "Compensated"
    COMPENSATION_FAILED = "CompensationFailed"  # compensator gave up: needs an operator
    SKIPPED = "Skipped"  # an operator decided the step needs no (more) work
    CANCELLED = "Cancelled"  # never ran, or failed with nothing to undo, and the workflow stopped


# Sub-states of a Compensating step, kept in ``StepRecord.compensation_status`` (the status stays
# Compensating until the compensator succeeded or the scheduler gave up on it): the agents and the
# scheduler write them, the watchdog reads them.
COMP_DISPATCHED = "Dispatched"
COMP_RUNNING = "Running"
COMP_FAILED = "Failed"
COMP_TIMED_OUT = "TimedOut"
COMP_DONE = "Compensated"
COMP_GAVE_UP = "GaveUp"  # on CompensationFailed rows
COMP_IN_FLIGHT = frozenset({COMP_DISPATCHED, COMP_RUNNING})
GIVEN_UP = "GivenUp"  # on a work step whose attempts were exhausted (give_up_step): compensated next


S = StepStatus

# The state machine. Keys: current status; values: statuses it may move to.
ALLOWED_TRANSITIONS: dict[StepStatus, frozenset[StepStatus]] = {
    S.PENDING: frozenset({S.DISPATCHED, S.CANCELLED, S.SKIPPED}),
    S.DISPATCHED: frozenset({S.RUNNING, S.FAILED, S.TIMED_OUT, S.SKIPPED}),
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.TIMED_OUT, S.SKIPPED}),
    S.SUCCEEDED: frozenset({S.COMPENSATING}),
    S.FAILED: frozenset({S.RETRYING, S.COMPENSATING, S.CANCELLED, S.SKIPPED}),
    S.TIMED_OUT: frozenset({S.RETRYING, S.COMPENSATING, S.CANCELLED, S.SKIPPED}),
    S.RETRYING: frozenset({S.DISPATCHED, S.COMPENSATING, S.CANCELLED, S.SKIPPED}),
    # Compensating -> Compensating is a compensator retry (attempt + 1).
    S.COMPENSATING: frozenset({S.COMPENSATING, S.COMPENSATED, S.COMPENSATION_FAILED}),
    S.COMPENSATION_FAILED: frozenset({S.COMPENSATING, S.SKIPPED}),
    S.COMPENSATED: frozenset(),
    S.SKIPPED: frozenset(),
    S.CANCELLED: frozenset(),
}

# Statuses someone must move on from by a deadline; each has a deadline-index row.
DEADLINE_STATUSES = frozenset({S.DISPATCHED, S.RUNNING, S.FAILED, S.TIMED_OUT, S.RETRYING, S.COMPENSATING})
# Statuses no automation will move on from: listed for operators in the index's attention partition.
ATTENTION_STATUSES = frozenset({S.COMPENSATION_FAILED})


def parse_status(value: str | StrEnum, kind: type[StrEnum] = StepStatus, what: str = "step") -> Any:
    """A step's (or, with ``kind``, an instance's) status from its name, or a clear refusal."""
    try:
        return kind(value)
    except ValueError:
        known = ", ".join(s.value for s in kind)
        raise InvalidLedgerInput(f"unknown {what} status {value!r}; known statuses: {known}") from None


# Table keys forbid / \ # ? and control characters; we are stricter and allow a portable set, and
# reserve '~' (sorts after every allowed character) for the audit rows that share a partition.
_INSTANCE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$")
_STEP_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
INSTANCE_ID_PATTERN = _INSTANCE_ID.pattern  # as published in the message schemas (docs/schemas/)
STEP_ID_PATTERN = _STEP_ID.pattern
AGENT_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$")  # lowercase dotted words
WORKFLOW_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")  # lowercase words joined by '-'


def _valid_key(kind: str, value: object, pattern: re.Pattern[str], limit: int) -> str:
    if isinstance(value, str) and pattern.fullmatch(value):
        return value
    if not isinstance(value, str):
        raise InvalidLedgerInput(f"{kind} must be a string, got {type(value).__name__}")
    if value == "":
        raise InvalidLedgerInput(f"{kind} must not be empty")
    bad = sorted({c for c in value if c in "/\\#?" or ord(c) < 32 or 0x7F <= ord(c) <= 0x9F})
    if bad:
        raise InvalidLedgerInput(f"{kind} {value!r} contains characters Table Storage keys forbid: {bad!r}")
    if len(value) > limit:
        raise InvalidLedgerInput(f"{kind} is {len(value)} characters long; at most {limit} are allowed")
    raise InvalidLedgerInput(
        f"{kind} {value!r} must match {pattern.pattern} (letters, digits and . _ - and a letter/digit first)"
    )


def validate_instance_id(value: object) -> str:
    return _valid_key("instance id", value, _INSTANCE_ID, 200)


def validate_step_id(value: object) -> str:
    return _valid_key("step id", value, _STEP_ID, 100)


def require_aware(value: datetime | None, what: str = "datetime") -> datetime | None:
    """Reject naive datetimes (their zone is a guess) and normalise to UTC."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidLedgerInput(f"{what} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise InvalidLedgerInput(f"{what} {value.isoformat()} is naive; pass a timezone-aware UTC datetime")
    return value.astimezone(UTC)


AwareDatetime = Annotated[datetime | None, AfterValidator(require_aware)]
InstanceId = Annotated[str, AfterValidator(validate_instance_id)]
StepId = Annotated[str, AfterValidator(validate_step_id)]

MAX_TEXT = 32_000  # Table Storage string properties hold 64 KiB (32K UTF-16 chars)


def _bounded_text(v: str | None) -> str | None:
    if v is not None and len(v) > MAX_TEXT:
        raise InvalidLedgerInput(
            f"text of {len(v)} characters exceeds the ledger's {MAX_TEXT}; store it elsewhere and "
            "keep a reference"
        )
    return v


LedgerText = Annotated[str | None, AfterValidator(_bounded_text)]  # one string property's worth


def entity_properties(model: type[BaseModel], *, keys: set[str]) -> dict[str, str]:
    """Record field -> table entity property: its name in CamelCase (``keys`` and the ETag are the
    entity's own)."""
    return {f: camel_case(f) for f in model.model_fields if f not in keys | {"etag"}}


def camel_case(name: str) -> str:
    return "".join(word.capitalize() for word in name.split("_"))


class StepRecord(BaseModel):
    """One step of one workflow instance, as persisted (PartitionKey = instance id, RowKey = step id)."""

    model_config = ConfigDict(frozen=True, validate_assignment=True)

    instance_id: InstanceId
    step_id: StepId
    workflow_name: str
    workflow_version: str | None = None  # the pinned definition version
    step_name: str
    sequence: int = Field(ge=0, description="position in the workflow; compensation runs in reverse")
    agent: str
    compensator: str | None = None
    status: StepStatus = StepStatus.PENDING
    owner: str | None = None
    attempt: int = Field(default=0, ge=0)
    max_attempts: int = Field(default=1, ge=1)
    deadline: AwareDatetime = None
    heartbeat_timeout_seconds: float | None = Field(default=None, gt=0)
    last_heartbeat: AwareDatetime = None
    created_at: AwareDatetime = None
    updated_at: AwareDatetime = None
    completed_at: AwareDatetime = None
    # when the watchdog last re-sent this attempt's message (the dispatch's own send is implied by the
    # Dispatched/Compensating write before it and not recorded): the watchdog re-sends an attempt once
    resent_at: AwareDatetime = None
    last_error: LedgerText = None
    non_retryable: bool = False  # the last failure is one retrying cannot fix: give up at once
    compensation_status: str | None = None
    compensation_attempt: int = Field(default=0, ge=0)
    input_ref: LedgerText = None  # JSON of the step input (or a blob reference when large)
    result_ref: LedgerText = None  # JSON of the step output (or a blob reference when large)
    orchestration_id: str | None = None  # which orchestration waits for this step's result events
    index_key: str | None = None  # "<partition>|<row>" of this step's deadline-index row
    # Completion sequence within the instance (1, 2, ...), from the instance record's counter in the
    # same transaction as the completion: compensation order never depends on a writer's clock.
    completion_seq: int | None = Field(default=None, ge=1)
    # A random value each attempt (work or compensation) gets with its dispatch. Only what read the
    # ledger knows it, so a result event carrying it was built from a ledger read and the orchestrator
    # may act on it without reading again (orchestrators.decisions.confirmed_outcome). Not in the API.
    attempt_token: str | None = None
    # W3C trace context of the dispatch (workflow_core.tracing): observability only, never decided on.
    trace_parent: str | None = None
    trace_state: str | None = None
    etag: str | None = None

    def is_overdue(self, now: datetime) -> bool:
        return self.status in DEADLINE_STATUSES and self.deadline is not None and self.deadline <= now

    def sent_at(self) -> datetime | None:
        """When the attempt's message went out, as far as the row says (the Dispatched write's time,
        or a later re-send's; later than the send once anything else wrote the row). Telemetry only."""
        return max((t for t in (self.updated_at, self.resent_at) if t is not None), default=None)


class AuditEntry(BaseModel):
    """One append-only line of an instance's history: who did what to which step, when and why."""

    model_config = ConfigDict(frozen=True)

    instance_id: str
    step_id: str
    at: datetime
    actor: str
    action: str  # created | transition | update | heartbeat | note
    from_status: str | None = None
    to_status: str | None = None
    attempt: int | None = None
    reason: str = ""


class NewStep(BaseModel):
    """What ``create_steps`` needs to know about one step of a workflow instance."""

    step_id: StepId
    step_name: str
    agent: str
    compensator: str | None = None
    max_attempts: int = Field(default=1, ge=1)
    heartbeat_timeout_seconds: float | None = Field(default=None, gt=0)
    input_ref: str | None = None
