"""The watchdog's decision for one overdue step, the decision table of docs/supervisor.md in code:
:meth:`_Tick.handle` reads the step and its orchestration's real state and picks one action, made of
the moves of ``watchdog_model._TickActions``.
"""

from __future__ import annotations

from datetime import timedelta

from supervisor.instances import InstanceSupervisor
from supervisor.watchdog_model import (
    ALIVE_STATUSES,
    COMPENSATION_OVERRUN_ERROR,
    OVERRUN_ERROR,
    SETTLED_ATTEMPT,
    SUPERVISOR_PREFIX,
    UNKNOWN_STATUS,
    Action,
    _io,
    _operator_requested,
    _TickActions,
    step_deadline_seconds,
)
from workflow_core import telemetry
from workflow_core.contracts import (
    ResultMessage,
    StepKind,
    compensation_instance_id,
    result_event_name,
)
from workflow_core.ledger import StepRecord, StepStatus
from workflow_core.ledger.model import COMP_FAILED, COMP_IN_FLIGHT, COMP_TIMED_OUT, GIVEN_UP
from workflow_core.ledger.scheduler_gone import bring_forward, is_instance_gone
from workflow_core.messages import work_message
from workflow_core.workflows.loader import agent_pools
from workflow_core.workflows.pools import pool_queue, route_pool

S = StepStatus


class _Tick(_TickActions):
    """One watchdog tick: the per-step decisions, on the moves of :class:`_TickActions`."""

    async def handle(self, found: StepRecord) -> None:
        """Decide for one overdue step. A decision that times an attempt out is itself the claim (one
        ETag-guarded write before any side effect); those that only look, note or re-send claim first."""
        assert found.deadline is not None  # overdue() only returns steps with a deadline
        lateness = self.now - found.deadline

        if found.status is S.COMPENSATING:
            claimed = await self.claim(found)
            if claimed is not None:
                await self.compensating(found, claimed, lateness)
            return

        orchestration_id = found.orchestration_id or found.instance_id
        orchestration = await self.status_of(orchestration_id)
        in_flight = found.status in (S.DISPATCHED, S.RUNNING)
        if orchestration not in ALIVE_STATUSES:
            why = (
                f"orchestration {orchestration_id} is {orchestration} "
                f"while step {found.step_id} is {found.status.value}"
            )
            if in_flight:  # nobody waits for its result: abandoned, the ledger says why
                done = await self.claim_with(
                    found,
                    self.time_out_now,
                    found,
                    reason=f"{why}; no orchestration waits for its result",
                    last_error=f"supervisor: {why}",
                )
            else:
                done = await self.claim(found)
            if done is None:
                return
            # the instance record decides between resume and compensation, once per instance
            if not await InstanceSupervisor(self).step_orphaned(found, done, why):
                await self.start_compensation(found, reason=f"supervisor: {why}")
            return
        # alive: an in-flight attempt past the grace not due a re-send fails at once (the write claims)
        if (
            not self.within_grace(found, lateness)
            and in_flight
            and not self.resend_due(found)
            and found.compensation_status != GIVEN_UP
        ):
            await self.fail_step(found, None, orchestration_id, orchestration, lateness)
            return
        acted_last = bool(found.owner and found.owner.startswith(SUPERVISOR_PREFIX))
        claimed = await self.claim(found)
        if claimed is None:
            return
        if acted_last and await InstanceSupervisor(self).step_of_flagged(found, claimed):
            return  # the watchdog acted on it before and nothing moved since: its instance is flagged
        if found.compensation_status == GIVEN_UP:
            # the scheduler starts (or runs) the compensation: starting it here would race it for the id
            status = await self.status_of(compensation_instance_id(found.instance_id))
            detail = (
                f"step was given up; orchestration {orchestration_id} is {orchestration} and its "
                f"compensation is {status}; the scheduler starts it"
            )
            await self.note(found, Action.NOTE_COMPENSATION_RUNNING, detail)
            self.decided(found, Action.NOTE_COMPENSATION_RUNNING, telemetry.OUTCOME_OK, detail)
        elif self.within_grace(found, lateness):
            await self.release_with_note(found, claimed, lateness, f"orchestration {orchestration}")
        elif self.resend_due(found):
            await self.resend(found, claimed)
        elif found.status is S.RETRYING and not _operator_requested(found):
            detail = (
                f"Retrying {lateness.total_seconds():.0f}s past its backoff deadline while orchestration "
                f"{orchestration_id} is {orchestration}: it missed its backoff timer; next look in "
                f"{self.lease.total_seconds():.0f}s"
            )
            await self.note(found, Action.NOTE_RETRY_OVERRUN, detail)
            self.decided(found, Action.NOTE_RETRY_OVERRUN, telemetry.OUTCOME_OK, detail)
        else:
            await self.fail_step(found, claimed, orchestration_id, orchestration, lateness)

    @staticmethod
    def resend_due(found: StepRecord) -> bool:
        """A Dispatched attempt nobody claimed, past the grace, not re-sent yet: its send may never have
        left, and the same MessageId again is harmless; once per attempt (docs/supervisor.md,
        ``resend``). A row without an attempt token (hand-made or damaged) has no message to re-send."""
        return found.status is S.DISPATCHED and found.resent_at is None and bool(found.attempt_token)

    async def resend(self, found: StepRecord, claimed: StepRecord) -> None:
        """Send the attempt's message again, then record ``resent_at`` (a crash between: another re-send)."""
        deadline = self.now + timedelta(
            seconds=step_deadline_seconds(found, store=getattr(self.services, "definitions", None))
        )
        message = work_message(found, deadline=deadline)
        pool = route_pool(agent_pools(), message.body)  # its pool's (a canary run: the one it names)
        queue = pool_queue(self.services.settings.work_queue, pool)
        await _io(self.services.transport.send, queue, message)
        detail = (
            f"work message {message.message_id} still unclaimed past the grace after its deadline (never "
            f"sent, e.g. a crash between ledger write and send, or lost); re-sent once to {queue} with the "
            f"same MessageId, new deadline {deadline.isoformat()}"
        )
        await self.hand_back(
            claimed, found, f"{Action.RESEND.value}: {detail}", resent_at=self.now, deadline=deadline
        )
        self.decided(found, Action.RESEND, telemetry.OUTCOME_OK, detail)

    async def fail_step(
        self,
        found: StepRecord,
        claimed: StepRecord | None,
        orchestration_id: str,
        orchestration: str,
        lateness: timedelta,
    ) -> None:
        """The orchestration is alive but missed its deadline timer (or a failed attempt): raise the
        attempt's failed result so it applies its retry policy. ``claimed`` None: the TimedOut write
        is the claim (a lost race skips the step)."""
        error = found.last_error if found.status in SETTLED_ATTEMPT and found.last_error else OVERRUN_ERROR
        detail = (
            f"{found.status.value} {lateness.total_seconds():.0f}s past its deadline (grace "
            f"{self.grace.total_seconds():.0f}s) while orchestration {orchestration_id} is {orchestration}; "
            f"raised a failed result for attempt {found.attempt}"
        )
        if _operator_requested(found):
            detail += f" (requested by {found.owner})"
        reason = f"{Action.FAIL_STEP.value}: {detail}"
        if claimed is None:
            written = await self.claim_with(
                found, self.time_out_now, found, reason=reason, last_error=OVERRUN_ERROR
            )
            if written is None:
                return
        elif found.status in (S.DISPATCHED, S.RUNNING):
            await _io(self.time_out_now, claimed, reason=reason, last_error=OVERRUN_ERROR)
        else:
            await self.note(found, Action.FAIL_STEP, detail)
        try:
            await self.raise_failed(found, "work", orchestration_id, found.attempt, error)
        except Exception as exc:
            if not is_instance_gone(exc):
                raise
            # it died since its status was read: its instance is due now, for the next tick
            detail += f"; not delivered ({exc}): the orchestration is gone"
            record = await _io(self.ledger.find_instance, found.instance_id)
            await _io(bring_forward, self.ledger, record, orchestration_id, actor=self.actor, why=detail)
        self.decided(found, Action.FAIL_STEP, telemetry.OUTCOME_OK, detail)

    async def raise_failed(
        self, found: StepRecord, kind: StepKind, orchestration_id: str, attempt: int, error: str | None
    ) -> None:
        """Raise a failed result for the attempt, as an agent would: the orchestration moves on."""
        result = ResultMessage(
            kind=kind,
            instance_id=found.instance_id,
            orchestration_id=orchestration_id,
            step_id=found.step_id,
            attempt=attempt,
            outcome="failed",
            error=error,
        )
        await self.client.raise_event(
            orchestration_id, result_event_name(found.step_id, attempt, kind), result.model_dump(mode="json")
        )

    async def start_compensation(self, found: StepRecord, *, reason: str) -> None:
        compensation_id = compensation_instance_id(found.instance_id)
        status = await self.status_of(compensation_id)
        if status in ALIVE_STATUSES:
            detail = f"{reason}; compensation {compensation_id} is already {status}"
            await self.note(found, Action.NOTE_COMPENSATION_RUNNING, detail)
            self.decided(found, Action.NOTE_COMPENSATION_RUNNING, telemetry.OUTCOME_OK, detail)
            return
        verb = "started" if status == UNKNOWN_STATUS else f"restarted (was {status})"
        detail = f"{reason}; compensation {compensation_id} {verb}"
        await self.note(found, Action.START_COMPENSATION, detail)
        await self.start_compensation_orchestration(found, found.workflow_name, reason)
        self.decided(found, Action.START_COMPENSATION, telemetry.OUTCOME_OK, detail)

    async def compensating(self, found: StepRecord, claimed: StepRecord, lateness: timedelta) -> None:
        compensation_id = compensation_instance_id(found.instance_id)
        status = await self.status_of(compensation_id)
        if status not in ALIVE_STATUSES:
            who = f"requested by {found.owner}" if _operator_requested(found) else "overdue"
            reason = f"supervisor: step {found.step_id} is Compensating ({who}) with no compensation running"
            # the instance record decides (one start per instance); an ended one leaves it to the step
            if await InstanceSupervisor(self).compensate_for_step(found, claimed, reason):
                return
            await self.end_scheduler(found, reason)
            await self.start_compensation(found, reason=reason)
            return
        if self.within_grace(found, lateness):
            await self.release_with_note(found, claimed, lateness, f"compensation {compensation_id}")
            return
        acted_last = bool(found.owner and found.owner.startswith(SUPERVISOR_PREFIX))
        if acted_last and await InstanceSupervisor(self).step_of_flagged(found, claimed):
            return  # its instance gave up on a compensation that still runs: nothing raised
        attempt = found.compensation_attempt
        detail = (
            f"compensation attempt {attempt} {lateness.total_seconds():.0f}s past its deadline while "
            f"{compensation_id} is {status}; raised a failed compensation result"
        )
        if found.compensation_status in COMP_IN_FLIGHT:  # as check_compensation: the attempt is over
            await _io(
                self.ledger.update,
                claimed,
                actor=self.actor,
                reason=f"{Action.FAIL_COMPENSATION.value}: {detail}",
                compensation_status=COMP_TIMED_OUT,
                last_error=COMPENSATION_OVERRUN_ERROR,
            )
        else:
            await self.note(found, Action.FAIL_COMPENSATION, detail)
        error = found.last_error if found.compensation_status == COMP_FAILED else COMPENSATION_OVERRUN_ERROR
        await self.raise_failed(found, "compensate", compensation_id, attempt, error)
        self.decided(found, Action.FAIL_COMPENSATION, telemetry.OUTCOME_OK, detail, attempt=attempt)
