"""The agent worker: takes a work message, claims the step in the ledger, runs the agent, replies.

Entry point for any host: :func:`process_work_message` (a plain function; the trigger-bound
``agent_worker`` below and the durable test host's queue pump both call it). It returns normally
when the message is dealt with, including when it is deliberately ignored (stale, duplicate) or
parked (not a valid ``WorkMessage``: bad ids or sizes, not JSON, missing fields); it
raises when the message must be delivered again (ledger or transport unavailable, a simulated
crash), so the host abandons it, and after ``MAX_DELIVERY_COUNT`` deliveries the broker (Service
Bus) or the host (``<queue>-poison``) dead-letters it; ``agent_dead_letter_handler`` takes over.

Claim and idempotency rules (kind ``work``; docs/agents.md has the full table):

- ledger Dispatched, same attempt -> Running (owner = this worker), ETag-guarded; run the handler;
- Running, same attempt, redelivered (delivery count > 1) -> take over (owner update, ETag); run;
- Running, same attempt, first delivery -> a duplicate copy of a message another worker is running:
  ignore, audit ``duplicate-delivery-ignored``;
- Succeeded or Failed, same attempt -> the attempt is over but its reply may have been lost: re-send
  the recorded result (audit ``result-resent``), do not run the handler again;
- any other attempt or status -> ignore, audit ``stale-attempt-ignored`` / ``settled-step-ignored``.

After the handler: Running -> Succeeded (``result_ref``) or Failed (``last_error``, deadline = now +
grace), ETag-guarded, then the ``ResultMessage`` goes to the result queue (MessageId
``message_id_for(instance, step, attempt, kind="result")``, ``"compensation-result"`` for
compensations; CorrelationId = the work message's MessageId). If another worker recorded the
attempt first, nothing more is written or sent (audit ``duplicate-result-discarded``).

Kind ``compensate`` follows the same rules on the Compensating step, with ``compensation_attempt``
and the sub-state ``compensation_status`` (Dispatched -> Running -> Compensated | Failed).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from typing import Any

import azure.functions as func
from opentelemetry.trace import SpanKind
from pydantic import ValidationError

from activities import step_metrics
from activities._bp import bp
from activities.common import (
    COMP_DONE,
    COMP_FAILED,
    COMP_RUNNING,
    emit_recovery,
    error_text,
    grace_deadline,
    is_transient_claim,
    now,
    park,
    retry_on_conflict,
    step_input,
    step_output,
)
from activities.handlers import faults
from activities.handlers.base import (
    AgentCrash,
    NoReply,
    StepContext,
    StepNoLongerOwned,
    get_handler,
    is_non_retryable,
)
from activities.messages import from_queue_message, from_servicebus_message, transport_kind
from workflow_core import telemetry, tracing
from workflow_core.contracts import WORKER_FUNCTION, ResultMessage, WorkMessage, explain, fit_text
from workflow_core.ledger import (
    ConcurrencyConflict,
    InstanceHandle,
    StepLedger,
    StepNotFound,
    StepRecord,
    StepStatus,
    encode_json,
)
from workflow_core.ledger.model import MAX_TEXT
from workflow_core.runtime import Services, get_services
from workflow_core.settings import SERVICE_BUS_CONNECTION, STORAGE_CONNECTION, TransportKind
from workflow_core.transport import OutgoingMessage, message_id_for

log = logging.getLogger(__name__)
S = StepStatus


MAX_RESULT_CHARS = MAX_TEXT  # the ledger's limit for result_ref


# (ok, output, error, non_retryable): how the handler's run ended
Outcome = tuple[bool, dict[str, Any] | None, str | None, bool]


def non_retryable_errors(
    workflow: str, step_id: str, kind: str, version: str | None = None, services: Services | None = None
) -> tuple[str, ...]:
    """The exception type names the step's definition (or its compensation's) says retrying cannot fix,
    in the definition version the instance is pinned to."""
    from workflow_core.workflows.store import definition_for

    try:
        store = services.definitions if services is not None and version else None
        step = definition_for(workflow, version, store).step(step_id)
    except Exception:  # an unknown workflow or step: nothing listed (PermanentError still counts)
        return ()
    if kind == "work":
        return step.non_retryable_errors
    return step.compensation.non_retryable_errors if step.compensation else ()


class _Action(StrEnum):
    RUN = "run"
    RESEND = "resend"
    IGNORE = "ignore"


def default_worker_id(invocation_id: str | None = None) -> str:
    """``worker:<host>:<pid>[:<invocation>]``: who owns a Running step, for the ledger and operators."""
    base = f"worker:{socket.gethostname()}:{os.getpid()}"
    return f"{base}:{invocation_id[:8]}" if invocation_id else base


def result_message_id(instance_id: str, step_id: str, attempt: int, kind: str) -> str:
    """MessageId of a reply. Work and compensation replies differ, so Service Bus duplicate
    detection never drops a compensation's reply as a copy of the step's own reply."""
    return message_id_for(
        instance_id, step_id, attempt, kind="result" if kind == "work" else "compensation-result"
    )


def process_work_message(
    body: Any,
    *,
    delivery_count: int,
    services: Services,
    worker_id: str,
    message_id: str | None = None,
    trace: Any = None,
) -> str | None:
    """Handle one delivery of a work message (see the module docstring for the rules).

    ``body``: the message body (a ``WorkMessage`` dict); ``delivery_count``: 1 on first delivery;
    ``trace``: the message's application properties (its ``traceparent``/``tracestate`` make this
    delivery's span a child of the dispatch, and the reply carries this span's context on).
    A body that is not a valid ``WorkMessage`` (bad ids, sizes, types, missing fields, not JSON) is
    never raised on: it is parked with a readable reason (returned) and the step, if it can be
    identified, gets a ``message-parked`` note. Infrastructure errors and :class:`AgentCrash`
    propagate so the message is delivered again.
    """
    queue = services.settings.work_queue
    fields = body if isinstance(body, dict) else {}
    with tracing.span(
        f"process {queue}",
        parent=trace,
        kind=SpanKind.CONSUMER,
        attributes={
            **tracing.messaging_attributes(services.settings.transport, queue, "process", message_id),
            "sas.instance_id": fields.get("instance_id"),
            "sas.step_id": fields.get("step_id"),
            "sas.attempt": fields.get("attempt"),
            "sas.kind": fields.get("kind"),
            "sas.delivery_count": delivery_count,
        },
    ):
        try:
            message = WorkMessage.model_validate(body)
        except ValidationError as exc:
            return park(
                services,
                source="work",
                reason=f"not a valid work message: {explain(exc)}",
                body=body,
                actor=worker_id,
                message_id=message_id,
            )
        _Delivery(message, delivery_count, services, worker_id).process()
        return None


class _Delivery:
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
        self.latest: StepRecord | None = None  # the step row as this worker last wrote it

    # ---- flow ------------------------------------------------------------------------------------

    def process(self) -> None:
        m = self.m
        try:
            action, record, note = retry_on_conflict(
                self._read_with_instance, self._decide_claim, what=f"claim {self._label}"
            )
        except StepNotFound:
            log.warning("work message for unknown step %s: ignored", self._label)
            self._note("unknown-step-ignored", f"no such step in the ledger ({m.kind} attempt {m.attempt})")
            return
        if note is not None:
            self._note(*note, status=record.status.value)
        if action is _Action.RESEND:
            emit_recovery(record, "result_resent", attempt=m.attempt, kind=m.kind, delivery=self.n)
        elif action is _Action.RUN and self.took_over:
            emit_recovery(record, "agent_takeover", attempt=m.attempt, kind=m.kind, delivery=self.n)
        if action is _Action.IGNORE:
            log.info("ignored %s: %s", self._label, note[1] if note else "")
            return
        if action is _Action.RESEND:
            self._send(self._result_from_record(record))
            return
        self.latest = record
        outcome = self._run(record)
        if outcome is None:
            return
        # The step's old index row is deleted after the reply is sent: off the step's critical path.
        with self.ledger.deferred_index_deletes():
            result, note = self._record(outcome)
            if note is not None:
                self._note(*note, status=None)
            if result is not None:
                self._send(result)

    @property
    def _label(self) -> str:
        m = self.m
        return f"{m.kind} {m.instance_id}/{m.step_id}#{m.attempt}"

    def _read_with_instance(self) -> StepRecord:
        """The step, and its instance record kept aside: one partition query for both rows."""
        record, self.instance = self.ledger.read_step_and_instance(self.m.instance_id, self.m.step_id)
        return record

    def _record(self, outcome: Outcome) -> tuple[ResultMessage | None, tuple[str, str] | None]:
        """Record the outcome on the row this worker last wrote (the claim, or its last heartbeat),
        with the ETag that write returned: no read when nobody else wrote in between. A lost race
        (412 on the step or the instance record) re-reads both and decides again."""
        try:
            return self._decide_record(self.latest, outcome)
        except ConcurrencyConflict:
            log.debug("%s: the step or instance changed since the claim; re-reading", self._label)
        return retry_on_conflict(
            self._read_with_instance, lambda r: self._decide_record(r, outcome), what=f"record {self._label}"
        )

    def _note(self, action: str, reason: str, *, status: str | None) -> None:
        self.ledger.note(
            self.m.instance_id,
            self.m.step_id,
            actor=self.worker_id,
            action=action,
            reason=f"{self.m.kind} delivery {self.n}: {reason}",
            attempt=self.m.attempt,
            status=status,
        )

    # ---- claim -----------------------------------------------------------------------------------

    def _decide_claim(self, r: StepRecord) -> tuple[_Action, StepRecord, tuple[str, str] | None]:
        return self._claim_work(r) if self.work else self._claim_compensation(r)

    def _claim_work(self, r: StepRecord) -> tuple[_Action, StepRecord, tuple[str, str] | None]:
        a = self.m.attempt
        if r.attempt != a:
            why = f"message is for attempt {a}; the ledger is at attempt {r.attempt} ({r.status.value})"
            return _Action.IGNORE, r, ("stale-attempt-ignored", why)
        if r.status is S.DISPATCHED:
            claimed = self.ledger.transition(
                r,
                S.RUNNING,
                actor=self.worker_id,
                reason=f"claimed (delivery {self.n})",
                owner=self.worker_id,
            )
            self.started_at = now()
            step_metrics.queue_wait(r, self.started_at)
            return _Action.RUN, claimed, None
        if r.status is S.RUNNING:
            if self.n > 1:
                taken = self.ledger.update(
                    r,
                    actor=self.worker_id,
                    reason=f"took over from {r.owner} after redelivery (delivery {self.n})",
                    owner=self.worker_id,
                )
                self.started_at = now()
                self.took_over = True
                return _Action.RUN, taken, None
            why = f"attempt {a} is already Running (owner {r.owner}); this is a duplicate copy"
            return _Action.IGNORE, r, ("duplicate-delivery-ignored", why)
        if r.status in (S.SUCCEEDED, S.FAILED):
            return (
                _Action.RESEND,
                r,
                ("result-resent", f"attempt {a} is already {r.status.value}; reply re-sent"),
            )
        return _Action.IGNORE, r, ("settled-step-ignored", f"step is {r.status.value}; nothing to do")

    def _claim_compensation(self, r: StepRecord) -> tuple[_Action, StepRecord, tuple[str, str] | None]:
        a = self.m.attempt
        if r.compensation_attempt != a or r.status not in (S.COMPENSATING, S.COMPENSATED):
            why = (
                f"message is for compensation attempt {a}; the ledger is at compensation attempt "
                f"{r.compensation_attempt} ({r.status.value})"
            )
            return _Action.IGNORE, r, ("stale-attempt-ignored", why)
        if r.status is S.COMPENSATED:
            return (
                _Action.RESEND,
                r,
                ("result-resent", f"compensation attempt {a} already done; reply re-sent"),
            )
        if r.compensation_status == COMP_FAILED:
            return (
                _Action.RESEND,
                r,
                ("result-resent", f"compensation attempt {a} already failed; reply re-sent"),
            )
        if r.compensation_status == COMP_RUNNING:
            if self.n > 1:
                taken = self.ledger.update(
                    r,
                    actor=self.worker_id,
                    reason=f"took over compensation from {r.owner} after redelivery (delivery {self.n})",
                    owner=self.worker_id,
                )
                self.took_over = True
                return _Action.RUN, taken, None
            why = f"compensation attempt {a} is already running (owner {r.owner}); this is a duplicate copy"
            return _Action.IGNORE, r, ("duplicate-delivery-ignored", why)
        claimed = self.ledger.update(
            r,
            actor=self.worker_id,
            reason=f"compensation claimed (delivery {self.n})",
            owner=self.worker_id,
            compensation_status=COMP_RUNNING,
        )
        return _Action.RUN, claimed, None

    # ---- run -------------------------------------------------------------------------------------

    def _run(self, record: StepRecord) -> Outcome | None:
        """Run the handler: ``(ok, output, error, non_retryable)``, or None when nothing may be
        recorded or sent."""
        m = self.m
        handler = get_handler(m.agent)
        if handler is None:
            return False, None, f"no handler is registered for agent {m.agent!r}", False
        ctx = StepContext(
            instance_id=m.instance_id,
            step_id=m.step_id,
            attempt=m.attempt,
            agent=m.agent,
            kind=m.kind,
            input=dict(m.input),
            deadline=record.deadline,
            services=self.services,
            worker_id=self.worker_id,
            step_input=step_input(record),
            step_output=step_output(record),
            _heartbeat=self._heartbeat,
        )
        try:
            faults.before_handler(ctx)
            raw = handler(ctx)
            faults.after_handler(ctx)
        except AgentCrash:
            log.warning("%s: agent crashed; the message will be delivered again", self._label)
            raise
        except NoReply as exc:
            log.warning("%s: agent gave no reply (%s)", self._label, exc)
            return None
        except StepNoLongerOwned as exc:
            self._note("abandoned-not-owner", str(exc), status=None)
            return None
        except Exception as exc:
            # The error text is cut to fit the ledger (head and tail kept), so a huge one is still
            # recorded once, as this attempt's failure, instead of failing the write on every delivery.
            error = fit_text(error_text(exc))
            permanent = is_non_retryable(
                exc,
                non_retryable_errors(m.workflow, m.step_id, m.kind, record.workflow_version, self.services),
            )
            log.info("%s: agent failed%s: %s", self._label, " (non-retryable)" if permanent else "", error)
            return False, None, error, permanent
        output = {} if raw is None else dict(raw) if isinstance(raw, dict) else {"value": raw}
        encoded = encode_json(output)
        if len(encoded) > MAX_RESULT_CHARS:
            why = f"output of {len(encoded)} characters exceeds the ledger's {MAX_RESULT_CHARS}"
            return False, None, why, False
        return True, output, None, False

    def _heartbeat(self, seconds: float | None) -> datetime | None:
        service_now: list[datetime] = []

        def read() -> StepRecord:
            # one read gives the row and the storage service's time: the extension needs both
            record, now = self.ledger.get_with_service_time(self.m.instance_id, self.m.step_id)
            service_now[:] = [now]
            return record

        def decide(r: StepRecord) -> datetime | None:
            if not self._current(r) or not (r.owner == self.worker_id or is_transient_claim(r.owner)):
                raise StepNoLongerOwned(
                    f"{self._label}: step is {r.status.value} (attempt {r.attempt}), owner {r.owner}; "
                    "this worker no longer owns it"
                )
            if r.owner != self.worker_id:
                # The watchdog holds a short claim to look at the step; it hands it back as it was.
                # Writing now would only make its release lose the ETag race: beat again later.
                return r.deadline
            timeout = seconds if seconds is not None else r.heartbeat_timeout_seconds
            if timeout is None:
                return r.deadline
            # "extend by": the ledger computes the deadline from the storage service's clock, not ours
            extended = self.ledger.extend_deadline(
                r, float(timeout), actor=self.worker_id, reason=f"heartbeat +{timeout:g}s", now=service_now[0]
            )
            self.latest = extended
            return extended.deadline

        return retry_on_conflict(read, decide, what=f"heartbeat {self._label}")

    def _current(self, r: StepRecord) -> bool:
        """Is the step still at this message's attempt, in progress?"""
        if self.work:
            return r.status is S.RUNNING and r.attempt == self.m.attempt
        return (
            r.status is S.COMPENSATING
            and r.compensation_attempt == self.m.attempt
            and r.compensation_status == COMP_RUNNING
        )

    # ---- record ----------------------------------------------------------------------------------

    def _decide_record(
        self, r: StepRecord, outcome: Outcome
    ) -> tuple[ResultMessage | None, tuple[str, str] | None]:
        ok, output, error, permanent = outcome
        a = self.m.attempt
        if self.work:
            if r.attempt != a:
                return None, (
                    "late-result-discarded",
                    f"ledger moved on to attempt {r.attempt} ({r.status.value})",
                )
            if r.status is S.RUNNING:
                outcome_name = telemetry.STEP_SUCCEEDED if ok else telemetry.STEP_FAILED
                if ok:
                    # With the instance record in the same transaction: the completion takes the
                    # instance's next completion number, which orders compensation (no clocks).
                    self.ledger.transition(
                        r,
                        S.SUCCEEDED,
                        actor=self.worker_id,
                        reason="agent succeeded",
                        result_ref=encode_json(output),
                        instance=self.instance,
                    )
                else:
                    self.ledger.transition(
                        r,
                        S.FAILED,
                        actor=self.worker_id,
                        reason=f"agent failed{' (non-retryable)' if permanent else ''}: {error}",
                        last_error=error,
                        non_retryable=permanent,
                        deadline=grace_deadline(self.grace),
                    )
                step_metrics.attempt_finished(
                    r,
                    outcome=outcome_name,
                    started_at=self.started_at,
                    ended_at=now(),
                    error_type=None if ok else step_metrics.error_type_of(error),
                    final=ok or permanent or r.attempt >= r.max_attempts,
                )
                return self._result(ok, output, error, permanent), None
            if r.status in (S.SUCCEEDED, S.FAILED):
                why = f"attempt {a} was already recorded {r.status.value} by {r.owner}"
                return None, ("duplicate-result-discarded", why)
            return None, (
                "late-result-discarded",
                f"step is {r.status.value}; this attempt's result is too late",
            )
        # compensate
        if r.compensation_attempt != a:
            why = f"ledger moved on to compensation attempt {r.compensation_attempt} ({r.status.value})"
            return None, ("late-result-discarded", why)
        if r.status is S.COMPENSATING:
            if ok:
                self.ledger.transition(
                    r,
                    S.COMPENSATED,
                    actor=self.worker_id,
                    reason="compensator succeeded",
                    compensation_status=COMP_DONE,
                    completed_at=r.completed_at,  # keep when the step's own work completed
                )
                step_metrics.compensation_finished(r)
                return self._result(True, output, None), None
            if r.compensation_status == COMP_FAILED:
                return None, (
                    "duplicate-result-discarded",
                    f"compensation attempt {a} was already recorded failed",
                )
            self.ledger.update(
                r,
                actor=self.worker_id,
                reason=f"compensator failed{' (non-retryable)' if permanent else ''}: {error}",
                compensation_status=COMP_FAILED,
                last_error=error,
                non_retryable=permanent,
                deadline=grace_deadline(self.grace),
            )
            return self._result(False, None, error, permanent), None
        if r.status is S.COMPENSATED:
            return None, ("duplicate-result-discarded", f"compensation attempt {a} was already recorded")
        return None, (
            "late-result-discarded",
            f"step is {r.status.value}; this compensation result is too late",
        )

    # ---- reply -----------------------------------------------------------------------------------

    def _result(
        self, ok: bool, output: dict[str, Any] | None, error: str | None, permanent: bool = False
    ) -> ResultMessage:
        return ResultMessage.answering(self.m, ok=ok, output=output, error=error, permanent=permanent)

    def _result_from_record(self, r: StepRecord) -> ResultMessage:
        if self.work:
            ok = r.status is S.SUCCEEDED
            return self._result(ok, step_output(r) if ok else None, r.last_error, r.non_retryable)
        ok = r.status is S.COMPENSATED
        return self._result(ok, {} if ok else None, r.last_error, r.non_retryable)

    def _send(self, result: ResultMessage) -> None:
        m = self.m
        self.services.transport.send(
            self.services.settings.result_queue,
            OutgoingMessage(
                body=result.model_dump(mode="json"),
                message_id=result_message_id(m.instance_id, m.step_id, m.attempt, m.kind),
                correlation_id=message_id_for(m.instance_id, m.step_id, m.attempt, kind=m.kind),
                subject=f"{m.kind}-result",
                application_properties={
                    "kind": m.kind,
                    "outcome": result.outcome,
                    "agent": m.agent,
                    # the reply continues this delivery's trace (the result handler's span is its child)
                    **tracing.message_properties(tracing.current()),
                },
            ),
        )
        log.info("%s: replied %s", self._label, result.outcome)


# ---- trigger-bound function -----------------------------------------------------------------------


def run_queue_message(
    msg: func.QueueMessage, *, services: Services | None = None, worker_id: str | None = None
) -> None:
    """Storage Queue trigger body: decode the transport envelope, then :func:`process_work_message`."""
    incoming = from_queue_message(msg)
    process_work_message(
        incoming.body,
        delivery_count=incoming.delivery_count,
        services=services or get_services(),
        worker_id=worker_id or default_worker_id(),
        message_id=incoming.message_id,
        trace=incoming.application_properties,
    )


def run_servicebus_message(
    msg: func.ServiceBusMessage, *, services: Services | None = None, worker_id: str | None = None
) -> None:
    """Service Bus trigger body: the JSON body, then :func:`process_work_message`."""
    incoming = from_servicebus_message(msg)
    process_work_message(
        incoming.body,
        delivery_count=incoming.delivery_count,
        services=services or get_services(),
        worker_id=worker_id or default_worker_id(),
        message_id=incoming.message_id,
        trace=incoming.application_properties,
    )


def register_worker(blueprint: Any, kind: TransportKind) -> Callable[..., Any]:
    """Add ``agent_worker`` with the trigger of ``kind`` to ``blueprint`` (done once at import)."""
    if kind is TransportKind.SERVICE_BUS:

        @blueprint.function_name(WORKER_FUNCTION)
        @blueprint.service_bus_queue_trigger(
            arg_name="msg", queue_name="%WORK_QUEUE_NAME%", connection=SERVICE_BUS_CONNECTION
        )
        def agent_worker(msg: func.ServiceBusMessage, context: func.Context) -> None:
            run_servicebus_message(msg, worker_id=default_worker_id(context.invocation_id))

        return agent_worker

    @blueprint.function_name(WORKER_FUNCTION)
    @blueprint.queue_trigger(arg_name="msg", queue_name="%WORK_QUEUE_NAME%", connection=STORAGE_CONNECTION)
    def agent_worker(msg: func.QueueMessage, context: func.Context) -> None:
        run_queue_message(msg, worker_id=default_worker_id(context.invocation_id))

    return agent_worker


agent_worker = register_worker(bp, transport_kind())
