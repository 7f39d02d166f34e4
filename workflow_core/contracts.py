"""Names and message shapes shared by the scheduler, the agents and the supervisor.

One module so the orchestrator, the activities, the workers and the tests cannot drift apart on a
function name, an event name or a field.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from workflow_core.ledger.errors import InvalidLedgerInput
from workflow_core.ledger.model import validate_instance_id, validate_step_id
from workflow_core.payloads import PAYLOAD_CEILING_BYTES, bounded_payload, message_payload

# ---- function names (what function_app registers and orchestrators call) -------------------------
WORKFLOW_ORCHESTRATOR = "workflow_orchestrator"
COMPENSATION_ORCHESTRATOR = "compensation_orchestrator"
STEP_ORCHESTRATOR = "step_orchestrator"  # runs one step of a parallel group as a sub-orchestration

ACTIVITY_CREATE_STEPS = "create_workflow_steps"
ACTIVITY_DISPATCH_STEP = "dispatch_step"
ACTIVITY_CHECK_STEP = "check_step"
ACTIVITY_SCHEDULE_RETRY = "schedule_retry"
ACTIVITY_GIVE_UP_STEP = "give_up_step"
ACTIVITY_PLAN_COMPENSATION = "plan_compensation"
ACTIVITY_DISPATCH_COMPENSATION = "dispatch_compensation"
ACTIVITY_CHECK_COMPENSATION = "check_compensation"
ACTIVITY_FINISH_COMPENSATION = "finish_compensation"
ACTIVITY_SETTLE_INSTANCE = "settle_instance"  # the workflow ended: the instance record says how
ACTIVITY_VERIFY_RESULT = "verify_result"  # a result event is only a signal: what does the ledger say?

WORKER_FUNCTION = "agent_worker"
RESULT_FUNCTION = "agent_result_handler"
DEAD_LETTER_FUNCTION = "agent_dead_letter_handler"
WATCHDOG_FUNCTION = "supervisor_watchdog"

StepKind = Literal["work", "compensate"]


STEP_INFIX = ":step:"  # in the ids of a parallel group's step orchestrations


def result_event_name(step_id: str, attempt: int, kind: StepKind = "work") -> str:
    """External event an orchestration waits for; one per attempt, so a late result of attempt N
    can never satisfy the wait for attempt N+1."""
    prefix = "result" if kind == "work" else "compensation-result"
    return f"{prefix}:{step_id}:{attempt}"


def compensation_instance_id(instance_id: str) -> str:
    """Deterministic id of an instance's compensation orchestration: starting it twice is a no-op."""
    return f"{instance_id}:compensation"


def step_instance_id(instance_id: str, step_id: str, epoch: int = 0) -> str:
    """Deterministic id of the sub-orchestration that runs one step of a parallel group; it is the
    ``orchestration_id`` the step's dispatch records, so the step's result events go to it.

    ``epoch`` is the instance's resume count: a resumed scheduler never calls a child under an id a
    dead scheduler's child may still hold (a start for a running id is dropped, and the parent
    would wait forever), and the ledger's ``orchestration_id`` moves to the new child on dispatch.
    """
    base = f"{instance_id}{STEP_INFIX}{step_id}"
    return base if epoch == 0 else f"{base}:r{epoch}"


def is_step_instance_id(orchestration_id: str | None) -> bool:
    return bool(orchestration_id) and STEP_INFIX in orchestration_id


# ---- sizes and ids every message is checked against ----------------------------------------------
# A message that breaks these can never be processed (the ledger refuses its keys, or its text does not
# fit a ledger property): the worker and the handlers park it (see ``docs/contracts.md``) instead of
# letting it fail on every delivery.
MAX_ERROR_CHARS = 8_000  # an error text kept in the ledger (last_error) and in a result message
# A step's input or output as canonical JSON: above the ledger's inline limit it travels as a blob
# reference (``workflow_core.payloads``), so a message holds either a reference or a value that fits.
MAX_PAYLOAD_BYTES = PAYLOAD_CEILING_BYTES
MAX_ORCHESTRATION_ID = 320  # "<instance>:step:<step>" with the longest instance and step ids
MAX_AGENT_CHARS = 200
MAX_WORKFLOW_CHARS = 100
_ORCHESTRATION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]*$")
_AGENT = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$")
_WORKFLOW = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def fit_text(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``text`` if it fits in ``limit`` characters, else its head and tail around a marker that says how
    much was cut (``… [truncated 40,000 chars] …``), at most ``limit`` characters in all."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit  # first guess; the marker's own length is added below
    while True:
        marker = f"\n… [truncated {cut:,} chars] …\n"
        keep = limit - len(marker)
        if keep < 2:
            return text[:limit]
        if len(text) - keep == cut:
            head = keep - keep // 2
            return text[:head] + marker + text[len(text) - keep // 2 :]
        cut = len(text) - keep


def _as_value_error(check: Any, value: Any) -> Any:
    try:
        return check(value)
    except InvalidLedgerInput as exc:  # not a ValueError on purpose; pydantic needs one here
        raise ValueError(str(exc)) from None


def _key_text(kind: str, value: str, pattern: re.Pattern[str], limit: int, hint: str) -> str:
    bad = sorted({c for c in value if c in "/\\#?" or ord(c) < 32 or 0x7F <= ord(c) <= 0x9F})
    if bad:
        raise ValueError(f"{kind} {value[:80]!r} contains characters Table Storage keys forbid: {bad!r}")
    if not value:
        raise ValueError(f"{kind} must not be empty")
    if len(value) > limit:
        raise ValueError(f"{kind} is {len(value)} characters long; at most {limit} are allowed")
    if not pattern.fullmatch(value):
        raise ValueError(f"{kind} {value[:80]!r} must be {hint}")
    return value


def _orchestration_id(value: str) -> str:
    return _key_text(
        "orchestration id",
        value,
        _ORCHESTRATION_ID,
        MAX_ORCHESTRATION_ID,
        "letters, digits and . _ : @ - (a letter or digit first)",
    )


def _agent(value: str) -> str:
    return _key_text("agent", value, _AGENT, MAX_AGENT_CHARS, "lowercase dotted words such as storage.create")


def _agent_or_empty(value: str) -> str:
    return value if value == "" else _agent(value)


def _workflow(value: str) -> str:
    return _key_text("workflow", value, _WORKFLOW, MAX_WORKFLOW_CHARS, "lowercase words joined by '-'")


def _iso_time(value: str) -> str:
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"deadline {value[:80]!r} is not an ISO 8601 timestamp") from None
    return value


def _error(value: str | None) -> str | None:
    if value is not None and len(value) > MAX_ERROR_CHARS:
        raise ValueError(f"error text of {len(value)} characters; at most {MAX_ERROR_CHARS} (use fit_text)")
    return value


InstanceId = Annotated[str, AfterValidator(lambda v: _as_value_error(validate_instance_id, v))]
StepId = Annotated[str, AfterValidator(lambda v: _as_value_error(validate_step_id, v))]
OrchestrationId = Annotated[str, AfterValidator(_orchestration_id)]
AgentName = Annotated[str, AfterValidator(_agent_or_empty)]
WorkflowName = Annotated[str, AfterValidator(_workflow)]
IsoTime = Annotated[str, AfterValidator(_iso_time)]
Payload = Annotated[dict[str, Any], AfterValidator(bounded_payload)]
MessagePayload = Annotated[dict[str, Any], AfterValidator(message_payload)]  # inline-sized or a reference
OptionalPayload = Annotated[dict[str, Any] | None, AfterValidator(bounded_payload)]
ErrorText = Annotated[str | None, AfterValidator(_error)]


def explain(exc: ValidationError, limit: int = 2_000) -> str:
    """A pydantic error as one line an operator can read: ``field: problem; field: problem``."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ())) or "message"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return fit_text("; ".join(parts), limit)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StepDispatch(_Model):
    """Input of the dispatch activities: write the ledger (Dispatched/Compensating), then send."""

    instance_id: str
    orchestration_id: str
    workflow: str
    step_id: str
    attempt: int = Field(ge=1)
    deadline: str  # ISO 8601 UTC, computed from context.current_utc_datetime
    input: dict[str, Any] = Field(default_factory=dict)
    kind: StepKind = "work"
    # W3C trace context of the workflow (``workflow_core.tracing``), copied from the orchestration input:
    # observability only.
    trace: dict[str, str] | None = None
    # The versions an earlier write or read left of the step and its instance, to write against
    # unread (first work attempt only); the dispatch reads the rows when absent or out of date.
    expected: ExpectedRows | None = None
    # The previous step's success as the scheduler took it, unread (``ResultBasis``): this dispatch
    # writes nothing unless the ledger holds exactly that success.
    basis: ResultBasis | None = None
    # The scheduler takes this attempt's success provisionally (a sequential work step): the worker
    # records it with a basis row and the result handler raises it unread (``ReplyVersions``).
    provisional: bool | None = None


class ResultBasis(_Model):
    """A success the scheduler took without the ledger's word (a reply the result handler raised
    unread, ``ReplyVersions``), passed to its next ledger write: the next dispatch or the settle.

    That write's transaction deletes the *basis row* the worker inserted with its record of the
    success, named by the reply's ``digest`` (``workflow_core.messages.reply_digest``), so it lands
    only if the ledger recorded exactly that reply. Without the row (a forged or altered reply, or a
    re-run of the write after it landed) the activity reads the step instead: it goes on only if the
    ledger records that attempt succeeded with output of ``output_digest``, and otherwise answers
    ``basis-refused`` without writing anything; the scheduler then waits for the ledger's word on the
    step again."""

    step_id: StepId  # names a basis row's RowKey: checked like every key before a transaction
    attempt: int = Field(ge=1)
    digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    output_digest: str = Field(pattern=r"^[0-9a-f]{64}$")


class ExpectedRows(_Model):
    """A work step's row as the HTTP starter created it (Pending, attempt 0: its ETag, and its fields
    from the pinned definition) and the instance record's latest snapshot the scheduler holds.

    Only the ETags are trusted, by the ledger itself: the dispatch writes both rows If-Match these
    versions (``workflow_core.ledger.known_rows``), and reads them instead when either changed since.
    """

    step_etag: str = Field(min_length=1)  # its shape is checked where it becomes an If-Match (known_rows)
    step_name: str
    agent: AgentName
    sequence: int = Field(ge=0)
    compensator: str | None = None
    max_attempts: int = Field(default=1, ge=1)
    heartbeat_timeout_seconds: float | None = Field(default=None, gt=0)
    workflow_version: str | None = None
    instance: dict[str, Any]


class WorkMessage(_Model):
    """Body of a message on the work queue."""

    kind: StepKind
    instance_id: InstanceId
    orchestration_id: OrchestrationId
    workflow: WorkflowName
    step_id: StepId
    agent: AgentName
    attempt: int = Field(ge=1)
    deadline: IsoTime
    input: MessagePayload = Field(default_factory=dict)
    # The rows as the dispatch wrote them, for a claim without a read (``WorkVersions``); absent on
    # re-sends, compensations and messages from before it existed: the worker then reads the row.
    ledger: WorkVersions | None = None


class WorkVersions(_Model):
    """The step row and the instance record as the dispatch wrote them (``known_rows`` snapshots)
    and their ETags.

    The worker claims the attempt against them without reading the ledger, in a transaction that
    also deletes the *claim-key row* the dispatch wrote with the step: its RowKey carries a digest of
    this message, ETags aside (``workflow_core.messages.claim_digest``). So only the message the
    dispatch sent, unaltered, claims that way; any other body, or rows written since, fall back to
    the read and its checks."""

    step: dict[str, Any]
    instance: dict[str, Any] | None = None
    etags: dict[str, str] = Field(default_factory=dict)  # "step", "instance": set after the write
    # The in-flight steps the instance's index row may watch once this attempt is written (an upper
    # bound), when the dispatch wrote against a snapshot that named them; None when unknown.
    watched: list[str] | None = None
    # The scheduler takes this attempt's success provisionally: record it with a basis row
    # (``ResultBasis``) and reply with the instance as recorded (``ReplyVersions``).
    keyed_reply: bool = False


class ReplyVersions(_Model):
    """The instance record as the worker's record of a success wrote it (``known_rows.instance_fields``,
    with ``known_rows.WATCHED_KEY`` when the worker knows which in-flight steps its row may still
    watch) and its ETag.

    The record's transaction also inserted a *basis row* named by the reply's digest, ETags aside
    (``workflow_core.messages.reply_digest``). The result handler raises such a reply without reading
    the ledger; the scheduler takes it provisionally and its next write deletes that row in its own
    transaction (``ResultBasis``), so nothing is written on the strength of a reply the ledger did
    not record, unaltered."""

    instance: dict[str, Any]
    etags: dict[str, str] = Field(default_factory=dict)  # "instance": set after the write


class ResultMessage(_Model):
    """Body of a message on the result queue, and the payload of the orchestration's external event."""

    kind: StepKind
    instance_id: InstanceId
    orchestration_id: OrchestrationId
    step_id: StepId
    attempt: int = Field(ge=1)
    outcome: Literal["succeeded", "failed"]
    output: OptionalPayload = None
    error: ErrorText = None
    # The failure is one retrying cannot fix (``PermanentError``, or a type the step lists in
    # ``non_retryable_errors``): the scheduler gives up at once. Only the ledger's word counts.
    permanent: bool = False
    # A success recorded with a basis row (``ReplyVersions``): raised unread, taken provisionally.
    ledger: ReplyVersions | None = None

    @classmethod
    def answering(
        cls,
        work: WorkMessage,
        *,
        ok: bool,
        output: dict[str, Any] | None = None,
        error: str | None = None,
        permanent: bool = False,
    ) -> ResultMessage:
        """The reply to ``work``: its output on success, its error on failure (never both)."""
        return cls(
            kind=work.kind,
            instance_id=work.instance_id,
            orchestration_id=work.orchestration_id,
            step_id=work.step_id,
            attempt=work.attempt,
            outcome="succeeded" if ok else "failed",
            output=output if ok else None,
            error=None if ok else (None if error is None else fit_text(error)),
            permanent=False if ok else permanent,
        )


class StepCheck(_Model):
    """What the ledger says about a step when the orchestration's deadline timer fired.

    ``extended``: an agent heartbeat moved the deadline; wait again until ``deadline``.
    ``succeeded``/``failed``: the result is in the ledger (its event was lost or late).
    ``timed_out``: the ledger now records TimedOut.
    """

    state: Literal["succeeded", "failed", "timed_out", "extended"]
    deadline: str | None = None
    output: dict[str, Any] | None = None
    error: str | None = None
    permanent: bool = False  # a failure retrying cannot fix, as the ledger recorded it


class ResultVerdict(_Model):
    """What the ledger recorded for the attempt a result event named (``verify_result``).

    The event's payload is never the outcome: ``succeeded``/``failed``/``timed_out`` come from the
    ledger row; ``unconfirmed`` means the ledger holds no outcome for that attempt (a forged, corrupt
    or premature event): the scheduler ignores the event and keeps waiting, and the mismatch is audited.
    """

    state: Literal["succeeded", "failed", "timed_out", "unconfirmed"]
    output: dict[str, Any] | None = None
    error: str | None = None
    permanent: bool = False


class ConfirmedResult(ResultMessage):
    """The event the result handler raises: the reply as the ledger confirmed it, with the ledger's
    verdict on the attempt and the attempt's ``ledger_token`` (``StepRecord.attempt_token``).

    The token is random per attempt and only readers of the ledger know it (it is not in the work or
    result messages): an event carrying the token the dispatch returned to the orchestrator was built
    from a ledger read, so the orchestrator takes ``verdict`` without reading the ledger again. Any
    other event (no token, another token: a stray, replayed or hand-raised event) is only a signal,
    and the orchestrator asks the ledger (``verify_result``) as before.
    """

    ledger_token: str = Field(min_length=16, max_length=64)
    verdict: ResultVerdict
    # The instance record as the handler read it with the step (``known_rows.instance_snapshot``:
    # its ETag and fields, the large texts left out): the version the scheduler's next dispatch may
    # write against without reading it again (``ExpectedRows``). None for steps without a record.
    instance: dict[str, Any] | None = None
