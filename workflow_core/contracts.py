"""Function names, event names and message shapes the roles share, so they cannot drift apart."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from workflow_core.ledger.model import StepStatus
from workflow_core.message_fields import (
    MAX_REASON_CHARS,
    AgentName,
    CorrelationId,
    ErrorText,
    InstanceId,
    IsoTime,
    MessagePayload,
    OptionalPayload,
    OrchestrationId,
    QueueName,
    StepId,
    WorkflowName,
    fit_text,
)

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
    """One event name per attempt: a late result of attempt N never satisfies attempt N+1's wait."""
    prefix = "result" if kind == "work" else "compensation-result"
    return f"{prefix}:{step_id}:{attempt}"


def compensation_instance_id(instance_id: str) -> str:
    """Deterministic, so starting it twice is a no-op."""
    return f"{instance_id}:compensation"


def step_instance_id(instance_id: str, step_id: str, epoch: int = 0) -> str:
    """Id of the sub-orchestration running one step of a parallel group (its result events go there).
    ``epoch`` (the resume count) keeps a resumed scheduler off an id a dead scheduler's child may
    still hold: a start for a running id is dropped, and the parent would wait forever."""
    base = f"{instance_id}{STEP_INFIX}{step_id}"
    return base if epoch == 0 else f"{base}:r{epoch}"


def is_step_instance_id(orchestration_id: str | None) -> bool:
    return bool(orchestration_id) and STEP_INFIX in orchestration_id


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StepDispatch(_Model):
    """Input of the dispatch activities: write the ledger, then send."""

    instance_id: str
    orchestration_id: str
    workflow: str
    step_id: str
    attempt: int = Field(ge=1)
    deadline: str  # ISO 8601 UTC, computed from context.current_utc_datetime
    input: dict[str, Any] = Field(default_factory=dict)
    kind: StepKind = "work"
    trace: dict[str, str] | None = None  # W3C trace context (observability only)
    expected: ExpectedRows | None = None  # rows to write against unread (first work attempt only)
    basis: ResultBasis | None = None  # the previous success, taken unread: write only if recorded
    provisional: bool | None = None  # this success will be taken unread (``ReplyVersions``)
    held: bool | None = None  # asked again after a "waiting" answer (the agent's limits): read the ledger


class ResultBasis(_Model):
    """A success the scheduler took unread (``ReplyVersions``): its next ledger write deletes the *basis
    row* named by ``digest`` (``messages.reply_digest``), so it lands only if the ledger recorded exactly
    that reply (docs/contracts.md, "Trust only the ledger")."""

    step_id: StepId  # names a basis row's RowKey: checked like every key before a transaction
    attempt: int = Field(ge=1)
    digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    output_digest: str = Field(pattern=r"^[0-9a-f]{64}$")


class ExpectedRows(_Model):
    """A work step's row as the starter created it and the instance's latest snapshot: only their
    ETags are trusted, by the ledger itself (``ledger.known_rows``)."""

    step_etag: str = Field(min_length=1)  # its shape is checked where it becomes an If-Match
    step_name: str
    agent: AgentName
    sequence: int = Field(ge=0)
    compensator: str | None = None
    max_attempts: int = Field(default=1, ge=1)
    heartbeat_timeout_seconds: float | None = Field(default=None, gt=0)
    workflow_version: str | None = None
    instance: dict[str, Any]


class WorkMessage(_Model):
    kind: StepKind
    instance_id: InstanceId
    orchestration_id: OrchestrationId
    workflow: WorkflowName
    step_id: StepId
    agent: AgentName
    attempt: int = Field(ge=1)
    deadline: IsoTime
    input: MessagePayload = Field(default_factory=dict)
    ledger: WorkVersions | None = None  # absent on re-sends and compensations: the worker reads
    # What a message-only agent's heartbeats and result must carry (``messages.reply_token``),
    # and the key it dedupes on toward its remote service: ``StepContext.idempotency_key``. Every
    # message carries both: one without is parked with the reason, never worked on.
    reply_token: str = Field(pattern=r"^[0-9a-f]{64}$")
    idempotency_key: str = Field(min_length=1, max_length=301)
    # When the attempt is over for good (its deadline plus ``EXPIRY_GRACE_SECONDS``): the message is
    # sent with a matching time-to-live, and an agent refuses one that arrives later (no effect).
    expires_at: IsoTime


class WorkVersions(_Model):
    """The step row and the instance record as the dispatch wrote them, and their ETags.

    The worker claims against them unread, in a transaction that also deletes the *claim-key row*
    the dispatch wrote with the step, keyed by a digest of this message (``messages.claim_digest``):
    only the message the dispatch sent, unaltered, claims that way; anything else falls back to the
    read and its checks."""

    step: dict[str, Any]
    instance: dict[str, Any] | None = None
    etags: dict[str, str] = Field(default_factory=dict)  # "step", "instance": set after the write
    watched: list[str] | None = None  # in-flight steps the index row may watch (an upper bound)
    keyed_reply: bool = False  # record a success with a basis row (``ResultBasis``)


class ReplyVersions(_Model):
    """The instance record as the worker's record of a success wrote it, and its ETag.

    That transaction also inserted a *basis row* named by the reply's digest. The result handler
    raises such a reply unread; the scheduler's next write deletes that row in its own transaction
    (``ResultBasis``), so nothing is written on a reply the ledger did not record, unaltered."""

    instance: dict[str, Any]
    etags: dict[str, str] = Field(default_factory=dict)  # "instance": set after the write


class ResultMessage(_Model):
    """Body of a result message, and the payload of the orchestration's external event."""

    kind: StepKind
    instance_id: InstanceId
    orchestration_id: OrchestrationId
    step_id: StepId
    attempt: int = Field(ge=1)
    outcome: Literal["succeeded", "failed"]
    output: OptionalPayload = None
    error: ErrorText = None
    permanent: bool = False  # retrying cannot fix it: the scheduler gives up at once
    ledger: ReplyVersions | None = None  # recorded with a basis row: raised unread
    # A message-only agent's reply: the app records it for the agent (``messages.reply_token``).
    reply_token: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")

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
        ids = work.model_dump(include={"kind", "instance_id", "orchestration_id", "step_id", "attempt"})
        return cls(
            **ids,
            outcome="succeeded" if ok else "failed",
            output=output if ok else None,
            error=None if ok else (None if error is None else fit_text(error)),
            permanent=False if ok else permanent,
        )


class Heartbeat(_Model):
    """A message-only agent's "attempt ``attempt`` of this step is still running: move its deadline
    to ``seconds`` (default: the step's ``heartbeat_timeout_seconds``) from now", now being the
    ledger's clock. The first one also claims a Dispatched step for the agent. With ``answer_queue``
    (a name beginning with ``<RESULT_QUEUE_NAME>-answers-``) the app answers there: is the attempt
    still current (``AttemptStatus``)?"""

    type: Literal["heartbeat"]
    kind: StepKind
    instance_id: InstanceId
    orchestration_id: OrchestrationId
    step_id: StepId
    attempt: int = Field(ge=1)
    reply_token: str = Field(pattern=r"^[0-9a-f]{64}$")
    seconds: float | None = Field(default=None, gt=0, le=86400)
    answer_queue: QueueName | None = None  # answered only if it is such a name (activities.replies)
    correlation_id: CorrelationId | None = None  # echoed in the answer


class AttemptStatus(_Model):
    """The app's answer to a heartbeat that named an ``answer_queue``: is that attempt still the
    ledger's current one? ``current`` only when the heartbeat was accepted (claimed, deadline moved
    or kept) for the attempt the ledger holds; then do the work, else do nothing for it."""

    type: Literal["attempt-status"]
    kind: StepKind
    instance_id: InstanceId
    step_id: StepId
    attempt: int = Field(ge=1)
    current: bool
    status: StepStatus | None  # the step's status in the ledger; null: the ledger has no such step
    deadline: IsoTime | None  # the step's deadline in the ledger, if any
    reason: str = Field(max_length=MAX_REASON_CHARS)
    correlation_id: CorrelationId | None = None  # the heartbeat's, as sent


class StepCheck(_Model):
    """What the ledger says about a step when its deadline timer fired (``extended``: a heartbeat
    moved the deadline; wait again until ``deadline``)."""

    state: Literal["succeeded", "failed", "timed_out", "extended"]
    deadline: str | None = None
    output: dict[str, Any] | None = None
    error: str | None = None
    permanent: bool = False


class ResultVerdict(_Model):
    """What the ledger recorded for the attempt a result event named (the event is never the outcome;
    ``unconfirmed``: none recorded, so the scheduler keeps waiting)."""

    state: Literal["succeeded", "failed", "timed_out", "unconfirmed"]
    output: dict[str, Any] | None = None
    error: str | None = None
    permanent: bool = False


class ConfirmedResult(ResultMessage):
    """The event the result handler raises: the ledger's verdict and the attempt's ``ledger_token``,
    random per attempt and in no message, so only a ledger reader knows it: an event carrying it is
    taken unread, any other is only a signal (docs/contracts.md, "Trust only the ledger")."""

    ledger_token: str = Field(min_length=16, max_length=64)
    verdict: ResultVerdict
    instance: dict[str, Any] | None = None  # as read with the step: the next dispatch's ExpectedRows
