"""How a dispatch moves the ledger row: the decisions of ``dispatch_step`` and ``dispatch_compensation``.

Kept apart from the dispatch's flow (``activities.scheduler.dispatch``: the span, the send and its retries) as
``delivery_decisions`` is from the worker's delivery: these are the rules that make a dispatch safe
to run twice, after a crash or by a resumed scheduler. Each reads only the ledger (or writes against
a version the ledger proves current) and moves the row with an ETag-guarded write.
"""

from __future__ import annotations

import logging
import secrets
from datetime import datetime
from typing import Any, Literal

from activities.common import COMP_DISPATCHED, grace_deadline
from activities.scheduler.basis import basis_rows
from activities.scheduler.inputs import ACTOR, IN_FLIGHT, MAY_COMPENSATE, NEEDS_RETRY_DECISION, S
from activities.scheduler.instances import with_promise, works_on
from workflow_core import tracing
from workflow_core.contracts import StepDispatch
from workflow_core.ledger import InstanceHandle, LedgerError, StepLedger, StepRecord, encode_json
from workflow_core.ledger.known_rows import KnownStepRecord, known_instance
from workflow_core.messages import ClaimableWork

log = logging.getLogger(__name__)

DispatchResult = Literal[
    "dispatched", "already-dispatched", "settled", "stale", "not-dispatchable", "basis-refused"
]


def dispatch_unread(
    ledger: StepLedger,
    d: StepDispatch,
    deadline: datetime,
    grace: float,
    claimable: ClaimableWork | None = None,
) -> tuple[StepRecord, DispatchResult, InstanceHandle] | None:
    """A first work attempt written against the versions the scheduler carried (``d.expected``: the
    step as the starter created it, the instance as the result handler last read it), without
    reading either row: one request less per step on the happy path.

    Only a write counts: the Dispatched transition is If-Match both carried ETags, so it lands only
    if neither row changed since. Anything else (no versions, a lost race, a copy the ledger refuses,
    a decision other than "dispatched", which a copy alone cannot prove) returns None, and the
    dispatch reads the rows as it always did."""
    e = d.expected
    if e is None or d.kind != "work" or d.attempt != 1:
        return None
    try:
        record = KnownStepRecord(
            instance_id=d.instance_id,
            step_id=d.step_id,
            workflow_name=d.workflow,
            workflow_version=e.workflow_version,
            step_name=e.step_name,
            sequence=e.sequence,
            agent=e.agent,
            compensator=e.compensator,
            max_attempts=e.max_attempts,
            heartbeat_timeout_seconds=e.heartbeat_timeout_seconds,
            orchestration_id=d.instance_id,  # as the starter writes it
            etag=e.step_etag,
        )
        handle = InstanceHandle(known_instance(e.instance))
        if handle.record.instance_id != d.instance_id or not works_on(handle, "work"):
            return None
        written, outcome = decide_work_dispatch(
            ledger, record, handle, d, deadline, grace, claimable, also=basis_rows(d.instance_id, d.basis)
        )
    except (LedgerError, ValueError) as exc:  # 412/404 and refused copies alike: read instead
        log.info("dispatch of %s/%s#1 reads the ledger: %s", d.instance_id, d.step_id, exc)
        return None
    return (written, outcome, handle) if outcome == "dispatched" else None


def decide_work_dispatch(
    ledger: StepLedger,
    r: StepRecord,
    handle: InstanceHandle | None,
    d: StepDispatch,
    deadline: datetime,
    grace: float,
    claimable: ClaimableWork | None = None,
    also: list[tuple] | None = None,
) -> tuple[StepRecord, DispatchResult]:
    """``claimable``: the message a worker may claim unread is built with the Dispatched write, and
    its claim-key row written in the same transaction (``workflow_core.messages.ClaimableWork``);
    ``also``: more operations for that transaction (the delete of a basis row,
    ``activities.scheduler.basis``)."""
    if r.attempt == d.attempt and r.status in (IN_FLIGHT | NEEDS_RETRY_DECISION | {S.SUCCEEDED}):
        if r.status in IN_FLIGHT and r.orchestration_id != d.orchestration_id and works_on(handle, "work"):
            # a resumed scheduler takes over an attempt a dead one dispatched: its results go here now
            r = ledger.update(
                r,
                actor=ACTOR,
                reason=f"orchestration {d.orchestration_id} took over attempt {r.attempt} "
                f"from {r.orchestration_id}",
                orchestration_id=d.orchestration_id,
                **with_promise(handle, r.deadline or deadline, grace, d.orchestration_id),
            )
        return r, "already-dispatched"
    if r.status in (S.SUCCEEDED, S.SKIPPED):
        return r, "settled"
    if not works_on(handle, "work"):
        return r, "not-dispatchable"  # the instance is compensating or settled: fenced off
    if r.status in (S.PENDING, S.RETRYING) and d.attempt > r.attempt:
        updated = ledger.transition(
            r,
            S.DISPATCHED,
            actor=ACTOR,
            reason=f"dispatch attempt {d.attempt} to agent {r.agent}",
            owner=f"agent:{r.agent}",
            attempt=d.attempt,
            input_ref=encode_json(d.input),
            with_rows=lambda step, instance: [
                *(claimable.rows(step, instance) if claimable is not None else []),
                *(also or []),
            ],
            **new_attempt(d, handle, deadline, grace),
        )
        return updated, "dispatched"
    if r.attempt >= d.attempt:
        return r, "stale"
    return r, "not-dispatchable"


def new_attempt(
    d: StepDispatch, handle: InstanceHandle | None, deadline: datetime, grace: float
) -> dict[str, Any]:
    """The fields every dispatch (work or compensation) writes with its transition: the attempt's
    deadline, orchestration and token, no watchdog re-send or heartbeat yet, its trace, and the
    scheduler's promise."""
    return {
        "deadline": deadline,
        "orchestration_id": d.orchestration_id,
        "resent_at": None,
        "last_heartbeat": None,
        "attempt_token": secrets.token_hex(16),
        **tracing.ledger_fields(d.trace),
        **with_promise(handle, deadline, grace, d.orchestration_id),
    }


def decide_compensation_dispatch(
    ledger: StepLedger,
    r: StepRecord,
    handle: InstanceHandle | None,
    d: StepDispatch,
    deadline: datetime,
    grace: float,
) -> tuple[StepRecord, DispatchResult]:
    if r.compensation_attempt == d.attempt and r.status in (
        S.COMPENSATING,
        S.COMPENSATED,
        S.COMPENSATION_FAILED,
    ):
        return r, "already-dispatched"
    if r.status is S.COMPENSATED:
        return r, "settled"
    if r.compensator is None:
        return r, "not-dispatchable"
    if r.status in IN_FLIGHT:  # compensation asked for while an attempt is out: stop waiting for it
        r = ledger.transition(
            r,
            S.TIMED_OUT,
            actor=ACTOR,
            reason="compensation requested while an attempt was in flight",
            deadline=grace_deadline(grace),
        )
    if r.status in MAY_COMPENSATE and d.attempt > r.compensation_attempt:
        updated = ledger.transition(
            r,
            S.COMPENSATING,
            actor=ACTOR,
            reason=f"dispatch compensation attempt {d.attempt} to agent {r.compensator}",
            owner=f"agent:{r.compensator}",
            compensation_attempt=d.attempt,
            compensation_status=COMP_DISPATCHED,
            **new_attempt(d, handle, deadline, grace),
        )
        return updated, "dispatched"
    if r.compensation_attempt >= d.attempt:
        return r, "stale"
    return r, "not-dispatchable"


def may_send_again(r: StepRecord, d: StepDispatch) -> bool:
    """Whether a re-run of the dispatch of attempt ``d.attempt`` sends its message again.

    The first run's send is not recorded, so a re-run sends while the attempt still waits for an
    agent and nobody else has re-sent it. As the re-run reads the row:

    | row                                                              | send again?               |
    | ---------------------------------------------------------------- | ------------------------- |
    | work: Dispatched at ``d.attempt``, ``resent_at`` None            | yes, same MessageId       |
    | compensation: Compensating at ``d.attempt``, compensation_status | yes, same MessageId       |
    |   Dispatched, ``resent_at`` None                                 |                           |
    | ``resent_at`` set: the watchdog re-sent the attempt              | no: one re-send is enough |
    | claimed (Running / compensation Running), settled, other attempt | no: an agent has it       |
    """
    if r.resent_at is not None:
        return False
    if d.kind == "work":
        return r.status is S.DISPATCHED and r.attempt == d.attempt
    return (
        r.status is S.COMPENSATING
        and r.compensation_attempt == d.attempt
        and r.compensation_status == COMP_DISPATCHED
    )
