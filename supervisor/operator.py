"""Operator intents: what a human may ask of a stalled workflow, written to the ledger as intent.

Every mutating command moves the step or instance record (ETag-guarded, audited as ``operator:<user>``
with the reason) and, where something must happen next, makes it due *now* for the watchdog to enact
(docs/supervisor.md, "Operator intents and the CLI"). A stop or cancel writes its audit row *before*
the caller ends the orchestration.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from supervisor.watchdog_model import OPERATOR_PREFIX
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
    instance_state,
)
from workflow_core.ledger.instance import PURGEABLE_INSTANCE_STATUSES as PURGEABLE
from workflow_core.ledger.instance_state import instance_guard
from workflow_core.ledger.model import COMP_FAILED, require_aware

S = StepStatus
MAX_RACE_RETRIES = 5


class OperatorError(Exception):
    """An operator request cannot be carried out (the message says why); ``code``: the API's 409 code."""

    code = "changed-meanwhile"


class Refused(OperatorError):
    """The instance state refuses the action (``instance_state``): ``code`` says why."""

    def __init__(self, refused: instance_state.InstanceRefused) -> None:
        super().__init__(refused.reason)
        self.code = refused.code  # type: ignore[misc]


class NothingToCompensate(OperatorError):
    code = "nothing-to-compensate"


class Changed(OperatorError):
    """The instance changed since the caller checked it (a bulk runner re-checks it)."""

    def __init__(self, instance_id: str) -> None:
        super().__init__(f"instance {instance_id!r} changed since it was checked")


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
    return OPERATOR_PREFIX + required_reason(user, "an operator user name")


def list_stalled(ledger: StepLedger, *, now: datetime | None = None, limit: int = 100) -> StalledReport:
    """Steps overdue now, steps waiting for an operator, and the instances flagged for one."""
    now = require_aware(now, "now") or clock.utcnow()
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


def preview(ledger: StepLedger, intent: str, instance_id: str, step_id: str) -> tuple[StepRecord, StepStatus]:
    """What ``intent`` would do to the step now (for a confirmation prompt); raises like the intent."""
    record, handle = _step_and_instance(ledger, instance_id, step_id)
    if handle is not None:
        _check(intent, handle.record)
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
    instance: InstanceRecord | None = None,
    step: StepRecord | None = None,
) -> StepRecord:
    """Move the step as ``intent`` says, audited as ``operator:<user>``, once ``instance_state`` and
    ``expect`` (the step as the operator saw it) allow it; a lost race re-reads and re-checks. With
    ``instance`` (and ``step``: as a bulk runner read and checked them, not read again) the write is
    conditional on that version (else :class:`Changed`)."""
    actor = actor_for(user)
    reason = required_reason(reason)
    for _ in range(MAX_RACE_RETRIES):
        if instance is not None and step is not None:
            record, current = step, instance
        else:
            record, handle = _step_and_instance(ledger, instance_id, step_id)
            current = handle.record if handle is not None else None
        if instance is not None and (current is None or current.etag != instance.etag):
            raise Changed(instance_id)
        if current is not None:
            _check(intent.name, current)
        if expect is not None:
            expect(record)
        target = intent.target_for(record)
        changes: dict = {"owner": actor}
        if intent is RETRY and record.status is S.COMPENSATION_FAILED:
            # so a compensation run that reaches this attempt (``check_compensation``) moves on at once
            changes["compensation_status"] = COMP_FAILED
        if intent.sets_deadline:
            changes["deadline"] = require_aware(now, "now") or clock.utcnow()
        # on a finished instance (or as checked by a bulk runner) the write carries the record's ETag
        guarded = current is not None and (instance is not None or current.status in PURGEABLE)
        guard = [instance_guard(current)] if guarded and current is not None else None
        try:
            return ledger.transition(
                record,
                target,
                actor=actor,
                reason=f"operator {intent.name}: {reason}",
                with_rows=(lambda *_, rows=guard: rows) if guard else None,
                **changes,
            )
        except ConcurrencyConflict:
            if instance is not None:
                raise Changed(instance_id) from None
            continue  # someone moved it meanwhile: re-read and re-check the move
        except IllegalTransition as exc:
            raise OperatorError(str(exc)) from None
    raise OperatorError(
        f"step {step_id!r} of {instance_id!r} keeps changing under us ({MAX_RACE_RETRIES} attempts); "
        "look at its timeline and try again"
    )


def _step_and_instance(ledger: StepLedger, instance_id: str, step_id: str):
    """The step and its instance record, or :class:`UnknownStep` naming the instance's steps."""
    try:
        return ledger.read_step_and_instance(instance_id, step_id)
    except InvalidLedgerInput as exc:
        raise OperatorError(str(exc)) from None
    except StepNotFound:
        steps = _instance_steps(ledger, instance_id)
        raise UnknownStep(instance_id, step_id, [s.step_id for s in steps]) from None


def _check(action: str, record: InstanceRecord, steps=()) -> None:
    try:
        instance_state.check(action, record, steps)
    except instance_state.InstanceRefused as exc:
        raise Refused(exc) from None


def compensation_target(ledger: StepLedger, instance_id: str) -> str:
    """The step whose move to Compensating asks for the instance's compensation: a failed one, else
    the last completed one; the instance state decides first."""
    steps = _instance_steps(ledger, instance_id)
    record = ledger.find_instance(instance_id)
    if record is not None:
        _check(instance_state.Action.COMPENSATE, record, steps)
    return compensation_target_of(instance_id, steps)


def compensation_target_of(instance_id: str, steps: list[StepRecord]) -> str:
    """:func:`compensation_target` of the steps as read."""
    asked = [s for s in steps if s.status is S.COMPENSATING]
    if asked:
        raise OperatorError(
            f"compensation of {instance_id!r} is already asked for: step {asked[0].step_id} is Compensating"
        )
    failed = [s for s in steps if s.status in (S.FAILED, S.TIMED_OUT)]
    done = [s for s in steps if s.status is S.SUCCEEDED]
    target = (failed or done[-1:] or [None])[0]
    if target is None:
        statuses = ", ".join(f"{s.step_id} {s.status.value}" for s in steps)
        raise NothingToCompensate(
            f"nothing to compensate in {instance_id!r}: no step is Succeeded, Failed or TimedOut ({statuses})"
        )
    return target.step_id


retry_step = functools.partial(apply_intent, RETRY)
skip_step = functools.partial(apply_intent, SKIP)
request_compensation = functools.partial(apply_intent, COMPENSATE)


def required_reason(reason: str | None, what: str = "a reason") -> str:
    """The operator's reason (or ``what``), stripped; every move records it in the audit trail."""
    reason = (reason or "").strip()
    if not reason:
        raise OperatorError(f"{what} is required (it is recorded in the audit trail)")
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
    instance: InstanceRecord | None = None,
) -> InstanceRecord:
    """Resume, stop or cancel the instance: record and audit row in one ETag-guarded write (a lost race
    decides again); resume and cancel make it due now for the watchdog. ``expected_status``: as the
    operator saw it (refused if moved); ``instance``: as a bulk runner checked it (else :class:`Changed`)."""
    table = instance_state.INSTANCE_MOVES[instance_state.Action(action)]
    who = actor or actor_for(user or "")
    reason = required_reason(reason)
    when = require_aware(now, "now") or clock.utcnow()
    for _ in range(MAX_RACE_RETRIES):
        try:
            record = instance or ledger.get_instance(instance_id)
        except InstanceNotFound:
            raise UnknownInstance(instance_id) from None
        except InvalidLedgerInput as exc:
            raise OperatorError(str(exc)) from None
        if expected_status and record.status.value != expected_status:
            raise OperatorError(
                f"instance {instance_id!r} is {record.status.value} now, not {expected_status} as expected"
            )
        _check(action, record)
        target = table[record.status]
        changes: dict = {"needs_attention": False, "attention_reason": None, "scheduler_deadline": when}
        if target is InstanceStatus.STOPPED:  # its done steps stay: flagged until a cancel undoes them
            flag = f"stopped by {who}: {reason}; its done steps stay as they are until an operator cancels it"
            changes = {"needs_attention": True, "attention_reason": flag}
        try:
            return ledger.transition_instance(
                record, target, actor=who, reason=f"operator {action}: {reason}", owner=who, **changes
            )
        except ConcurrencyConflict:
            if instance is not None:
                raise Changed(instance_id) from None
            continue
    raise OperatorError(
        f"instance {instance_id!r} keeps changing under us; look at its timeline and try again"
    )


resume_instance = functools.partial(move_instance, action="resume")
