"""Operator intents: what a human may ask of a stalled workflow, written to the ledger as intent.

The operator CLI (``sas``) has no Durable Functions client: every mutating command moves the step or
instance record (ETag-guarded, audited as ``operator:<user>`` with the reason) and, where something
must happen next, makes it due *now* for the watchdog to enact (docs/supervisor.md, "Operator intents
and the CLI"). A stop or cancel writes its audit row *before* the caller ends the orchestration.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from supervisor.watchdog_model import COMP_FAILED, OPERATOR_PREFIX
from workflow_core import clock
from workflow_core.ledger import (
    ALLOWED_TRANSITIONS,
    AuditEntry,
    ConcurrencyConflict,
    IllegalTransition,
    InstanceNotFound,
    InstanceRecord,
    InstanceStatus,
    InvalidLedgerInput,
    StepLedger,
    StepNotFound,
    StepRecord,
    StepStatus,
)
from workflow_core.ledger.model import require_aware

S = StepStatus
MAX_RACE_RETRIES = 5


class OperatorError(Exception):
    """An operator request cannot be carried out; the message says why and what is possible."""


class UnknownInstance(OperatorError):
    def __init__(self, instance_id: str) -> None:
        super().__init__(f"no workflow instance {instance_id!r} in the ledger")


class UnknownStep(OperatorError):
    def __init__(self, instance_id: str, step_id: str, known: list[str]) -> None:
        super().__init__(
            f"workflow instance {instance_id!r} has no step {step_id!r}; its steps: {', '.join(known)}"
        )
        self.known = known


class IllegalMove(OperatorError):
    def __init__(self, intent: str, record: StepRecord, accepted: list[StepStatus]) -> None:
        self.status = record.status
        self.allowed_moves = allowed_moves(record.status)
        moves = "; ".join(self.allowed_moves) if self.allowed_moves else "none (terminal status)"
        super().__init__(
            f"cannot {intent} step {record.step_id!r} of {record.instance_id!r}: "
            f"it is {record.status.value}, "
            f"and {intent} applies only to {', '.join(s.value for s in accepted)}. "
            f"Allowed moves from {record.status.value}: {moves}"
        )


def allowed_moves(status: StepStatus) -> list[str]:
    """Every legal move from ``status``, each with the CLI command that makes it (or who does)."""
    targets = sorted(ALLOWED_TRANSITIONS[status], key=lambda s: s.value)
    return [f"{t.value} ({_COMMAND_FOR_MOVE.get((status, t), 'automation only')})" for t in targets]


@dataclass(frozen=True)
class Intent:
    """One operator command: which statuses it accepts and where it moves each of them."""

    name: str
    targets: dict[StepStatus, StepStatus]
    sets_deadline: bool  # True: due now, so the watchdog enacts it on its next tick

    def target_for(self, record: StepRecord) -> StepStatus:
        if record.status not in self.targets:
            raise IllegalMove(self.name, record, list(self.targets))
        return self.targets[record.status]


RETRY = Intent(
    "retry",
    {S.FAILED: S.RETRYING, S.TIMED_OUT: S.RETRYING, S.COMPENSATION_FAILED: S.COMPENSATING},
    sets_deadline=True,
)
SKIP = Intent(
    "skip",
    {s: S.SKIPPED for s in StepStatus if S.SKIPPED in ALLOWED_TRANSITIONS[s]},
    sets_deadline=False,
)
COMPENSATE = Intent(
    "compensate",
    {S.SUCCEEDED: S.COMPENSATING, S.FAILED: S.COMPENSATING, S.TIMED_OUT: S.COMPENSATING},
    sets_deadline=True,
)
INTENTS = {i.name: i for i in (RETRY, SKIP, COMPENSATE)}
# Which operator command performs which move (from, to); other moves belong to the automation.
_COMMAND_FOR_MOVE = {(frm, to): i.name for i in INTENTS.values() for frm, to in i.targets.items()}


@dataclass(frozen=True)
class StalledReport:
    now: datetime
    overdue: list[StepRecord]  # past their deadline: the watchdog acts on these
    attention: list[StepRecord]  # no automation will move them on (CompensationFailed)
    # flagged instances (a stop, a spent budget, a failure no repetition fixes): waiting for an operator
    flagged: list[InstanceRecord] = field(default_factory=list)


@dataclass(frozen=True)
class Timeline:
    instance_id: str
    steps: list[StepRecord]
    audit: list[AuditEntry]


def actor_for(user: str) -> str:
    user = (user or "").strip()
    if not user:
        raise OperatorError("an operator user name is required (it is recorded in the audit trail)")
    return f"{OPERATOR_PREFIX}{user}"


def list_stalled(ledger: StepLedger, *, now: datetime | None = None, limit: int = 100) -> StalledReport:
    """Steps overdue now (from the deadline index), steps waiting for an operator, and the instances
    flagged for one (the attention inbox's instances)."""
    now = require_aware(now, "now") if now is not None else clock.utcnow()
    assert now is not None
    flagged, _ = ledger.list_instances(needs_attention=True, limit=limit)
    return StalledReport(
        now, ledger.overdue(now, limit=limit), ledger.needing_attention(limit=limit), flagged
    )


def timeline(ledger: StepLedger, instance_id: str) -> Timeline:
    """The instance's steps (workflow order) and every recorded move (oldest first)."""
    steps = _instance_steps(ledger, instance_id)
    return Timeline(instance_id, steps, ledger.audit_trail(instance_id))


def _instance_steps(ledger: StepLedger, instance_id: str) -> list[StepRecord]:
    try:
        steps = ledger.list_for_instance(instance_id)
    except InvalidLedgerInput as exc:
        raise OperatorError(str(exc)) from None
    if not steps:
        raise UnknownInstance(instance_id)
    return steps


def get_step(ledger: StepLedger, instance_id: str, step_id: str) -> StepRecord:
    """The step, or :class:`UnknownInstance` / :class:`UnknownStep` naming what exists."""
    try:
        return ledger.get(instance_id, step_id)
    except InvalidLedgerInput as exc:
        raise OperatorError(str(exc)) from None
    except StepNotFound:
        steps = _instance_steps(ledger, instance_id)
        raise UnknownStep(instance_id, step_id, [s.step_id for s in steps]) from None


def preview(ledger: StepLedger, intent: str, instance_id: str, step_id: str) -> tuple[StepRecord, StepStatus]:
    """What ``intent`` would do to the step now (for a confirmation prompt); raises like the intent."""
    record = get_step(ledger, instance_id, step_id)
    return record, INTENTS[intent].target_for(record)


def apply_intent(
    intent: Intent,
    ledger: StepLedger,
    instance_id: str,
    step_id: str,
    *,
    user: str,
    reason: str,
    now: datetime | None = None,
    expect: Callable[[StepRecord], None] | None = None,
) -> StepRecord:
    """Move the step as ``intent`` says, audited as ``operator:<user>``; ``expect`` may refuse the
    step as read (it changed since the operator saw it). A lost race re-reads and re-checks."""
    actor = actor_for(user)
    reason = required_reason(reason)
    for _ in range(MAX_RACE_RETRIES):
        record = get_step(ledger, instance_id, step_id)
        if expect is not None:
            expect(record)
        target = intent.target_for(record)
        changes: dict = {"owner": actor}
        if intent is RETRY and record.status is S.COMPENSATION_FAILED:
            # The last compensation attempt failed: say so, so that a compensation run that reaches
            # this attempt (``check_compensation``) moves on to the next one at once.
            changes["compensation_status"] = COMP_FAILED
        if intent.sets_deadline:
            when = require_aware(now, "now") if now is not None else clock.utcnow()
            changes["deadline"] = when
        try:
            return ledger.transition(
                record, target, actor=actor, reason=f"operator {intent.name}: {reason}", **changes
            )
        except ConcurrencyConflict:
            continue  # someone moved it meanwhile: re-read and re-check the move
        except IllegalTransition as exc:
            raise OperatorError(str(exc)) from None
    raise OperatorError(
        f"step {step_id!r} of {instance_id!r} keeps changing under us ({MAX_RACE_RETRIES} attempts); "
        "look at its timeline and try again"
    )


# The three step intents (see the module docstring for what each asks of the watchdog).
retry_step = functools.partial(apply_intent, RETRY)
skip_step = functools.partial(apply_intent, SKIP)
request_compensation = functools.partial(apply_intent, COMPENSATE)


# ---- instances -----------------------------------------------------------------------------------

# Where each instance action moves the record, from which statuses. Resume from Running: the scheduler
# is stranded (or the operator believes so): the watchdog resumes it now if its orchestration is gone,
# whatever the workflow's policy and resume count say; from Failed: the instance gave up, it runs again.
INSTANCE_MOVES: dict[str, dict[InstanceStatus, InstanceStatus]] = {
    "resume": {
        InstanceStatus.RUNNING: InstanceStatus.RUNNING,
        InstanceStatus.FAILED: InstanceStatus.RUNNING,
    },
    "stop": {
        InstanceStatus.RUNNING: InstanceStatus.STOPPED,
        InstanceStatus.FAILED: InstanceStatus.STOPPED,
    },
    "cancel": {
        InstanceStatus.RUNNING: InstanceStatus.COMPENSATING,
        InstanceStatus.FAILED: InstanceStatus.COMPENSATING,
        InstanceStatus.STOPPED: InstanceStatus.COMPENSATING,
    },
}
RESUMABLE_INSTANCE_STATUSES = INSTANCE_MOVES["resume"]
_DONE = {"resume": "resumed", "stop": "stopped", "cancel": "cancelled"}


def required_reason(reason: str | None) -> str:
    """The operator's reason, stripped; every move records one in the audit trail."""
    reason = (reason or "").strip()
    if not reason:
        raise OperatorError("a reason is required (it is recorded in the audit trail)")
    return reason


def move_instance(
    ledger: StepLedger,
    instance_id: str,
    action: str,
    *,
    reason: str,
    user: str | None = None,
    actor: str | None = None,
    expected_status: str | None = None,
    now: datetime | None = None,
) -> InstanceRecord:
    """Resume, stop or cancel the instance: its record and audit row in one ETag-guarded write (a lost
    race re-reads and decides again). Resume and cancel set the scheduler deadline to now, for the
    watchdog; ``expected_status`` is the status the operator saw: a record that moved since is refused."""
    table = INSTANCE_MOVES[action]
    who = actor or actor_for(user or "")
    reason = required_reason(reason)
    when = require_aware(now, "now") if now is not None else clock.utcnow()
    for _ in range(MAX_RACE_RETRIES):
        try:
            record = ledger.get_instance(instance_id)
        except InstanceNotFound:
            raise UnknownInstance(instance_id) from None
        except InvalidLedgerInput as exc:
            raise OperatorError(str(exc)) from None
        if expected_status and record.status.value != expected_status:
            raise OperatorError(
                f"instance {instance_id!r} is {record.status.value} now, not {expected_status} as expected"
            )
        target = table.get(record.status)
        if target is None:
            allowed = ", ".join(s.value for s in table)
            hint = (
                " (retry its CompensationFailed step instead)"
                if action == "resume" and record.status.value == "CompensationFailed"
                else ""
            )
            raise OperatorError(
                f"instance {instance_id!r} is {record.status.value}; "
                f"only {allowed} instances can be {_DONE[action]}{hint}"
            )
        changes: dict = {"needs_attention": False, "attention_reason": None, "scheduler_deadline": when}
        if target is InstanceStatus.STOPPED:  # its done steps stay: flagged until a cancel undoes them
            flag = f"stopped by {who}: {reason}; its done steps stay as they are until an operator cancels it"
            changes = {"needs_attention": True, "attention_reason": flag}
        try:
            return ledger.transition_instance(
                record, target, actor=who, reason=f"operator {action}: {reason}", owner=who, **changes
            )
        except ConcurrencyConflict:
            continue
    raise OperatorError(
        f"instance {instance_id!r} keeps changing under us; look at its timeline and try again"
    )


resume_instance = functools.partial(move_instance, action="resume")
