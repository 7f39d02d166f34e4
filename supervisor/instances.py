"""The watchdog's view of whole workflow instances: a scheduler that died is found and replaced.

Steps carry deadlines only while something is in flight. A scheduler that dies *between* steps, or
before it ever started, leaves no overdue step behind: only its instance record's
``scheduler_deadline`` (the promise every scheduler activity renews) passes. This module decides,
per overdue instance (decision table in docs/supervisor.md):

* its orchestration is gone (no such instance, Completed/Failed/Terminated/Canceled): recover by the
  workflow's ``on_scheduler_lost`` policy — **resume** (start the workflow orchestration again for
  the same instance, from the ledger's state: completed steps are never run again) while
  ``resume_count < max_resumes``, else **compensate** (and raise the attention flag when resumes ran
  out);
* it is alive but did not keep its promise: the first look notes it and waits one lease; a second
  look with still no scheduler activity terminates it, and the next tick resumes it;
* the instance is Compensating and no compensation orchestration runs: restart it.

Exactly once: every action starts with an ETag-conditional claim of the *instance* record (owner
``supervisor:<tick>``, deadline moved a lease ahead). Two watchdog processes that reach the same dead
instance, through the instance or through two of its overdue steps, race for that one row: one
claim wins, the other gets a conflict and does nothing.
"""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from supervisor.watchdog_model import _operator_requested
from workflow_core import telemetry, tracing
from workflow_core.contracts import (
    COMPENSATION_ORCHESTRATOR,
    WORKFLOW_ORCHESTRATOR,
    compensation_instance_id,
    is_step_instance_id,
)
from workflow_core.ledger import (
    InstanceConflict,
    InstanceRecord,
    InstanceStatus,
    LedgerError,
    StepStatus,
    decode_json,
)
from workflow_core.ledger.model import MAX_TEXT
from workflow_core.resume import resume_input

if TYPE_CHECKING:
    from supervisor.step_decisions import _Tick

log = logging.getLogger("sas.supervisor.instances")

IS = InstanceStatus
ALIVE_STATUSES = frozenset({"Running", "Pending", "ContinuedAsNew", "Suspended"})
IN_FLIGHT = frozenset({StepStatus.DISPATCHED, StepStatus.RUNNING})


class InstanceAction(StrEnum):
    """What the watchdog did for one instance (the ``action`` of ``sas.recovery``)."""

    RESUME = "resume_instance"  # the scheduler is gone: a new one continues from the ledger
    COMPENSATE = "compensate_instance"  # gone, and the policy (or max_resumes) says compensate
    NOTE_LATE = "note_scheduler_late"  # alive but past its promise: look again after a lease
    TERMINATE = "terminate_stalled_scheduler"  # alive, and still not moving: terminated, resumed next
    RESTART_COMPENSATION = "restart_compensation"  # Compensating with no compensation running
    GIVE_UP_COMPENSATION = "give_up_compensation"  # restarts spent, or the same failure again: flagged
    NOTE_FLAGGED = "note_instance_flagged"  # flagged for an operator: nothing restarted without one
    NOTE_COMPENSATION_RUNNING = "note_compensation_running"
    NOTE_OWNED = "note_instance_owned"  # another tick holds the instance: left to it


def trace_input(record: Any) -> dict[str, Any]:
    """``{"trace": <carrier>}`` for an orchestration input, from the W3C context a ledger row (step or
    instance record) holds, so a resumed scheduler or a compensation the supervisor starts stays in
    the workflow's trace; {} when the row has none. Observability only."""
    carrier = tracing.from_fields(record.trace_parent, record.trace_state)
    return {tracing.TRACE_FIELD: carrier} if carrier else {}


def supervisor_holds(record: InstanceRecord, tick: _Tick) -> bool:
    """Another watchdog tick claimed the instance and its lease has not run out."""
    return bool(
        record.owner
        and record.owner.startswith("supervisor:")
        and record.owner != tick.actor
        and record.scheduler_deadline is not None
        and record.scheduler_deadline > tick.now
    )


class InstanceSupervisor:
    def __init__(self, tick: _Tick) -> None:
        self.tick = tick
        self.ledger = tick.ledger

    # ---- entry points ------------------------------------------------------------------------------

    async def handle(self, found: InstanceRecord) -> None:
        """One overdue instance from ``ledger.overdue_instances``."""
        if found.status is IS.COMPENSATING:
            await self.compensation_lost(found)
            return
        orchestration_id = found.orchestration_id or found.instance_id
        status = await self.tick.status_of(orchestration_id)
        requested = bool(found.owner and found.owner.startswith("operator:"))
        if status in ALIVE_STATUSES:
            if requested:
                detail = f"{found.owner} asked for a resume, but orchestration {orchestration_id} is {status}"
                if await self.claim(found, IS.RUNNING, detail, stalls=0) is not None:
                    await self.decided(found, InstanceAction.NOTE_LATE, detail)
                return
            await self.alive_but_late(found, orchestration_id, status)
            return
        if requested:  # an operator's resume is not bound by the policy or the resume count
            await self.resume(
                found, f"{found.owner} asked for a resume; orchestration {orchestration_id} is {status}"
            )
            return
        await self.recover(found, f"orchestration {orchestration_id} is {status}")

    async def step_orphaned(self, instance_id: str, why: str) -> bool:
        """A step's orchestration is gone. True when the instance record took over the decision
        (the caller then does nothing more); False when there is no record to decide by."""
        record = await self.tick.io(self.ledger.find_instance, instance_id)
        if record is not None and record.status is IS.STOPPED:  # an operator's: never undone here
            await self.decided(record, InstanceAction.NOTE_FLAGGED, f"{why}; {record.attention_reason}")
            return True
        if record is None or record.status not in (IS.RUNNING, IS.COMPENSATING):
            return False
        if supervisor_holds(record, self.tick):
            await self.decided(record, InstanceAction.NOTE_OWNED, f"{why}; {record.owner} holds the instance")
            return True
        if record.status is IS.COMPENSATING:
            await self.compensation_lost(record)
            return True
        orchestration_id = record.orchestration_id or record.instance_id
        status = await self.tick.status_of(orchestration_id)
        if status in ALIVE_STATUSES:
            # e.g. a parallel member's orchestration died: its parent learns of it and moves on, or
            # stops moving and is found by its own promise.
            await self.decided(
                record, InstanceAction.NOTE_LATE, f"{why}; the instance's orchestration is {status}"
            )
            return True
        await self.recover(record, f"{why}; the instance's orchestration {orchestration_id} is {status}")
        return True

    async def compensate_for_step(self, step: Any, reason: str) -> bool:
        """A step is Compensating (an operator asked, or a compensation died) and no compensation
        runs. True when the instance record took it over: claimed -> Compensating, the scheduler
        ended if it still runs, the compensation started once; False without a record."""
        record = await self.tick.io(self.ledger.find_instance, step.instance_id)
        if record is None or record.status in (IS.SUCCEEDED, IS.COMPENSATED, IS.CANCELLED):
            return False
        if supervisor_holds(record, self.tick):
            await self.decided(
                record, InstanceAction.NOTE_OWNED, f"{reason}; {record.owner} holds the instance"
            )
            return True
        if record.status is IS.COMPENSATION_FAILED and not _operator_requested(step):
            # flagged (its compensation gave up): only an operator's retry of a step starts it again;
            # the step settles as CompensationFailed, out of the deadline index, in the inbox
            await self.tick.io(self.settle_given_up_step, step, record)
            await self.decided(
                record, InstanceAction.NOTE_FLAGGED, f"{reason}; the instance waits for an operator"
            )
            return True
        # Out of CompensationFailed the flag that outcome raised is answered (and the restart budget
        # renewed: an operator acted); failing again raises it.
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

    # ---- decisions -------------------------------------------------------------------------------

    async def recover(self, record: InstanceRecord, why: str) -> None:
        orchestration_id = record.orchestration_id or record.instance_id
        cause = await self.tick.failure_of(orchestration_id)
        if cause is not None and cause == record.last_error:
            # its scheduler failed exactly as before its last resume (a derived input over a size
            # limit, a definition error): no repetition can fix it, so no resume budget is spent on it
            await self.compensate(record, f"{why}; it failed the same way after a resume", cause=cause)
        elif record.on_scheduler_lost == "resume" and record.resume_count < record.max_resumes:
            await self.resume(record, why, cause=cause)
        else:
            exhausted = record.on_scheduler_lost == "resume"
            await self.compensate(record, why, exhausted=exhausted, cause=cause)

    async def resume(self, record: InstanceRecord, why: str, *, cause: str | None = None) -> None:
        from workflow_core.workflows.store import definition_for

        epoch = record.resume_count + 1
        detail = f"{why}: resumed from the ledger (resume {epoch} of at most {record.max_resumes})"
        recorded = {"last_error": cause[:MAX_TEXT]} if cause else {}  # the failure it is resumed from
        claimed = await self.claim(record, IS.RUNNING, detail, resume_count=epoch, stalls=0, **recorded)
        if claimed is None:
            return
        steps = await self.tick.io(self.ledger.list_for_instance, record.instance_id)
        # the version the instance is pinned to, even if the YAML changed or went away since
        definition = definition_for(
            record.workflow, record.version, getattr(self.tick.services, "definitions", None)
        )
        await self.stop_orphaned_children(steps, record.instance_id, why)
        payload = resume_input(
            definition,
            decode_json(record.input_ref) or {},
            steps,
            epoch=epoch,
            generation=record.generation,
            version=record.version,
        )
        payload.update(trace_input(record))
        await self.tick.client.start_new(WORKFLOW_ORCHESTRATOR, record.instance_id, payload)
        self.tick._statuses[record.instance_id] = "Pending"
        done = len(payload.get("state", {}).get("completed", []))
        await self.decided(record, InstanceAction.RESUME, f"{detail}; {done} completed step(s) kept")

    async def compensate(
        self, record: InstanceRecord, why: str, *, exhausted: bool = True, cause: str | None = None
    ) -> None:
        """``exhausted``: the instance could not go on by itself (resumes spent, or a failure no
        resume fixes): flagged with the cause; else the workflow's policy asked for compensation."""
        reason = f"{why}: " + (
            f"{record.resume_count} resume(s) used of {record.max_resumes}; compensating"
            if exhausted
            else "policy on_scheduler_lost is compensate"
        )
        changes: dict[str, Any] = {"last_error": cause[:MAX_TEXT]} if cause else {}
        if exhausted:
            because = f"; cause: {cause}" if cause else ""
            changes["needs_attention"] = True
            changes["attention_reason"] = f"supervisor: {reason}{because}"[:1000]
        claimed = await self.claim(record, IS.COMPENSATING, reason, **changes)
        if claimed is None:
            return
        await self.start_compensation(record, f"supervisor: {reason}", InstanceAction.COMPENSATE)

    async def compensation_lost(self, record: InstanceRecord) -> None:
        compensation_id = compensation_instance_id(record.instance_id)
        status = await self.tick.status_of(compensation_id)
        if status in ALIVE_STATUSES:
            detail = f"compensation {compensation_id} is {status}; its own steps' deadlines watch it"
            claimed = await self.claim(record, IS.COMPENSATING, detail)
            if claimed is not None:
                await self.decided(record, InstanceAction.NOTE_COMPENSATION_RUNNING, detail)
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
            await self.give_up_compensation(record, f"{reason}; {why}", cause)
            return
        claimed = await self.claim(
            record,
            IS.COMPENSATING,
            reason,
            compensation_restarts=record.compensation_restarts + 1,
            last_error=cause[:MAX_TEXT] if cause else record.last_error,
        )
        if claimed is None:
            return
        await self.start_compensation(record, f"supervisor: {reason}", InstanceAction.RESTART_COMPENSATION)

    async def give_up_compensation(self, record: InstanceRecord, detail: str, cause: str | None) -> None:
        """The compensation cannot finish on its own: the instance becomes CompensationFailed, flagged
        with the cause (the compensation orchestration's own failure) where operators look (the
        attention inbox, ``sas stalled``, the console), and nothing restarts it until an operator
        retries a step (which answers the flag and resets the budget)."""
        cause = cause or detail
        claimed = await self.claim(
            record,
            IS.COMPENSATION_FAILED,
            detail,
            needs_attention=True,
            attention_reason=f"compensation gave up: {detail}; cause: {cause}"[:1000],
            last_error=cause[:MAX_TEXT],
        )
        if claimed is not None:
            await self.decided(record, InstanceAction.GIVE_UP_COMPENSATION, f"{detail}; cause: {cause[:500]}")

    async def alive_but_late(self, record: InstanceRecord, orchestration_id: str, status: str) -> None:
        late = (self.tick.now - record.scheduler_deadline).total_seconds() if record.scheduler_deadline else 0
        if record.stalls == 0:
            detail = (
                f"orchestration {orchestration_id} is {status} but {late:.0f}s past its promise; "
                f"looking again in {self.tick.lease.total_seconds():.0f}s"
            )
            if await self.claim(record, IS.RUNNING, detail, stalls=1) is not None:
                await self.decided(record, InstanceAction.NOTE_LATE, detail)
            return
        detail = (
            f"orchestration {orchestration_id} is {status} and has not moved for a lease after being "
            "found late: terminated; the next tick resumes the instance"
        )
        claimed = await self.claim(record, IS.RUNNING, detail, stalls=record.stalls + 1, due_now=True)
        if claimed is None:
            return
        await self.tick.client.terminate(orchestration_id, f"supervisor: {detail}")
        self.tick._statuses[orchestration_id] = "Terminated"
        await self.decided(record, InstanceAction.TERMINATE, detail)

    # ---- helpers -----------------------------------------------------------------------------------

    def settle_given_up_step(self, step: Any, record: InstanceRecord) -> None:
        """A step left Compensating by a compensation that gave up: CompensationFailed, with the
        instance's cause (a lost race leaves it to whoever wrote first)."""
        try:
            current = self.ledger.get(step.instance_id, step.step_id)
            if current.status is StepStatus.COMPENSATING:
                self.ledger.transition(
                    current,
                    StepStatus.COMPENSATION_FAILED,
                    actor=self.tick.actor,
                    reason=f"the instance's compensation gave up: {record.attention_reason or ''}"[:1000],
                    last_error=(record.last_error or record.attention_reason or "compensation gave up")[
                        :MAX_TEXT
                    ],
                )
        except LedgerError as exc:
            log.info("step %s/%s left as it is: %s", step.instance_id, step.step_id, exc)

    async def claim(
        self,
        record: InstanceRecord,
        to: InstanceStatus,
        reason: str,
        *,
        due_now: bool = False,
        **changes: Any,
    ) -> InstanceRecord | None:
        """ETag-claim the instance for this tick (None: someone else changed it first)."""
        deadline = self.tick.now if due_now else self.tick.now + self.tick.lease
        try:
            return await self.tick.io(
                self.ledger.transition_instance,
                record,
                to,
                actor=self.tick.actor,
                reason=f"claimed by watchdog tick {self.tick.report.tick_id}: {reason}",
                owner=self.tick.actor,
                scheduler_deadline=deadline,
                **changes,
            )
        except InstanceConflict:
            self.tick.report.conflicts += 1
            log.info("instance %s changed before it could be claimed; skipped", record.instance_id)
            return None

    async def start_compensation(self, record: InstanceRecord, reason: str, action: InstanceAction) -> None:
        compensation_id = compensation_instance_id(record.instance_id)
        status = await self.tick.status_of(compensation_id)
        if status in ALIVE_STATUSES:
            await self.decided(
                record, InstanceAction.NOTE_COMPENSATION_RUNNING, f"{reason}; {compensation_id} is {status}"
            )
            return
        await self.tick.client.start_new(
            COMPENSATION_ORCHESTRATOR,
            compensation_id,
            {
                "instance_id": record.instance_id,
                "workflow": record.workflow,
                "reason": reason,
                **trace_input(record),
            },
        )
        self.tick._statuses[compensation_id] = "Pending"
        await self.decided(record, action, f"{reason}; compensation {compensation_id} started")

    async def stop_orphaned_children(self, steps: list, instance_id: str, why: str) -> None:
        """Terminate step orchestrations a dead scheduler left running, so only the resumed one
        drives the instance's steps (best effort: the ledger's ETags keep a straggler harmless)."""
        children = {r.orchestration_id for r in steps if is_step_instance_id(r.orchestration_id)}
        for child in sorted(c for c in children if c):
            if await self.tick.status_of(child) in ALIVE_STATUSES:
                try:
                    await self.tick.client.terminate(child, f"supervisor: {why}; the instance is resumed")
                    self.tick._statuses[child] = "Terminated"
                except Exception:
                    log.exception("could not terminate %s before resuming %s", child, instance_id)

    async def decided(self, record: InstanceRecord, action: InstanceAction, detail: str) -> None:
        self.tick.report.actions[action.value] += 1
        self.tick.report.instance_decisions.append(
            (record.instance_id, record.status.value, action.value, detail)
        )
        await self.tick.io(
            self.ledger.note,
            record.instance_id,
            "*",
            actor=self.tick.actor,
            action="recovery",
            reason=f"{action.value}: {detail}",
            status=record.status.value,
        )
        if action not in (InstanceAction.NOTE_OWNED, InstanceAction.NOTE_COMPENSATION_RUNNING):
            # the stalled-instances alert counts these (docs/operations.md)
            telemetry.record_instance_stalled(
                record.instance_id,
                workflow=record.workflow,
                action=action.value,
                resume_count=record.resume_count,
                tick_id=self.tick.report.tick_id,
            )
        telemetry.record_recovery(
            record.instance_id,
            "*",
            record.resume_count,
            action.value,
            telemetry.OUTCOME_OK,
            workflow=record.workflow,
            status=record.status.value,
            tick_id=self.tick.report.tick_id,
            reason=detail,
        )
