"""The scheduler's promises on the instance record, the proof of its provisional successes, and
``settle_instance``.

Every step change moves the instance's ``scheduler_deadline`` in its transaction: a dead scheduler
stops moving it and the watchdog finds the instance (docs/architecture.md, "The instance record").
A provisional success's basis row is deleted by the next write's transaction, or the write reads the
step first (docs/contracts.md, "Trust only the ledger", path 1).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from activities.common import audit, now, retry_on_conflict
from activities.scheduler.inputs import ACTOR
from activities.verification import recorded_outcome
from workflow_core import contracts as c
from workflow_core.contracts import ResultBasis
from workflow_core.ledger import (
    InstanceHandle,
    InstanceRecord,
    InstanceStatus,
    LedgerError,
    StepLedger,
    StepNotFound,
    StepRecord,
    outcome_json,
)
from workflow_core.ledger.known_rows import basis_row_key, known_instance, watched_in
from workflow_core.messages import payload_digest
from workflow_core.runtime import Services

log = logging.getLogger(__name__)

IS = InstanceStatus
BASIS_REFUSED = "basis-refused"


def basis_rows(instance_id: str, basis: ResultBasis | None) -> list[tuple]:
    """The delete of the basis row, for the transaction of a write made on ``basis`` (none without)."""
    if basis is None:
        return []
    return [("delete", {"PartitionKey": instance_id, "RowKey": basis_row_key(basis.step_id, basis.digest)})]


def refused(ledger: StepLedger, instance_id: str, basis: ResultBasis | None, *, by: str) -> str | None:
    """Why the ledger does not back ``basis`` (audited; ``by`` names the write), or None when it does."""
    if basis is None:
        return None
    try:
        record = ledger.get(instance_id, basis.step_id)
    except StepNotFound:
        log.warning("%s of %s: the basis step %r does not exist", by, instance_id, basis.step_id)
        return f"no step {basis.step_id!r} in the ledger"
    found = recorded_outcome(record, "work", basis.attempt)
    if found.state == "succeeded" and payload_digest(found.output or {}) == basis.output_digest:
        return None
    why = f"the scheduler took attempt {basis.attempt} as succeeded, unread; the ledger records " + (
        "another output"
        if found.state == "succeeded"
        else f"{found.state} ({record.status.value} at attempt {record.attempt})"
    )
    log.warning("%s of %s refused: %s", by, instance_id, why)
    audit(ledger, record, ACTOR, "provisional-result-refused", f"{by} not written: {why}", basis.attempt)
    return why


def promise(
    handle: InstanceHandle | None,
    acts_by: datetime,
    grace_seconds: float,
    orchestration_id: str | None,
    *,
    keep_later: bool = False,
) -> dict[str, Any] | None:
    """``instance_changes`` promising the scheduler acts again by ``acts_by`` (+ grace); None when no
    scheduler owns the instance. A parallel-group member (a sibling may wait longer) or ``keep_later``
    never shortens a later promise."""
    if handle is None or not handle.record.supervised:
        return None
    target = acts_by + timedelta(seconds=grace_seconds)
    current = handle.record.scheduler_deadline
    keep = keep_later or c.is_step_instance_id(orchestration_id)
    if keep and current is not None and current > target:
        target = current
    changes: dict[str, Any] = {"scheduler_deadline": target, "stalls": 0}
    if handle.record.owner != ACTOR:
        changes["owner"] = ACTOR
    return changes


def with_promise(
    handle: InstanceHandle | None, acts_by: datetime, grace_seconds: float, orchestration_id: str | None
) -> dict[str, Any]:
    """Keyword arguments for ``ledger.transition``/``update``: the instance and its promise, or none."""
    changes = promise(handle, acts_by, grace_seconds, orchestration_id)
    return {} if changes is None else {"instance": handle, "instance_changes": changes}


def keep_promise(
    ledger: StepLedger,
    handle: InstanceHandle | None,
    acts_by: datetime,
    grace_seconds: float,
    orchestration_id: str | None,
    *,
    reason: str,
) -> None:
    """Move the promise without a step change (a heartbeat-extended wait), only when it must move."""
    changes = promise(handle, acts_by, grace_seconds, orchestration_id)
    current = handle.record.scheduler_deadline if handle is not None else None
    if changes is not None and (current is None or current < changes["scheduler_deadline"]):
        handle.record = ledger.update_instance(handle.record, actor=ACTOR, reason=reason, **changes)


def works_on(handle: InstanceHandle | None) -> bool:
    """May a scheduler still move this instance's work? Once compensation started (or the instance
    settled), a late or zombie scheduler is fenced off."""
    return handle is None or handle.record.status is IS.RUNNING


Outcome = Literal["succeeded", "compensated", "compensation_failed", "failed"]  # InstanceStatus names


class SettleInput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    instance_id: str
    outcome: Outcome
    failed_step: str | None = None
    error: str | None = None
    expected: dict[str, Any] | None = None  # the last result's instance snapshot (_settle_unread)
    basis: ResultBasis | None = None


def settle_instance(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """The workflow (or its compensation) ended: record how, and stop supervising the scheduler.
    Idempotent; CompensationFailed and Failed raise the attention flag."""
    args = SettleInput.model_validate(payload)
    ledger = services.ledger
    target = IS[args.outcome.upper()]

    def decide(
        pair: tuple[InstanceRecord | None, list[StepRecord]], proof: list[tuple] | None = None
    ) -> dict[str, Any]:
        """``proof``: the basis row's delete, written with an unread settle (a read one checked the step)."""
        record, watched = pair
        if record is None:
            return {"instance_id": args.instance_id, "status": None, "changed": False}
        # already so; stopped by an operator (no scheduler's outcome moves it); or compensation
        # started meanwhile (an operator or the watchdog), which decides the outcome
        stopped = record.status is IS.STOPPED or (target is IS.SUCCEEDED and record.status is not IS.RUNNING)
        if record.status is target or stopped:
            return {"instance_id": args.instance_id, "status": record.status.value, "changed": False}
        for step in watched:  # the instance's row is about to go: each gets a row of its own
            ledger.unwatch(
                step,
                actor=ACTOR,
                reason=f"workflow {args.outcome} while the step is {step.status.value}: "
                "watched by a deadline-index row of its own from now on",
            )
        via = record
        if target in (IS.COMPENSATED, IS.COMPENSATION_FAILED) and record.status is not IS.COMPENSATING:
            via = ledger.transition_instance(
                record, IS.COMPENSATING, actor=ACTOR, reason="compensation ran", scheduler_deadline=now()
            )
        attention = target in (IS.COMPENSATION_FAILED, IS.FAILED)
        # A flag raised earlier (the watchdog compensating because resumes ran out) stays raised.
        reason = (args.error or args.outcome)[:1000] if attention else via.attention_reason
        updated = ledger.transition_instance(
            via,
            target,
            with_rows=proof,
            actor=ACTOR,
            reason=f"workflow {args.outcome}" + (f": {args.error}" if args.error else ""),
            outcome=outcome_json(args.outcome, failed_step=args.failed_step, error=args.error),
            completed_at=now(),
            needs_attention=attention or via.needs_attention,
            attention_reason=reason,
            owner=ACTOR,  # the writer: no operator has acted (needs_attention says one should)
        )
        return {"instance_id": args.instance_id, "status": updated.status.value, "changed": True}

    unread = _settle_unread(args, lambda pair: decide(pair, basis_rows(args.instance_id, args.basis)))
    if unread is not None:
        return unread
    if refused(ledger, args.instance_id, args.basis, by="settle") is not None:
        return {"instance_id": args.instance_id, "status": None, "changed": False, "outcome": BASIS_REFUSED}
    read = functools.partial(ledger.instance_and_watched_steps, args.instance_id)
    return retry_on_conflict(read, decide, what=f"settle {args.instance_id}")


def _settle_unread(args: SettleInput, decide: Callable[[Any], dict[str, Any]]) -> dict[str, Any] | None:
    """A success settled unread against the scheduler's snapshot when it watched no in-flight step: no
    step becomes watched without a write to the record, so while it is that version (If-Match) its row
    watches nothing. Only a write counts: anything else returns None and the settle reads."""
    e = args.expected
    if e is None or args.outcome != "succeeded" or watched_in(e) != []:
        return None
    try:
        record = known_instance(e)
        if record.instance_id != args.instance_id or record.status is not IS.RUNNING:
            return None
        done = decide((record, []))
    except (LedgerError, ValueError) as exc:
        log.info("settle of %s reads the ledger: %s", args.instance_id, exc)
        return None
    return done if done.get("changed") else None
