"""The moves every instance decision (``instances.py``) is made of: each claims the instance record
(ETag) before any side effect and leaves an audit row, a ``sas.recovery`` record and the
stalled-instances signal.
"""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import Any

from supervisor.watchdog_model import (
    ALIVE_STATUSES,
    SUPERVISOR_PREFIX,
    _io,
    _TickActions,
    record_recovery,
    trace_input,
)
from workflow_core import telemetry
from workflow_core.contracts import (
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

log = logging.getLogger("sas.supervisor.instances")

IS = InstanceStatus


class InstanceAction(StrEnum):
    """What the watchdog did for one instance (the ``action`` of ``sas.recovery``)."""

    RESUME = "resume_instance"  # the scheduler is gone: a new one continues from the ledger
    COMPENSATE = "compensate_instance"  # gone, and the policy (or max_resumes) says compensate
    NOTE_LATE = "note_scheduler_late"  # alive but past its promise: look again after a lease
    TERMINATE = "terminate_stalled_scheduler"  # alive, and still not moving: terminated, resumed next
    TERMINATE_COMPENSATION = "terminate_stalled_compensation"  # the same for a compensation
    RESTART_COMPENSATION = "restart_compensation"  # Compensating with no compensation running
    GIVE_UP_COMPENSATION = "give_up_compensation"  # restarts spent, or the same failure again: flagged
    NOTE_FLAGGED = "note_instance_flagged"  # flagged for an operator: nothing restarted without one
    GIVE_UP_SCHEDULER = "give_up_scheduler"  # terminations of a stalled scheduler spent: flagged
    NOTE_COMPENSATION_RUNNING = "note_compensation_running"
    NOTE_OWNED = "note_instance_owned"  # another tick holds the instance: left to it


class _InstanceActions:
    """The moves of the instance decisions of one tick (``tick`` is that tick)."""

    def __init__(self, tick: _TickActions) -> None:
        self.tick = tick
        self.ledger = tick.ledger

    async def held_elsewhere(self, record: InstanceRecord, why: str) -> bool:
        """Another watchdog tick claimed the instance and its lease has not run out: left to it."""
        held = bool(
            (record.owner or "").startswith(SUPERVISOR_PREFIX)
            and record.owner != self.tick.actor
            and record.scheduler_deadline is not None
            and record.scheduler_deadline > self.tick.now
        )
        if held:
            await self.decided(record, InstanceAction.NOTE_OWNED, f"{why}; {record.owner} holds the instance")
        return held

    async def resume(
        self, record: InstanceRecord, why: str, *, cause: str | None = None, **changes: Any
    ) -> None:
        from workflow_core.workflows.store import definition_for

        epoch = record.resume_count + 1
        detail = f"{why}: resumed from the ledger (resume {epoch} of at most {record.max_resumes})"
        recorded = {"last_error": cause[:MAX_TEXT]} if cause else {}  # the failure it is resumed from
        claimed = await self.claim(
            record, IS.RUNNING, detail, resume_count=epoch, stalls=0, **recorded, **changes
        )
        if claimed is None:
            return
        steps = await _io(self.ledger.list_for_instance, record.instance_id)
        # the version the instance is pinned to, even if the YAML changed or went away since
        definition = definition_for(
            record.workflow, record.version, getattr(self.tick.services, "definitions", None)
        )
        # step orchestrations a dead scheduler left running end (best effort: ETags keep stragglers harmless)
        children = {r.orchestration_id for r in steps if is_step_instance_id(r.orchestration_id)}
        for child in sorted(c for c in children if c):
            if await self.tick.status_of(child) in ALIVE_STATUSES:
                try:
                    await self.tick.client.terminate(child, f"supervisor: {why}; the instance is resumed")
                    self.tick._statuses[child] = "Terminated"
                except Exception:
                    log.exception("could not terminate %s before resuming %s", child, record.instance_id)
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
        """``exhausted``: it cannot go on by itself, flagged with the cause; else the policy compensates."""
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

    async def give_up(
        self, record: InstanceRecord, action: InstanceAction, detail: str, cause: str | None
    ) -> None:
        """Flag the instance for an operator with the cause: ``GIVE_UP_COMPENSATION`` makes it
        CompensationFailed; ``GIVE_UP_SCHEDULER`` leaves it Running but *parked* (no scheduler
        deadline): no tick acts on it until an operator does, or its scheduler promises again."""
        scheduler = action is InstanceAction.GIVE_UP_SCHEDULER
        who = "supervisor gave up" if scheduler else "compensation gave up"
        cause = cause or detail
        claimed = await self.claim(
            record,
            IS.RUNNING if scheduler else IS.COMPENSATION_FAILED,
            detail,
            park=scheduler,
            needs_attention=True,
            attention_reason=f"{who}: {detail}; cause: {cause}"[:1000],
            last_error=cause[:MAX_TEXT],
        )
        if claimed is not None:
            await self.decided(record, action, f"{detail}; cause: {cause[:500]}")

    async def terminate_stalled(
        self,
        record: InstanceRecord,
        status: InstanceStatus,
        orchestration_id: str,
        detail: str,
        action: InstanceAction = InstanceAction.TERMINATE,
    ) -> None:
        """Terminate a live orchestration that stopped moving, counted (``stalls + 1``) in the claim
        before it, the instance due at once so the next tick replaces it; a refused termination is kept
        in ``last_error``."""
        claimed = await self.claim(record, status, detail, stalls=record.stalls + 1, due_now=True)
        if claimed is None:
            return
        try:
            await self.tick.client.terminate(orchestration_id, f"supervisor: {detail}")
            self.tick._statuses[orchestration_id] = "Terminated"
        except Exception as exc:
            failed = f"terminating {orchestration_id} failed: {type(exc).__name__}: {exc}"[:MAX_TEXT]
            await _io(
                self.ledger.update_instance, claimed, actor=self.tick.actor, reason=failed, last_error=failed
            )
            detail = f"{detail}; {failed}"
        await self.decided(record, action, detail)

    def settle_given_up_step(self, step: Any, record: InstanceRecord) -> None:
        """A step left Compensating by a compensation that gave up: CompensationFailed."""
        cause = record.last_error or record.attention_reason or "compensation gave up"
        try:
            current = self.ledger.get(step.instance_id, step.step_id)
            if current.status is StepStatus.COMPENSATING:
                self.ledger.transition(
                    current,
                    StepStatus.COMPENSATION_FAILED,
                    actor=self.tick.actor,
                    reason=f"the instance's compensation gave up: {record.attention_reason or ''}"[:1000],
                    last_error=cause[:MAX_TEXT],
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
        park: bool = False,
        **changes: Any,
    ) -> InstanceRecord | None:
        """ETag-claim the instance for this tick, with the counters a decision spends (``changes``);
        None when someone changed it first. ``park``: no scheduler deadline (:meth:`give_up`)."""
        deadline = None if park else self.tick.now if due_now else self.tick.now + self.tick.lease
        try:
            return await _io(
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
        await self.tick.start_compensation_orchestration(record, record.workflow, reason)
        await self.decided(record, action, f"{reason}; compensation {compensation_id} started")

    async def decided(self, record: InstanceRecord, action: InstanceAction, detail: str) -> None:
        self.tick.report.actions[action.value] += 1
        self.tick.report.instance_decisions.append(
            (record.instance_id, record.status.value, action.value, detail)
        )
        await _io(
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
        record_recovery(self.tick.report, record, action.value, telemetry.OUTCOME_OK, detail)
