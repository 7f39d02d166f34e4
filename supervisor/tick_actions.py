"""The moves every step decision is made of: claiming a step, noting, timing out, recording.

They carry the watchdog's exactly-once guarantee (an ETag-guarded claim before any side effect, an
audit row and a ``sas.recovery`` record for every decision). One :class:`_TickActions` lives for one tick.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from supervisor.watchdog_model import (
    ALIVE_STATUSES,
    COMP_IN_FLIGHT,
    SUPERVISOR_PREFIX,
    Action,
    Decision,
    DurableClient,
    T,
    TickReport,
    _io,
    _operator_requested,
    runtime_status_name,
)
from workflow_core import telemetry
from workflow_core.ledger import ConcurrencyConflict, StepNotFound, StepRecord, StepStatus

log = logging.getLogger("sas.supervisor.watchdog")

S = StepStatus


class _TickActions:
    """One tick's state (its time, lease, grace, the orchestration statuses it read) and its moves."""

    def __init__(
        self,
        client: DurableClient,
        services: Any,
        report: TickReport,
        *,
        grace: timedelta,
        lease: timedelta,
    ) -> None:
        self.client = client
        self.ledger = services.ledger
        self.services = services
        self.report = report
        self.now = report.now
        self.actor = f"{SUPERVISOR_PREFIX}{report.tick_id}"
        self.grace = grace
        self.lease = lease
        self._statuses: dict[str, str] = {}

    # ---- helpers --------------------------------------------------------------------------------

    io = staticmethod(_io)

    async def status_of(self, orchestration_id: str) -> str:
        if orchestration_id not in self._statuses:
            self._statuses[orchestration_id] = runtime_status_name(
                await self.client.get_status(orchestration_id)
            )
        return self._statuses[orchestration_id]

    async def failure_of(self, orchestration_id: str) -> str | None:
        """Why an orchestration failed, as its status output says, or None."""
        if await self.status_of(orchestration_id) != "Failed":
            return None
        status = await self.client.get_status(orchestration_id)
        output = getattr(status, "output", None) if status else None
        if not output:
            return None
        # the reason, without the serialised exception the extension appends (its stack trace)
        reason = " ".join(str(output).split(' {"$type"', 1)[0].split())
        progress = getattr(status, "custom_status", None)
        step = progress.get("step") if isinstance(progress, dict) else None
        return (reason + (f" (at step {step})" if step else ""))[:4000]

    def decided(
        self, record: StepRecord, action: Action, outcome: str, detail: str, *, attempt: int | None = None
    ) -> None:
        self.report.actions[action.value] += 1
        self.report.decisions.append(
            Decision(record.instance_id, record.step_id, record.status.value, action.value, outcome, detail)
        )
        telemetry.record_recovery(
            record.instance_id,
            record.step_id,
            record.attempt if attempt is None else attempt,
            action.value,
            outcome,
            workflow=record.workflow_name,
            status=record.status.value,
            tick_id=self.report.tick_id,
            reason=detail,
        )

    def time_out_now(self, record: StepRecord, *, reason: str, last_error: str) -> StepRecord:
        """Blocking: ``record`` -> TimedOut, owned by this tick until now + lease (its claim); counted
        in ``sas.step.duration`` with outcome ``timed_out``, from the send as the row dates it."""
        claim = "" if record.owner == self.actor else f"claimed by watchdog tick {self.report.tick_id}; "
        written = self.ledger.transition(
            record,
            S.TIMED_OUT,
            actor=self.actor,
            reason=claim + reason,
            last_error=last_error,
            owner=self.actor,
            deadline=self.now + self.lease,
        )
        sent = record.sent_at()  # as the row dates the send (the send itself is not recorded)
        telemetry.record_step_finished(
            record.workflow_name,
            record.step_id,
            telemetry.STEP_TIMED_OUT,
            duration_s=None if sent is None else (self.now - sent).total_seconds(),
            error_type="timeout",
        )
        return written

    async def note(self, record: StepRecord, action: Action | str, detail: str) -> None:
        """Audit a decision (or an error) on the step without changing it."""
        await _io(
            self.ledger.note,
            record.instance_id,
            record.step_id,
            actor=self.actor,
            action="recovery",
            reason=f"{action}: {detail}",  # an Action is a StrEnum: its value
            attempt=record.attempt,
            status=record.status.value,
        )

    async def claim(self, found: StepRecord) -> StepRecord | None:
        """Claim ``found`` for this tick (owner, deadline = now + lease), ETag-guarded; None if lost."""
        lateness = self.now - found.deadline if found.deadline else timedelta(0)
        return await self.claim_with(
            found,
            self.ledger.update,
            found,
            actor=self.actor,
            reason=f"claimed by watchdog tick {self.report.tick_id}: "
            f"{found.status.value} overdue by {lateness.total_seconds():.0f}s",
            owner=self.actor,
            deadline=self.now + self.lease,
        )

    async def claim_with(
        self, found: StepRecord, write: Callable[..., T], *args: Any, **kwargs: Any
    ) -> T | None:
        """Run ``write`` (ETag-guarded on ``found`` as read) as this tick's claim; None when someone
        wrote the step since, and won."""
        try:
            written = await _io(write, *args, **kwargs)
        except (ConcurrencyConflict, StepNotFound):
            self.report.conflicts += 1
            log.info(
                "step %s/%s changed before it could be claimed; skipped", found.instance_id, found.step_id
            )
            return None
        self.report.claimed += 1
        return written

    def within_grace(self, found: StepRecord, lateness: timedelta) -> bool:
        """Overran an attempt deadline by less than the grace: the orchestration's own timer (which
        fires at that deadline) is expected to handle it. Rows that wait for the scheduler (Failed,
        TimedOut, Retrying, a failed compensation attempt) already carry the grace in their deadline,
        and operator requests are due at once."""
        if lateness >= self.grace or _operator_requested(found):
            return False
        if found.status in (S.DISPATCHED, S.RUNNING):
            return True
        return found.status is S.COMPENSATING and found.compensation_status in COMP_IN_FLIGHT

    async def release_with_note(
        self, found: StepRecord, claimed: StepRecord, lateness: timedelta, who: str
    ) -> None:
        """Record a short overrun and hand the step back exactly as it was (owner and deadline)."""
        action = Action.NOTE_OVERRUN
        detail = (
            f"{found.status.value} {lateness.total_seconds():.0f}s past its deadline, within the "
            f"{self.grace.total_seconds():.0f}s grace; {who} is alive and its own timer handles it"
        )
        await self.note(found, action, detail)
        await _io(
            self.ledger.update,
            claimed,
            actor=self.actor,
            reason=f"released by watchdog tick {self.report.tick_id}: {action.value}",
            owner=found.owner,
            deadline=found.deadline,
        )
        self.decided(found, action, telemetry.OUTCOME_OK, detail)

    async def end_scheduler(self, found: StepRecord, reason: str) -> None:
        """Terminate the instance's scheduler before a compensation is started here, if it still runs.

        A compensation started here runs top-level under ``compensation_instance_id``; a scheduler
        that later gives a step up calls that same id as its sub-orchestration, and the framework
        drops a sub-orchestration start for a running instance as a duplicate start event: the
        scheduler would wait forever on it (and keep the task open for good). The compensation
        undoes the whole instance anyway, so the scheduler is ended first.
        """
        scheduler_id = found.instance_id
        status = await self.status_of(scheduler_id)
        if status not in ALIVE_STATUSES:
            return
        detail = f"{reason}; scheduler {scheduler_id} ({status}) terminated before the compensation starts"
        await self.note(found, Action.END_SCHEDULER, detail)
        await self.client.terminate(scheduler_id, f"{reason}: the instance is being compensated")
        self._statuses[scheduler_id] = "Terminated"
        self.decided(found, Action.END_SCHEDULER, telemetry.OUTCOME_OK, detail)
