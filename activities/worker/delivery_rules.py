"""The agent worker's decisions for one delivery (``delivery``): claim it or not, how to record it.

The idempotency rules (docs/agents.md, "The worker: claim and idempotency rules"): each reads only
the row and the message and writes ETag-guarded, so a redelivered, duplicated, late or forged message
never runs a step twice, runs the wrong agent or input, or overwrites a newer attempt.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from activities.common import (
    attempt_finished,
    error_type_of,
    grace_deadline,
    never_fails,
    now,
    queue_wait,
    step_input,
    step_output,
)
from workflow_core import telemetry
from workflow_core.contracts import ResultMessage, WorkMessage
from workflow_core.ledger import InstanceHandle, StepLedger, StepRecord, StepStatus, encode_json
from workflow_core.ledger.model import COMP_DONE, COMP_FAILED, COMP_RUNNING
from workflow_core.messages import KeyedReply
from workflow_core.payloads import as_stored, is_reference
from workflow_core.runtime import Services

S = StepStatus


# (ok, output, error, non_retryable): how the handler's run ended
Outcome = tuple[bool, dict[str, Any] | None, str | None, bool]


class Action(StrEnum):
    """Run the handler, re-send the recorded reply, or nothing (a stale, duplicate or settled delivery)."""

    RUN = "run"
    RESEND = "resend"
    IGNORE = "ignore"


class DeliveryDecisions:
    """A delivery's state and the rules of :class:`activities.worker.delivery.Delivery`."""

    def __init__(self, message: WorkMessage, delivery_count: int, services: Services, worker_id: str) -> None:
        self.m = message
        self.n = max(1, int(delivery_count))
        self.services = services
        self.ledger: StepLedger = services.ledger
        self.worker_id = worker_id
        self.work = message.kind == "work"
        self.grace = services.settings.watchdog_grace_seconds
        self.took_over = False
        self.started_at: datetime | None = None  # when this delivery claimed the attempt (metrics)
        self.instance: InstanceHandle | None = None  # the instance record as last read or written
        # the in-flight steps the instance's row may watch once this step is recorded, when known
        self.watched_after: list[str] | None = None
        self.latest: StepRecord | None = None  # the step row as this worker last wrote it

    def _decide_claim(self, r: StepRecord) -> tuple[Action, StepRecord, tuple[str, str] | None]:
        if (mismatch := self._disagrees_with(r)) is not None:
            return Action.IGNORE, r, ("message-mismatch-ignored", mismatch)
        return self._claim_work(r) if self.work else self._claim_compensation(r)

    def _disagrees_with(self, r: StepRecord) -> str | None:
        """Why the message is not the one the ledger sent for its attempt, or None: the handler is
        chosen by the message's agent and given its input, so both are checked against the row before
        anything runs (another attempt's message is stale whatever it says)."""
        m = self.m
        attempt = r.attempt if self.work else r.compensation_attempt
        if attempt != m.attempt:
            return None
        agent = r.agent if self.work else r.compensator
        if m.agent != agent:
            return f"message names agent {m.agent!r}; the ledger's {m.kind} agent is {agent!r}"
        expected = step_input(r) if self.work else {"input": step_input(r), "output": step_output(r)}
        if m.input != as_stored(expected):  # a large compensation input travels as one reference
            return f"message's input differs from the input the ledger recorded for attempt {attempt}"
        return None

    def _claim_work(self, r: StepRecord) -> tuple[Action, StepRecord, tuple[str, str] | None]:
        a = self.m.attempt
        if r.attempt != a:
            why = f"message is for attempt {a}; the ledger is at attempt {r.attempt} ({r.status.value})"
            return Action.IGNORE, r, ("stale-attempt-ignored", why)
        if r.status is S.DISPATCHED:
            return Action.RUN, self._claim_dispatched(r), None
        if r.status is S.RUNNING:
            if self.n > 1:
                self.started_at = now()
                return self._take_over(r, "")
            why = f"attempt {a} is already Running (owner {r.owner}); this is a duplicate copy"
            return Action.IGNORE, r, ("duplicate-delivery-ignored", why)
        if r.status in (S.SUCCEEDED, S.FAILED):
            return (
                Action.RESEND,
                r,
                ("result-resent", f"attempt {a} is already {r.status.value}; reply re-sent"),
            )
        return Action.IGNORE, r, ("settled-step-ignored", f"step is {r.status.value}; nothing to do")

    def _claim_compensation(self, r: StepRecord) -> tuple[Action, StepRecord, tuple[str, str] | None]:
        a = self.m.attempt
        if r.compensation_attempt != a or r.status not in (S.COMPENSATING, S.COMPENSATED):
            why = (
                f"message is for compensation attempt {a}; the ledger is at compensation attempt "
                f"{r.compensation_attempt} ({r.status.value})"
            )
            return Action.IGNORE, r, ("stale-attempt-ignored", why)
        if r.status is S.COMPENSATED or r.compensation_status == COMP_FAILED:
            done = "done" if r.status is S.COMPENSATED else "failed"
            return (
                Action.RESEND,
                r,
                ("result-resent", f"compensation attempt {a} already {done}; reply re-sent"),
            )
        if r.compensation_status == COMP_RUNNING:
            if self.n > 1:
                return self._take_over(r, "compensation ")
            why = f"compensation attempt {a} is already running (owner {r.owner}); this is a duplicate copy"
            return Action.IGNORE, r, ("duplicate-delivery-ignored", why)
        reason = f"compensation claimed (delivery {self.n})"
        claimed = self.ledger.update(
            r, actor=self.worker_id, reason=reason, owner=self.worker_id, compensation_status=COMP_RUNNING
        )
        return Action.RUN, claimed, None

    def _claim_dispatched(self, r: StepRecord, with_rows: Any = None) -> StepRecord:
        """Dispatched -> Running, owned by this worker (``with_rows``: more of the claim's transaction)."""
        reason = f"claimed (delivery {self.n})"
        claimed = self.ledger.transition(
            r, S.RUNNING, actor=self.worker_id, reason=reason, owner=self.worker_id, with_rows=with_rows
        )
        self.started_at = now()
        queue_wait(r, self.started_at)
        return claimed

    def _take_over(self, r: StepRecord, what: str) -> tuple[Action, StepRecord, None]:
        """A redelivery of an attempt another worker claimed: that worker is presumed dead."""
        reason = f"took over {what}from {r.owner} after redelivery (delivery {self.n})"
        self.took_over = True
        claimed = self.ledger.update(r, actor=self.worker_id, reason=reason, owner=self.worker_id)
        return Action.RUN, claimed, None

    def _decide_record(
        self, r: StepRecord, outcome: Outcome
    ) -> tuple[ResultMessage | None, tuple[str, str] | None]:
        ok, output, error, permanent = outcome
        a, work = self.m.attempt, self.work
        if (r.attempt if work else r.compensation_attempt) != a:
            at = f"attempt {r.attempt}" if work else f"compensation attempt {r.compensation_attempt}"
            return None, ("late-result-discarded", f"ledger moved on to {at} ({r.status.value})")
        who = "agent" if work else "compensator"
        failure = {
            "actor": self.worker_id,
            "reason": f"{who} failed{' (non-retryable)' if permanent else ''}: {error}",
            "last_error": error,
            "non_retryable": permanent,
            "deadline": grace_deadline(self.grace),
        }
        late = f"step is {r.status.value}; this {'attempt' if work else 'compensation'}"
        if work and r.status is S.RUNNING:
            reply = ResultMessage.answering(self.m, ok=ok, output=output, error=error, permanent=permanent)
            if ok:
                # With the instance record in the same transaction: the completion takes the
                # instance's next completion number, which orders compensation (no clocks).
                # A scheduler that takes the success unread gets a reply keyed by a basis row.
                keyed = self._keyed(reply)
                self.ledger.transition(
                    r,
                    S.SUCCEEDED,
                    actor=self.worker_id,
                    reason="agent succeeded",
                    result_ref=encode_json(output),
                    instance=self.instance,
                    with_rows=keyed.rows if keyed is not None else None,
                )
                if keyed is not None:
                    reply = keyed.reply(self.instance.record if self.instance is not None else None)
            else:
                self.ledger.transition(r, S.FAILED, **failure)
            attempt_finished(
                r,
                outcome=telemetry.STEP_SUCCEEDED if ok else telemetry.STEP_FAILED,
                started_at=self.started_at,
                ended_at=now(),
                error_type=None if ok else error_type_of(error),
                final=ok or permanent or r.attempt >= r.max_attempts,
            )
            return reply, None
        if work:
            if r.status in (S.SUCCEEDED, S.FAILED):
                why = f"attempt {a} was already recorded {r.status.value} by {r.owner}"
                return None, ("duplicate-result-discarded", why)
            return None, ("late-result-discarded", f"{late}'s result is too late")
        if r.status is S.COMPENSATING and ok:
            self.ledger.transition(
                r,
                S.COMPENSATED,
                actor=self.worker_id,
                reason="compensator succeeded",
                compensation_status=COMP_DONE,
                completed_at=r.completed_at,  # keep when the step's own work completed
            )
            with never_fails(f"the compensation of {r.step_id}"):  # sas.compensations: compensated
                telemetry.record_compensation_finished(r.workflow_name)
            return ResultMessage.answering(self.m, ok=True, output=output), None
        if r.status is S.COMPENSATING and r.compensation_status != COMP_FAILED:
            self.ledger.update(r, compensation_status=COMP_FAILED, **failure)
            return ResultMessage.answering(self.m, ok=False, error=error, permanent=permanent), None
        if r.status in (S.COMPENSATING, S.COMPENSATED):
            failed = " failed" if r.status is S.COMPENSATING else ""
            return None, (
                "duplicate-result-discarded",
                f"compensation attempt {a} was already recorded{failed}",
            )
        return None, ("late-result-discarded", f"{late} result is too late")

    def _keyed(self, reply: ResultMessage) -> KeyedReply | None:
        """The success to record with a basis row, when the work message asks for one
        (``WorkVersions.keyed_reply``) and the instance record is in the record's transaction."""
        versions = self.m.ledger
        if versions is None or not versions.keyed_reply or self.instance is None:
            return None
        if is_reference(reply.output):  # the scheduler needs the value: the result handler reads it
            return None
        return KeyedReply(reply, self.watched_after)


def recorded_reply(m: WorkMessage, r: StepRecord, error: str | None = None) -> ResultMessage:
    """The reply to ``m`` that the outcome row ``r`` recorded for its attempt (a re-send); ``error``
    stands in for a failure recorded without one."""
    ok = r.status is (S.SUCCEEDED if m.kind == "work" else S.COMPENSATED)
    output = (step_output(r) if m.kind == "work" else {}) if ok else None
    return ResultMessage.answering(
        m, ok=ok, output=output, error=r.last_error or error, permanent=r.non_retryable
    )
