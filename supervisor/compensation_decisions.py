"""The watchdog's decisions that start, nudge or fail a compensation.

Its own module because compensation has its own orchestration (``compensation_instance_id``), its
own in-flight statuses on the step row and its own hazard: a scheduler still running must be ended
before a compensation is started here (see :meth:`_TickActions.end_scheduler`). The
work-step decisions in ``step_decisions.py`` hand over to these when an orchestration is gone.
"""

from __future__ import annotations

from datetime import timedelta

from supervisor.instance_actions import trace_input
from supervisor.instances import InstanceSupervisor
from supervisor.tick_actions import _TickActions
from supervisor.watchdog_model import (
    ALIVE_STATUSES,
    COMP_FAILED,
    COMP_IN_FLIGHT,
    COMP_TIMED_OUT,
    COMPENSATION_OVERRUN_ERROR,
    SUPERVISOR_PREFIX,
    UNKNOWN_STATUS,
    Action,
    _io,
    _operator_requested,
)
from workflow_core import telemetry
from workflow_core.contracts import (
    COMPENSATION_ORCHESTRATOR,
    ResultMessage,
    compensation_instance_id,
    result_event_name,
)
from workflow_core.ledger import StepRecord, StepStatus

S = StepStatus


class _CompensationDecisions(_TickActions):
    """Compensation decisions of one tick (see docs/supervisor.md for the decision table)."""

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
        await self.client.start_new(
            COMPENSATION_ORCHESTRATOR,
            compensation_id,
            {
                "instance_id": found.instance_id,
                "workflow": found.workflow_name,
                "reason": reason,
                # the compensation's dispatches continue the step's trace (observability only)
                **trace_input(found),
            },
        )
        self._statuses[compensation_id] = "Pending"  # other steps of this instance in this tick see it
        self.decided(found, Action.START_COMPENSATION, telemetry.OUTCOME_OK, detail)

    async def compensating(self, found: StepRecord, claimed: StepRecord, lateness: timedelta) -> None:
        compensation_id = compensation_instance_id(found.instance_id)
        status = await self.status_of(compensation_id)
        if status not in ALIVE_STATUSES:
            who = f"requested by {found.owner}" if _operator_requested(found) else "overdue"
            reason = f"supervisor: step {found.step_id} is Compensating ({who}) with no compensation running"
            # The instance record decides: it is claimed (-> Compensating) first, so one start per
            # instance across ticks and no resume of the scheduler this ends. Only an instance that
            # already ended (its record cannot move) leaves the start to the step.
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
        if found.compensation_status in COMP_IN_FLIGHT:
            # Mirror check_compensation: the attempt is over as far as the ledger is concerned.
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
        result = ResultMessage(
            kind="compensate",
            instance_id=found.instance_id,
            orchestration_id=compensation_id,
            step_id=found.step_id,
            attempt=attempt,
            outcome="failed",
            error=found.last_error
            if found.compensation_status == COMP_FAILED
            else COMPENSATION_OVERRUN_ERROR,
        )
        await self.client.raise_event(
            compensation_id,
            result_event_name(found.step_id, attempt, "compensate"),
            result.model_dump(mode="json"),
        )
        self.decided(found, Action.FAIL_COMPENSATION, telemetry.OUTCOME_OK, detail, attempt=attempt)
