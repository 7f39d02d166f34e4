"""One delivery of a work message, start to end: claim, run the agent's handler, heartbeat, record, reply.

The rules each ledger write follows (claim or not, how to record), and the state they read, are
``delivery_rules``: the idempotency table, read on its own; this module is the flow between them.
"""

from __future__ import annotations

import functools
import logging
from datetime import datetime

from azure.core.exceptions import HttpResponseError

from activities.common import (
    emit_recovery,
    is_transient_claim,
    observe_outcome,
    retry_on_conflict,
    step_input,
    step_output,
)
from activities.worker.delivery_rules import Action, DeliveryDecisions, Outcome, recorded_reply
from activities.worker.handlers import faults
from activities.worker.handlers.base import (
    AgentCrash,
    NoReply,
    PermanentError,
    StepContext,
    StepNoLongerOwned,
    get_handler,
)
from workflow_core import tracing
from workflow_core.contracts import ResultMessage, WorkMessage, fit_text
from workflow_core.ledger import (
    ConcurrencyConflict,
    InstanceHandle,
    LedgerError,
    StepNotFound,
    StepRecord,
    StepStatus,
    encode_json,
)
from workflow_core.ledger.known_rows import claim_row_key, known_instance, known_step
from workflow_core.ledger.model import COMP_RUNNING
from workflow_core.limits import Holder
from workflow_core.messages import claim_digest
from workflow_core.payloads import PayloadTooLarge
from workflow_core.runtime import Services
from workflow_core.starter import describe_error
from workflow_core.transport import OutgoingMessage, message_id_for

log = logging.getLogger(__name__)
S = StepStatus


def is_permanent(exc: BaseException, m: WorkMessage, version: str | None, services: Services) -> bool:
    """A :class:`PermanentError`, or of a type the step's definition (its compensation's; the pinned
    version) lists as non-retryable."""
    from workflow_core.workflows.store import definition_for

    try:
        step = definition_for(m.workflow, version, services.definitions).step(m.step_id)
        listed = step.non_retryable_errors if m.kind == "work" else step.compensation.non_retryable_errors
    except Exception:  # an unknown workflow or step, no compensation: nothing listed
        listed = []
    return isinstance(exc, PermanentError) or any(cls.__name__ in listed for cls in type(exc).__mro__)


class Delivery(DeliveryDecisions):
    # whether a heartbeat that leaves a later deadline as it is still writes (message-only agents)
    record_kept_beats = False

    def process(self) -> None:
        m = self.m
        try:
            unread = self._claim_unread()
            action, record, note = unread or retry_on_conflict(
                self._read_with_instance, self._decide_claim, what=f"claim {self._label}"
            )
        except StepNotFound:
            log.warning("work message for unknown step %s: ignored", self._label)
            self._note("unknown-step-ignored", f"no such step in the ledger ({m.kind} attempt {m.attempt})")
            return
        if note is not None:
            self._note(*note, status=record.status.value)
        if action is Action.IGNORE:
            log.info("ignored %s: %s", self._label, note[1] if note else "")
            return
        if action is Action.RESEND:
            emit_recovery(record, "result_resent", attempt=m.attempt, kind=m.kind, delivery=self.n)
            self._send(recorded_reply(m, record))
            return
        if self.took_over:
            emit_recovery(record, "agent_takeover", attempt=m.attempt, kind=m.kind, delivery=self.n)
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

    def _claim_unread(self) -> tuple[Action, StepRecord, None] | None:
        """Claim a first delivery unread, against the rows its message carries: Running If-Match the
        step's ETag, in a transaction that deletes the claim-key row named by this message's digest,
        so it lands only for the unaltered message on an unchanged row. None: read and decide."""
        m, versions = self.m, self.m.ledger
        if versions is None or not self.work or self.n > 1:
            return None
        try:
            known = known_step(versions.step, versions.etags.get("step", ""))
            # the input the snapshot leaves out is the message's, which the claim-key row binds to
            # the one the dispatch recorded: the handler's step_input is the same on both paths
            known = known.model_copy(update={"input_ref": encode_json(m.input)})
            ids = (m.instance_id, m.step_id, m.attempt, S.DISPATCHED)
            if (known.instance_id, known.step_id, known.attempt, known.status) != ids:
                return None
            instance = None
            if versions.instance is not None:
                snapshot = {**versions.instance, "etag": versions.etags.get("instance")}
                instance = InstanceHandle(known_instance(snapshot))
            key = claim_row_key(m.step_id, claim_digest(m))
            claimed = self._claim_dispatched(
                known, lambda *_: [("delete", {"PartitionKey": m.instance_id, "RowKey": key})]
            )
        except (LedgerError, ValueError, HttpResponseError) as exc:  # a lost race, a missing key, a
            # refused copy or a version the service would not even parse (a forged ETag): read
            log.info("%s: claim reads the ledger: %s", self._label, exc)
            return None
        self.instance = instance
        if versions.watched is not None and instance is not None:
            self.watched_after = [step for step in versions.watched if step != m.step_id]
        return Action.RUN, claimed, None

    def _read_with_instance(self) -> StepRecord:
        """The step, and its instance record kept aside: one partition query for both rows."""
        record, self.instance = self.ledger.read_step_and_instance(self.m.instance_id, self.m.step_id)
        self.watched_after = None  # the instance as read: which steps its row watches is not known
        return record

    def _record(self, outcome: Outcome) -> tuple[ResultMessage | None, tuple[str, str] | None]:
        """Record on the row this worker last wrote, with that write's ETag (no read when nobody else
        wrote since; a lost race re-reads and decides again); then the agent's limits learn it."""
        try:
            recorded = self._decide_record(self.latest, outcome)
        except ConcurrencyConflict:
            log.debug("%s: the step or instance changed since the claim; re-reading", self._label)
            decide = lambda r: self._decide_record(r, outcome)  # noqa: E731
            recorded = retry_on_conflict(self._read_with_instance, decide, what=f"record {self._label}")
        if recorded[0] is not None and self.work:
            ok, _, error, permanent = outcome
            holder = Holder(self.m.instance_id, self.m.step_id, self.m.attempt)
            observe_outcome(self.services, self.m.agent, holder, ok=ok, error=error, permanent=permanent)
        return recorded

    def _note(self, action: str, reason: str, *, status: str | None) -> None:
        m = self.m
        ids, reason = (m.instance_id, m.step_id), f"{m.kind} delivery {self.n}: {reason}"
        self.ledger.note(
            *ids, actor=self.worker_id, action=action, reason=reason, attempt=m.attempt, status=status
        )

    def _run(self, record: StepRecord) -> Outcome | None:
        """Run the handler; None when nothing may be recorded or sent."""
        m = self.m
        handler = get_handler(m.agent)
        if handler is None:
            return False, None, f"no handler is registered for agent {m.agent!r}", False
        payloads = self.services.payloads  # references in, references out: the handler sees values
        ctx = StepContext(
            **m.model_dump(include={"instance_id", "step_id", "attempt", "agent", "kind"}),
            input=dict(payloads.resolve_input(m.input, m.kind)),
            deadline=record.deadline,
            services=self.services,
            worker_id=self.worker_id,
            step_input=payloads.resolve(step_input(record)),
            step_output=payloads.resolve(step_output(record)),
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
        except Exception as exc:  # cut to fit the ledger: recorded once, not a failed write per delivery
            error = fit_text(describe_error(exc))
            permanent = is_permanent(exc, m, record.workflow_version, self.services)
            log.info("%s: agent failed%s: %s", self._label, " (non-retryable)" if permanent else "", error)
            return False, None, error, permanent
        output = {} if raw is None else dict(raw) if isinstance(raw, dict) else {"value": raw}
        try:  # an output over the limit is this attempt's failure, recorded once (not a crash loop)
            payloads.check_size(output, "output")
        except PayloadTooLarge as exc:
            return False, None, str(exc), False
        return True, payloads.stored(output), None, False

    def _heartbeat(self, seconds: float | None) -> datetime | None:
        # one read gives the row and the storage service's time: the extension needs both
        read = functools.partial(self.ledger.get_with_service_time, self.m.instance_id, self.m.step_id)

        def decide(pair: tuple[StepRecord, datetime]) -> datetime | None:
            r, service_now = pair
            if not self._current(r) or not (r.owner == self.worker_id or is_transient_claim(r.owner)):
                raise StepNoLongerOwned(
                    f"{self._label}: step is {r.status.value} (attempt {r.attempt}), owner {r.owner}; "
                    "this worker no longer owns it"
                )
            timeout = seconds if seconds is not None else r.heartbeat_timeout_seconds
            # the watchdog's short claim hands the step back as it was: a write now would only make
            # its release lose the ETag race, so beat again later
            if r.owner != self.worker_id or timeout is None:
                return r.deadline
            # "extend by": the ledger computes the deadline from the storage service's clock, not ours
            extended = self.ledger.extend_deadline(
                r,
                float(timeout),
                actor=self.worker_id,
                reason=f"heartbeat +{timeout:g}s",
                now=service_now,
                record_kept=self.record_kept_beats,
            )
            self.latest = extended
            return extended.deadline

        return retry_on_conflict(read, decide, what=f"heartbeat {self._label}")

    def _current(self, r: StepRecord) -> bool:
        if self.work:
            return r.status is S.RUNNING and r.attempt == self.m.attempt
        running = r.status is S.COMPENSATING and r.compensation_status == COMP_RUNNING
        return running and r.compensation_attempt == self.m.attempt

    def _send(self, result: ResultMessage) -> None:
        m = self.m
        ids = (m.instance_id, m.step_id, m.attempt)
        message = OutgoingMessage(
            body=result.model_dump(mode="json"),
            # work and compensation replies differ, so duplicate detection never drops one as the other
            message_id=message_id_for(*ids, kind="result" if self.work else "compensation-result"),
            correlation_id=message_id_for(*ids, kind=m.kind),
            subject=f"{m.kind}-result",
            # the reply continues this delivery's trace (the result handler's span is its child)
            application_properties={
                "kind": m.kind,
                "outcome": result.outcome,
                "agent": m.agent,
                **tracing.current(),
            },
        )
        self.services.transport.send(self.services.settings.result_queue, message)
        log.info("%s: replied %s", self._label, result.outcome)
