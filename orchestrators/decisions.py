"""The scheduler's decisions as small pure functions: no context, no clock, no I/O.

The orchestrator generators only sequence durable calls; everything they decide (what an event
or a ledger check means, when to retry, when to checkpoint) is here, where it is easy to read and
to test without replaying histories.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import azure.durable_functions as df
from pydantic import ValidationError

from workflow_core.contracts import ResultBasis, ResultMessage, ResultVerdict, StepCheck, StepKind
from workflow_core.messages import payload_digest, reply_digest
from workflow_core.workflows import RetryPolicy

# Longest durable timer: a longer wait is a chain of them (docs/scheduler.md, "One step").
MAX_TIMER_SPAN = timedelta(days=3)

# A heartbeat "extension" to a time already past waits at least this long: no spinning on a confused ledger.
MIN_EXTENSION_WAIT = timedelta(seconds=1)

# After a result event the ledger did not back, the ledger is polled this often instead (``_await_outcome``).
UNCONFIRMED_POLL = timedelta(seconds=20)

# Scheduler activities are idempotent: the runtime retries each on a transient failure (docs/scheduler.md).
ACTIVITY_RETRY_FIRST_INTERVAL_MS = 5_000
ACTIVITY_RETRY_MAX_ATTEMPTS = 4


def call_activity(context: Any, name: str, payload: Any) -> Any:
    """``context.call_activity_with_retry`` with the scheduler's infrastructure retry policy."""
    options = df.RetryOptions(ACTIVITY_RETRY_FIRST_INTERVAL_MS, ACTIVITY_RETRY_MAX_ATTEMPTS)
    return context.call_activity_with_retry(name, options, payload)


class ContractViolation(RuntimeError):
    """An activity answered outside its contract; failing loudly beats guessing."""


def as_utc(moment: datetime) -> datetime:
    """Orchestration time as an aware UTC datetime (the host's timestamps are UTC)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def to_iso(moment: datetime) -> str:
    return as_utc(moment).isoformat()


def parse_iso(text: str) -> datetime:
    return as_utc(datetime.fromisoformat(text.replace("Z", "+00:00")))


@dataclass(frozen=True)
class AttemptOutcome:
    """How one attempt ended, whichever way the orchestrator learnt it."""

    succeeded: bool
    output: Any = None
    error: str | None = None
    timed_out: bool = False
    permanent: bool = False  # the ledger says retrying cannot fix this failure: give up at once
    instance: dict[str, Any] | None = None  # the snapshot a confirmed event carried (written against unread)
    basis: dict[str, Any] | None = None  # a success taken unread: the ResultBasis the next write carries


@dataclass(frozen=True)
class Extended:
    """A heartbeat moved the deadline: keep waiting for the same attempt until ``deadline``."""

    deadline: datetime


def claim_of(payload: Any) -> dict[str, Any]:
    """The part of a result event worth auditing (never trusted as the outcome): a few short fields."""
    if not isinstance(payload, dict):
        return {"type": type(payload).__name__}
    return {k: str(payload[k])[:200] for k in ("outcome", "attempt", "step_id", "kind") if k in payload}


def dispatch_token(result: Any) -> str | None:
    """The attempt's ledger token a dispatch activity returned (None when it wrote no attempt)."""
    token = result.get("token") if isinstance(result, dict) else None
    return token if isinstance(token, str) and token else None


def confirmed_outcome(
    event: Any, token: str | None, kind: StepKind, step_id: str, attempt: int, deadline: datetime
) -> AttemptOutcome | None:
    """The outcome an event the result handler confirmed against the ledger carries (saving a read);
    None without this attempt's token or a valid verdict: then the ledger is asked."""
    if token is None or not isinstance(event, dict) or event.get("ledger_token") != token:
        return None
    if (event.get("kind"), event.get("step_id"), event.get("attempt")) != (kind, step_id, attempt):
        return None
    try:
        outcome = interpret_verdict(event.get("verdict"), deadline)
    except ContractViolation:
        return None  # a malformed verdict is no confirmation: ask the ledger
    instance = event.get("instance")
    if outcome is None or not isinstance(instance, dict):
        return outcome
    return dataclasses.replace(outcome, instance=instance)


def provisional_outcome(
    event: Any, kind: StepKind, instance_id: str, step_id: str, attempt: int
) -> AttemptOutcome | None:
    """A work success taken unread (a worker's reply recorded with a basis row): its ``basis`` goes
    with the next ledger write, which lands only if the ledger recorded exactly that reply."""
    if kind != "work" or not isinstance(event, dict) or not isinstance(event.get("ledger"), dict):
        return None
    try:
        reply = ResultMessage.model_validate(event)
    except ValidationError:
        return None
    etag = reply.ledger.etags.get("instance") if reply.ledger is not None else None
    named = (reply.kind, reply.instance_id, reply.step_id, reply.attempt, reply.outcome)
    if not etag or named != (kind, instance_id, step_id, attempt, "succeeded"):
        return None
    output = reply.output or {}
    basis = ResultBasis(
        step_id=step_id, attempt=attempt, digest=reply_digest(reply), output_digest=payload_digest(output)
    )
    snapshot = {**reply.ledger.instance, "etag": etag}
    return AttemptOutcome(True, output=output, instance=snapshot, basis=basis.model_dump())


def interpret_verdict(payload: Any, deadline: datetime) -> AttemptOutcome | None:
    """The outcome the ledger recorded (``verify_result``); None: it does not back the event."""
    try:
        verdict = ResultVerdict.model_validate(payload)
    except ValidationError as exc:
        raise ContractViolation(f"verify activity returned {payload!r}: {exc}") from None
    if verdict.state == "unconfirmed":
        return None
    return _recorded(verdict, deadline)


def _recorded(found: ResultVerdict | StepCheck, deadline: datetime) -> AttemptOutcome:
    """The outcome of a ``succeeded``, ``timed_out`` or ``failed`` answer of the ledger."""
    if found.state == "succeeded":
        return AttemptOutcome(True, output=found.output if found.output is not None else {})
    if found.state == "timed_out":
        return AttemptOutcome(
            False, error=found.error or f"no result by the deadline {to_iso(deadline)}", timed_out=True
        )
    return AttemptOutcome(
        False, error=found.error or "the ledger records a failure without a reason", permanent=found.permanent
    )


# What the scheduler does next after a dispatch activity's ``outcome`` (docs/scheduler.md, "One step"
# (2.)): "basis-refused": nothing was written, ask the ledger about the step taken unread; "waiting"
# (HELD): the agent's circuit or slots held the step back, no attempt was spent.
WAIT, CHECK_NOW, SKIP_ATTEMPT, BASIS_REFUSED, HELD = "wait", "check", "skip", "basis-refused", "held"
_AFTER_DISPATCH = {
    "stale": SKIP_ATTEMPT,
    BASIS_REFUSED: BASIS_REFUSED,
    "waiting": HELD,
    "already-dispatched": CHECK_NOW,
    "settled": CHECK_NOW,
    "not-dispatchable": CHECK_NOW,
}
MAX_STALE_SKIPS = 100  # a ledger cannot be that many attempts ahead; beyond it the answer is a bug


def after_dispatch(result: Any) -> str:
    """The next move (``WAIT`` unless the table says otherwise) for a dispatch activity's result."""
    return _AFTER_DISPATCH.get(result.get("outcome") if isinstance(result, dict) else None, WAIT)


def interpret_check(payload: Any, now: datetime, deadline: datetime) -> AttemptOutcome | Extended:
    """What the ledger says when the deadline timer fired (``check_step``/``check_compensation``)."""
    try:
        check = StepCheck.model_validate(payload)
    except ValidationError as exc:
        raise ContractViolation(f"check activity returned {payload!r}: {exc}") from None
    if check.state != "extended":
        return _recorded(check, deadline)
    if not check.deadline:
        raise ContractViolation("check activity said 'extended' without a new deadline")
    return Extended(max(parse_iso(check.deadline), as_utc(now) + MIN_EXTENSION_WAIT))


def timer_fire_at(now: datetime, deadline: datetime) -> datetime:
    """When the next deadline timer should fire: the deadline, or an intermediate wake-up."""
    return min(as_utc(deadline), as_utc(now) + MAX_TIMER_SPAN)


def retry_at(policy: RetryPolicy, failed_attempt: int, now: datetime, seed: str) -> datetime | None:
    """When to start the next attempt, or ``None`` when ``failed_attempt`` was the last allowed."""
    if failed_attempt >= policy.max_attempts:
        return None
    return as_utc(now) + timedelta(seconds=policy.delay_seconds(failed_attempt, seed))


def should_checkpoint(completed_this_generation: int, every: int, steps_left: int) -> bool:
    """Continue as new after ``every`` steps of this generation, if work is left: history stays bounded."""
    return steps_left > 0 and completed_this_generation >= every


def held_until(result: Any, now: datetime, waiting_since: datetime, budget_seconds: float) -> datetime | None:
    """When to ask a held dispatch again (its ``retry_after``, kept within 1 s .. 1 h), or None when
    the wait budget from ``waiting_since`` is spent (docs/agent-limits.md)."""
    after = result.get("retry_after") if isinstance(result, dict) else None
    seconds = min(max(float(after), 1.0), 3600.0) if isinstance(after, int | float) else 5.0
    end = as_utc(waiting_since) + timedelta(seconds=budget_seconds)
    if as_utc(now) >= end:
        return None
    return min(as_utc(now) + timedelta(seconds=seconds), end)
