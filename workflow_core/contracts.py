"""Names and message shapes shared by the scheduler, the agents and the supervisor.

One module so the orchestrator, the activities, the workers and the tests cannot drift apart on a
function name, an event name or a field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from workflow_core.message_fields import (  # the fields the models below are made of
    AgentName,
    ErrorText,
    InstanceId,
    IsoTime,
    MessagePayload,
    OptionalPayload,
    OrchestrationId,
    StepId,
    WorkflowName,
    fit_text,
)

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
    # What a message-only agent's heartbeats and result must carry (``workflow_core.agent_messages``),
    # and the key it dedupes on toward its remote service: ``StepContext.idempotency_key``.
    reply_token: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    idempotency_key: str | None = Field(default=None, max_length=301)


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
    # A message-only agent's reply: the app records it for the agent (``workflow_core.agent_messages``).
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
