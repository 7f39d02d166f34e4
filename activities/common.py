"""Helpers every Agent-role function body shares: conflict-safe ledger writes, payload parsing, time,
the telemetry of what a write changed. Every ledger write goes through :func:`retry_on_conflict`:
decide from what the ledger says *now*, write with that read's ETag, and on a lost race read and
decide again: the scheduler, many workers and the watchdog may touch one step at once.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import azure.durable_functions as df
from pydantic import BaseModel, ValidationError

from workflow_core import clock, telemetry
from workflow_core.ledger import ConcurrencyConflict, StepRecord, decode_json
from workflow_core.limits import Holder
from workflow_core.message_fields import explain
from workflow_core.transport.envelope import MALFORMED_KEY
from workflow_core.workflows.loader import agent_pools

log = logging.getLogger(__name__)

# The one blueprint every function of the Agent role is registered on (``activities.blueprint``).
bp = df.Blueprint()

R = TypeVar("R")
T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

# Owners that claim a step briefly to inspect it (the supervisor's watchdog, an operator action) and
# hand it back: a worker keeps running through such a claim, and the scheduler does not mistake the
# claim's lease for an agent's heartbeat.
TRANSIENT_CLAIM_PREFIXES = ("supervisor:", "operator:")


def is_transient_claim(owner: str | None) -> bool:
    return owner is not None and owner.startswith(TRANSIENT_CLAIM_PREFIXES)


def retry_on_conflict(
    read: Callable[[], R], decide: Callable[[R], T], *, attempts: int = 10, what: str = "ledger update"
) -> T:
    """``decide(read())``, re-read and re-decided whenever one of ``decide``'s writes loses an ETag
    race; after ``attempts`` the conflict propagates (the trigger retries the message or activity)."""
    for attempt in range(1, attempts + 1):
        current = read()
        try:
            return decide(current)
        except ConcurrencyConflict:
            if attempt == attempts:
                raise
            log.debug("%s lost an ETag race (try %d of %d); re-reading", what, attempt, attempts)
            time.sleep(random.uniform(0, min(0.25, 0.01 * 2**attempt)))
    raise AssertionError("unreachable")  # pragma: no cover


def decide_on_step(ledger: Any, instance_id: str, step_id: str, decide: Callable[[Any], T], what: str) -> T:
    """:func:`retry_on_conflict` on the step and its instance record (one request reads both)."""
    return retry_on_conflict(lambda: ledger.read_step_and_instance(instance_id, step_id), decide, what=what)


def audit(ledger: Any, r: StepRecord, actor: str, action: str, reason: str, attempt: int) -> None:
    """Note on step ``r`` a decision that changed nothing, with the status the step had."""
    status = r.status.value
    ledger.note(
        r.instance_id, r.step_id, actor=actor, action=action, reason=reason, attempt=attempt, status=status
    )


def parse_time(value: str | datetime, what: str = "time") -> datetime:
    """An ISO 8601 timestamp as an aware UTC datetime (naive means UTC, as in ``current_utc_datetime``)."""
    try:
        parsed = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be an ISO 8601 timestamp, got {value!r}") from None
    if parsed.tzinfo is None or parsed.tzinfo.utcoffset(parsed) is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


def now() -> datetime:
    return clock.utcnow()


def grace_deadline(grace_seconds: float, base: datetime | None = None) -> datetime:
    """Deadline of a row that waits for the scheduler (Failed/TimedOut/Retrying): the watchdog acts
    on it only if the scheduler did not move it on within the grace."""
    return (base or now()) + timedelta(seconds=grace_seconds)


def step_input(record: StepRecord) -> dict[str, Any]:
    value = decode_json(record.input_ref)
    return value if isinstance(value, dict) else {} if value is None else {"value": value}


def step_output(record: StepRecord) -> dict[str, Any] | None:
    value = decode_json(record.result_ref)
    return value if value is None or isinstance(value, dict) else {"value": value}


@contextmanager
def never_fails(what: str) -> Iterator[None]:
    """Telemetry must never fail the work it describes: log what went wrong and carry on."""
    try:
        yield
    except Exception:
        log.exception("could not record %s", what)


def emit_recovery(
    record: StepRecord, action: str, *, attempt: int | None = None, outcome: str | None = None, **attrs: Any
) -> None:
    """Report a recovery action (``sas.recoveries``, custom event ``sas.recovery``); only the run
    that actually changed the ledger calls it, so a re-run does not count twice."""
    ids, workflow = (record.instance_id, record.step_id), record.workflow_name
    with never_fails(f"recovery telemetry for {action}"):
        if action == "finish_compensation":
            attempt = record.compensation_attempt if attempt is None else attempt
            telemetry.record_compensation_failed(*ids, attempt, workflow=workflow, **attrs)
            return
        attempt = record.attempt if attempt is None else attempt
        telemetry.record_recovery(
            *ids, attempt, action, outcome or telemetry.OUTCOME_OK, workflow=workflow, **attrs
        )


def park(
    services: Any, *, source: str, reason: str, body: Any, actor: str, message_id: str | None = None
) -> str:
    """Park a message no agent can process (``ledger.parking``), note it on its step when that exists,
    and return the readable reason. Raises only if the ledger is unreachable."""
    from workflow_core.ledger import InvalidLedgerInput, StepNotFound
    from workflow_core.ledger.parking import park_message

    row = park_message(services.ledger, source=source, reason=reason, body=body, message_id=message_id)
    log.warning("parked a %s message (%s): %s", source, row.key, row.reason)
    fields = body if isinstance(body, dict) else {}
    instance_id, step_id, attempt = fields.get("instance_id"), fields.get("step_id"), fields.get("attempt")
    try:
        services.ledger.get(instance_id, step_id)
    except (InvalidLedgerInput, StepNotFound):
        return row.reason  # nothing identifiable to mark
    why = f"{source} message parked ({row.key}): {row.reason}"
    attempt = attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else None
    services.ledger.note(
        instance_id, step_id, actor=actor, action="message-parked", reason=why, attempt=attempt
    )
    return row.reason


def parse_or_park(
    model: type[M],
    body: Any,
    services: Any,
    *,
    source: str,
    actor: str,
    message_id: str | None,
    note: str = "",
) -> M | str:
    """``body`` as a ``model`` message, or, when it is none, the reason it was parked with: a body no
    agent can process is never raised on (a redelivery could not fix it)."""
    if isinstance(body, dict) and isinstance(body.get(MALFORMED_KEY), str):  # bounded_json refused it
        why = f"malformed JSON: {body[MALFORMED_KEY]}"
    else:
        try:
            return model.model_validate(body)
        except (ValidationError, RecursionError) as exc:
            why = explain(exc) if isinstance(exc, ValidationError) else "nested too deeply"
    reason = f"not a valid {model.__name__.removesuffix('Message').lower()} message: {why}{note}"
    return park(services, source=source, reason=reason, body=body, actor=actor, message_id=message_id)


# The step metrics take the rows the caller already read or wrote (no extra request); only the run
# that changed the ledger calls them, so a redelivery does not count twice.
def queue_wait(before_claim: StepRecord, started_at: datetime) -> None:
    """An agent claimed a Dispatched attempt: ``sas.step.queue_wait.duration`` (dispatch to start)."""
    r = before_claim
    with never_fails(f"the queue wait of {r.step_id}"):
        if (sent := r.sent_at()) is not None:
            telemetry.record_dispatch_started(
                r.workflow_name, r.step_id, dispatched_at=sent, started_at=started_at
            )


def attempt_finished(
    record: StepRecord,
    *,
    outcome: str,
    started_at: datetime | None,
    ended_at: datetime,
    error_type: str | None = None,
    final: bool = False,
) -> None:
    """An attempt ended (``succeeded``/``failed``/``timed_out``): ``sas.step.duration`` from
    ``started_at`` (the claim, or the dispatch for a timeout) and, when ``final``, ``sas.step.attempts``."""
    attempts = record.attempt if final else None
    with never_fails(f"the outcome of {record.step_id}"):
        duration = None if started_at is None else (ended_at - started_at).total_seconds()
        telemetry.record_step_finished(
            record.workflow_name,
            record.step_id,
            outcome,
            duration_s=duration,
            attempts=attempts,
            error_type=error_type,
        )


def observe_outcome(
    services: Any, agent: str, holder: Holder, *, ok: bool, error: str | None, permanent: bool
) -> None:
    """A recorded outcome (the ledger's, not a message's) frees the agent's slot, and counts for its
    circuit: a success resets it, a retryable failure counts (a non-retryable one says nothing about
    the service's health). Never undoes the recording: the watchdog and the next dispatch catch up."""
    limits = agent_pools().limits_of(agent)
    if limits is None:
        return
    try:
        if limits.max_in_flight is not None:
            services.limits.release(agent, holder)
        if limits.circuit is not None and (ok or not permanent):
            services.circuits.record_outcome(agent, limits.circuit, ok=ok, error=error)
    except Exception as exc:  # the outcome is recorded; limits catch up on their own
        log.warning("limits of %s not updated after %s: %s", agent, holder.key, exc)


def error_type_of(error: str | None) -> str | None:
    """The exception class name at the head of an error text (``"ValueError: ..."``), for
    ``error.type``; None when the text does not start with one."""
    head = (error or "").split(":", 1)[0].strip()
    return head if head.isidentifier() else None
