"""What a message-only agent reports, recorded in the ledger on its behalf by the result handler.

Such an agent holds no storage rights (docs/agents.md, "Write an agent in another language"): the app
claims, heartbeats and records for it with the in-app worker's rules (:class:`AgentReport`, a delivery
of the message rebuilt from the row), only when the report's reply token is the attempt's; any other
is audited (``agent-report-refused``) and changes nothing.
"""

from __future__ import annotations

import hmac
import logging
from typing import NamedTuple

from activities.common import iso, park, retry_on_conflict, step_input, step_output
from activities.verification import attempt_token
from activities.worker.delivery import Delivery
from activities.worker.delivery_rules import Outcome
from activities.worker.handlers.base import StepNoLongerOwned
from workflow_core import clock
from workflow_core.contracts import Heartbeat, ResultMessage
from workflow_core.ledger import InstanceRecord, InvalidLedgerInput, StepNotFound, StepRecord
from workflow_core.messages import reply_token, work_body
from workflow_core.payloads import as_stored
from workflow_core.runtime import Services

log = logging.getLogger(__name__)

ACTOR = "result-handler"
REFUSED = "agent-report-refused"


class AgentReport(Delivery):
    """The in-app worker's claim, heartbeat and record rules, for the agent the row names."""

    # Every beat of a message-only agent is recorded (``last_heartbeat``, the audit trail), even one
    # that leaves a later deadline: the only sign that the agent is alive and not replying.
    record_kept_beats = True

    def __init__(self, r: StepRecord, report: Heartbeat | ResultMessage, services: Services) -> None:
        work = report.kind == "work"
        sent = None if work else as_stored({"input": step_input(r), "output": step_output(r)})
        message = work_body(r, report.kind, deadline=r.deadline or clock.utcnow(), input=sent)
        super().__init__(message, 1, services, worker_id=message.agent)

    def claim(self) -> bool:
        """Claim the attempt for the agent if it is still Dispatched; is it in progress now?"""
        what = f"agent report {self._label}"
        _, record, _ = retry_on_conflict(self._read_with_instance, self._decide_claim, what=what)
        self.latest = record
        return self._current(record)


class Verdict(NamedTuple):
    """What became of a refused report or a heartbeat (``heartbeat``: accepted; ``agent-report-refused``;
    ``parked``: no such step), why, the step's row as last read or written, and a beat's instance."""

    outcome: str
    reason: str
    record: StepRecord | None
    instance: InstanceRecord | None = None


def _check(report: Heartbeat | ResultMessage, services: Services) -> AgentReport | Verdict:
    """An :class:`AgentReport` when ``report``'s token is the one of the attempt the ledger holds."""
    try:
        r = services.ledger.get(report.instance_id, report.step_id)
    except (StepNotFound, InvalidLedgerInput) as exc:
        why = f"agent report for no known step: {exc}"
        park(services, source="result", reason=why, body=report.model_dump(mode="json"), actor=ACTOR)
        return Verdict("parked", why, None)
    expected = reply_token(attempt_token(r, report.kind, report.attempt)) or ""
    if hmac.compare_digest(expected, report.reply_token or ""):
        return AgentReport(r, report, services)
    what = "heartbeat" if isinstance(report, Heartbeat) else f"{report.outcome} reply"
    why = (
        f"{what} for {report.kind} attempt {report.attempt} ignored: its reply token is not the one of "
        f"the attempt the ledger holds (attempt {r.attempt}, {r.status.value})"
    )
    log.warning("%s/%s: %s", report.instance_id, report.step_id, why)
    services.ledger.note(
        r.instance_id, r.step_id, actor=ACTOR, action=REFUSED, reason=why, attempt=report.attempt
    )
    return Verdict(REFUSED, why, r)


def apply_heartbeat(beat: Heartbeat, services: Services) -> Verdict:
    """Claim (if need be) and extend ``beat``'s attempt for its agent, or refuse it (audited)."""
    report = _check(beat, services)
    if isinstance(report, Verdict):
        return report
    try:
        if not report.claim():
            raise StepNoLongerOwned(f"attempt {beat.attempt} is no longer in progress")
        deadline = report._heartbeat(beat.seconds)  # the worker's own: on the ledger's clock, owner checked
    except StepNoLongerOwned as exc:
        why = f"heartbeat ignored: {exc}"
        ids = (beat.instance_id, beat.step_id)
        services.ledger.note(*ids, actor=ACTOR, action=REFUSED, reason=why, attempt=beat.attempt)
        return Verdict(REFUSED, why, report.latest)
    record = report.latest
    if record is not None and deadline is not None and record.deadline != deadline:
        record = record.model_copy(update={"deadline": deadline})
    instance = report.instance.record if report.instance is not None else None
    why = f"attempt {beat.attempt} is current: deadline {iso(deadline) or 'none'}"
    return Verdict("heartbeat", why, record, instance)


def record_reply(result: ResultMessage, services: Services) -> tuple[ResultMessage, str | None]:
    """Record a message-only agent's reply when the ledger has no outcome for its attempt yet: the reply
    as the ledger now holds it (a large output by reference) and None; or, refused, the outcome."""
    report = _check(result, services)
    if isinstance(report, Verdict):
        return result, report.outcome
    ok = result.outcome == "succeeded"
    output = services.payloads.stored(result.output or {}) if ok else None
    if report.claim():
        error = None if ok else result.error or "the agent reported a failure without an error text"
        outcome: Outcome = (ok, output, error, result.permanent and not ok)
        _, note = report._record(outcome)
        if note is not None:
            report._note(*note, status=None)
    return result.model_copy(update={"output": output}), None
