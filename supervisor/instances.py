"""The watchdog's view of whole workflow instances: a scheduler that died *between* steps leaves no
overdue step, only its record's ``scheduler_deadline`` (the promise every scheduler activity renews)
passes (docs/supervisor.md, "Instances: a scheduler that died"). Every action starts with an
ETag-conditional claim of the *instance* record: two watchdogs race for one row.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from supervisor.instance_actions import IS, InstanceAction, _InstanceActions
from supervisor.watchdog_model import ALIVE_STATUSES, FLAGGED_LOOK_SECONDS, Action, _io, _operator_requested
from workflow_core import telemetry
from workflow_core.contracts import compensation_instance_id
from workflow_core.ledger import InstanceRecord
from workflow_core.ledger.model import MAX_TEXT

log = logging.getLogger("sas.supervisor.instances")


class InstanceSupervisor(_InstanceActions):
    """The decision table for one overdue instance (docs/supervisor.md, "Instances")."""

    async def handle(self, found: InstanceRecord) -> None:
        """One overdue instance from ``ledger.overdue_instances``."""
        if found.status is IS.COMPENSATING:
            await self.compensation_lost(found)
            return
        orchestration_id = found.orchestration_id or found.instance_id
        status = await self.tick.status_of(orchestration_id)
        requested = _operator_requested(found)
        if found.needs_attention and not requested:
            # flagged: nothing is restarted or terminated without an operator
            detail = (
                f"flagged for an operator ({found.attention_reason}); "
                f"orchestration {orchestration_id} is {status}"
            )
            if await self.claim(found, IS.RUNNING, detail[:1000], park=True) is not None:
                await self.decided(found, InstanceAction.NOTE_FLAGGED, detail[:1000])
            return
        # an operator's resume answers a flag and renews the termination budget
        answered = {"needs_attention": False, "attention_reason": None} if found.needs_attention else {}
        if status in ALIVE_STATUSES:
            if requested:
                detail = f"{found.owner} asked for a resume, but orchestration {orchestration_id} is {status}"
                if await self.claim(found, IS.RUNNING, detail, stalls=0, **answered) is not None:
                    await self.decided(found, InstanceAction.NOTE_LATE, detail)
                return
            await self.late(found, orchestration_id, status)
            return
        if requested:  # an operator's resume is not bound by the policy or the resume count
            await self.resume(
                found,
                f"{found.owner} asked for a resume; orchestration {orchestration_id} is {status}",
                **answered,
            )
            return
        await self.recover(found, f"orchestration {orchestration_id} is {status}")

    async def step_orphaned(self, step: Any, claimed: Any, why: str) -> bool:
        """A step's orchestration is gone: True when the instance record decided, False if it ended."""
        record = await _io(self.ledger.find_instance, step.instance_id)
        if record is None:
            await self.no_record(step, claimed, why)
            return True
        if record.status is IS.STOPPED:  # an operator's: never undone here
            await self.decided(record, InstanceAction.NOTE_FLAGGED, f"{why}; {record.attention_reason}")
            return True
        if record.status is IS.FAILED and not _operator_requested(step):
            # flagged: it waits for an operator; nothing is started behind the operator's back
            await self.leave_for_operator(step, claimed, record)
            return True
        if record.status not in (IS.RUNNING, IS.COMPENSATING):
            return False
        if await self.held_elsewhere(record, why):
            return True
        if record.status is IS.COMPENSATING:
            await self.compensation_lost(record)
            return True
        orchestration_id = record.orchestration_id or record.instance_id
        status = await self.tick.status_of(orchestration_id)
        if status in ALIVE_STATUSES:
            # e.g. a parallel member died: its parent moves on, or is found by its own promise
            await self.decided(
                record, InstanceAction.NOTE_LATE, f"{why}; the instance's orchestration is {status}"
            )
            return True
        await self.recover(record, f"{why}; the instance's orchestration {orchestration_id} is {status}")
        return True

    async def compensate_for_step(self, step: Any, claimed: Any, reason: str) -> bool:
        """A step is Compensating and no compensation runs. True when the instance record took it over
        (started once per instance); False when the instance already ended (the step decides)."""
        record = await _io(self.ledger.find_instance, step.instance_id)
        if record is None:
            await self.no_record(step, claimed, reason)
            return True
        if record.status in (IS.SUCCEEDED, IS.COMPENSATED, IS.CANCELLED):
            return False
        if await self.held_elsewhere(record, reason):
            return True
        if record.status is IS.COMPENSATION_FAILED and not _operator_requested(step):
            # flagged: only an operator's retry starts it again; the step settles CompensationFailed
            await _io(self.settle_given_up_step, step, record)
            await self.decided(
                record, InstanceAction.NOTE_FLAGGED, f"{reason}; the instance waits for an operator"
            )
            return True
        if record.status is IS.COMPENSATING and not _operator_requested(step):
            # a compensation that died, found through its step: the instance restarts it, on its budget
            await self.tick.end_scheduler(step, reason)
            await self.compensation_lost(record)
            return True
        # out of CompensationFailed an operator acted: the flag is answered, the restart budget renewed
        answered = (
            {"needs_attention": False, "attention_reason": None, "compensation_restarts": 0}
            if record.status is IS.COMPENSATION_FAILED
            else {}
        )
        if await self.claim(record, IS.COMPENSATING, reason, **answered) is None:
            return True  # another tick won the instance: it acts
        await self.tick.end_scheduler(step, reason)
        await self.start_compensation(record, reason, InstanceAction.RESTART_COMPENSATION)
        return True

    async def step_of_flagged(self, step: Any, claimed: Any) -> bool:
        """A step the watchdog acted on before, unmoved since, its orchestration alive: True (and left as
        it is) when its instance was flagged and parked by a spent budget."""
        record = await _io(self.ledger.find_instance, step.instance_id)
        if record is None or not record.needs_attention or record.scheduler_deadline is not None:
            return False
        await self.leave_for_operator(step, claimed, record)
        return True

    async def leave_for_operator(self, step: Any, claimed: Any, record: InstanceRecord) -> None:
        """The step of an instance that waits for an operator: noted and left, nothing done."""
        why = record.attention_reason or f"the instance is {record.status.value}"
        detail = f"the instance waits for an operator ({why}); nothing done"[:1000]
        await self._leave_step(step, claimed, Action.NOTE_INSTANCE_FLAGGED, detail)

    async def no_record(self, step: Any, claimed: Any, why: str) -> None:
        """A step whose instance has no record (an invariant violation): only the record may decide,
        once per instance, so nothing is started; the violation is logged and noted on the step."""
        detail = (
            f"{why}; instance {step.instance_id} has no record, so nothing decides for it (an invariant "
            "violation): nothing started or resumed, the step is left as it is"
        )[:1000]
        log.error("step %s/%s: %s", step.instance_id, step.step_id, detail)
        await self._leave_step(step, claimed, Action.NOTE_NO_INSTANCE_RECORD, detail)

    async def _leave_step(self, step: Any, claimed: Any, action: Action, detail: str) -> None:
        """Note ``action`` on the claimed step and leave it until :data:`FLAGGED_LOOK_SECONDS` from now."""
        await _io(
            self.ledger.update,
            claimed,
            actor=self.tick.actor,
            reason=f"{action.value}: {detail}",
            deadline=self.tick.now + timedelta(seconds=FLAGGED_LOOK_SECONDS),
        )
        self.tick.decided(step, action, telemetry.OUTCOME_OK, detail)

    async def recover(self, record: InstanceRecord, why: str) -> None:
        orchestration_id = record.orchestration_id or record.instance_id
        cause = await self.tick.failure_of(orchestration_id)
        if cause is not None and cause == record.last_error:
            # failed exactly as before its last resume: no repetition can fix it, no resume is spent
            await self.compensate(record, f"{why}; it failed the same way after a resume", cause=cause)
        elif record.on_scheduler_lost == "resume" and record.resume_count < record.max_resumes:
            await self.resume(record, why, cause=cause)
        else:
            exhausted = record.on_scheduler_lost == "resume"
            await self.compensate(record, why, exhausted=exhausted, cause=cause)

    async def compensation_lost(self, record: InstanceRecord) -> None:
        compensation_id = compensation_instance_id(record.instance_id)
        status = await self.tick.status_of(compensation_id)
        if status in ALIVE_STATUSES:
            await self.late(record, compensation_id, status)
            return
        reason = f"instance is Compensating and compensation {compensation_id} is {status}"
        cause = await self.tick.failure_of(compensation_id)
        budget = self.tick.services.settings.max_compensation_restarts
        spent = record.compensation_restarts >= budget
        if spent or (cause is not None and cause == record.last_error):
            why = (
                f"restarted {record.compensation_restarts} time(s), the budget (MAX_COMPENSATION_RESTARTS)"
                if spent
                else "it failed the same way after a restart: no repetition can fix it"
            )
            await self.give_up(record, InstanceAction.GIVE_UP_COMPENSATION, f"{reason}; {why}", cause)
            return
        claimed = await self.claim(
            record,
            IS.COMPENSATING,
            reason,
            stalls=0,
            compensation_restarts=record.compensation_restarts + 1,
            last_error=cause[:MAX_TEXT] if cause else record.last_error,
        )
        if claimed is not None:
            await self.start_compensation(
                record, f"supervisor: {reason}", InstanceAction.RESTART_COMPENSATION
            )

    async def late(self, record: InstanceRecord, orchestration_id: str, status: str) -> None:
        """The scheduler (or, Compensating, the compensation) runs but broke its promise: noted once,
        then terminated (counted in ``stalls``) so the next tick resumes (or restarts) it; terminations
        that do not take are bounded by ``MAX_SCHEDULER_TERMINATIONS``."""
        scheduler = record.status is not IS.COMPENSATING
        to = IS.RUNNING if scheduler else IS.COMPENSATING
        name = f"orchestration {orchestration_id}" if scheduler else f"compensation {orchestration_id}"
        late = (self.tick.now - record.scheduler_deadline).total_seconds() if record.scheduler_deadline else 0
        past = f" {late:.0f}s" if scheduler else ""
        if record.stalls == 0:
            watched = f" but{past} past its promise" if scheduler else "; its own steps' deadlines watch it"
            detail = f"{name} is {status}{watched}; looking again in {self.tick.lease.total_seconds():.0f}s"
            if await self.claim(record, to, detail, stalls=1) is not None:
                note = InstanceAction.NOTE_LATE if scheduler else InstanceAction.NOTE_COMPENSATION_RUNNING
                await self.decided(record, note, detail)
            return
        terminated = record.stalls - 1  # terminations since the last resume (or operator action)
        budget = self.tick.services.settings.max_scheduler_terminations
        if terminated >= budget:
            # the terminations did not take, and nothing may replace an orchestration that still runs
            detail = (
                f"{name} is still {status}{past} past its promise after {terminated} termination(s), "
                "the budget (MAX_SCHEDULER_TERMINATIONS)"
            )
            stuck = f"scheduler {orchestration_id} stalled and could not be terminated" if scheduler else None
            action = InstanceAction.GIVE_UP_SCHEDULER if scheduler else InstanceAction.GIVE_UP_COMPENSATION
            await self.give_up(record, action, detail, record.last_error or stuck)
            return
        found_late, then = (
            (" after being found late", "resumes the instance") if scheduler else ("", "restarts it")
        )
        detail = (
            f"{name} is {status} and has not moved for a lease{found_late}: terminated "
            f"(termination {terminated + 1} of at most {budget}); the next tick {then}"
        )
        action = InstanceAction.TERMINATE if scheduler else InstanceAction.TERMINATE_COMPENSATION
        await self.terminate_stalled(record, to, orchestration_id, detail, action)
