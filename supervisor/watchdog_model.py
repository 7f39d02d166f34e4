"""The watchdog's vocabulary (its decisions, a tick's report, its constants) and the moves every step
decision is made of, which carry its exactly-once guarantee: an ETag-guarded claim before any side
effect, an audit row and a ``sas.recovery`` record for every decision.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, TypeVar

from workflow_core import telemetry, tracing
from workflow_core.contracts import COMPENSATION_ORCHESTRATOR, compensation_instance_id
from workflow_core.ledger import ConcurrencyConflict, StepNotFound, StepRecord, StepStatus
from workflow_core.ledger.model import COMP_IN_FLIGHT
from workflow_core.ledger.scheduler_gone import ALIVE_STATUSES  # the orchestration still reacts

log = logging.getLogger("sas.supervisor.watchdog")

S = StepStatus
T = TypeVar("T")

SUPERVISOR_PREFIX = "supervisor:"
OPERATOR_PREFIX = "operator:"
DEFAULT_LEASE_SECONDS = 300.0
FALLBACK_STEP_DEADLINE_SECONDS = 300.0  # only when the step's workflow definition cannot be found
ERROR_ACTION = "watchdog_error"  # telemetry action of a step the tick failed on (retried after the lease)
OVERRUN_ERROR = "supervisor: deadline overrun"
COMPENSATION_OVERRUN_ERROR = "supervisor: compensation deadline overrun"
# A step of a flagged (or record-less) instance is looked at again this much later, not every lease.
FLAGGED_LOOK_SECONDS = 86_400.0

UNKNOWN_STATUS = "Unknown"

# Work statuses whose attempt is over (its error, if any, is in ``last_error``).
SETTLED_ATTEMPT = frozenset({S.FAILED, S.TIMED_OUT, S.RETRYING})


class Action(StrEnum):
    """What the watchdog decided for one step (the ``action`` dimension of ``sas.recovery``)."""

    RESEND = "resend"  # work message lost between ledger write and send: re-sent, same MessageId
    NOTE_OVERRUN = "note_overrun"  # overran by less than the grace; the orchestration's timer handles it
    FAIL_STEP = "fail_step"  # orchestration missed its timer: step -> TimedOut, failed result raised
    NOTE_RETRY_OVERRUN = "note_retry_overrun"  # Retrying past its backoff with the orchestration alive
    START_COMPENSATION = "start_compensation"  # orchestration gone: compensation orchestration started
    NOTE_COMPENSATION_RUNNING = "note_compensation_running"  # compensation already runs (or is due)
    FAIL_COMPENSATION = "fail_compensation"  # compensation attempt overran: failed result raised
    END_SCHEDULER = "end_scheduler"  # compensation starts while the scheduler lives: scheduler terminated
    NOTE_INSTANCE_FLAGGED = "note_instance_flagged"  # its instance waits for an operator: nothing done
    NOTE_NO_INSTANCE_RECORD = "note_no_instance_record"  # invariant broken: no record decides; left as is


@dataclass(frozen=True)
class Decision:
    instance_id: str
    step_id: str
    status: str  # the step's status when the tick found it
    action: str
    outcome: str
    detail: str = ""


@dataclass
class TickReport:
    """What one tick did. ``actions`` counts decisions by :class:`Action` value."""

    tick_id: str
    now: datetime
    overdue: int = 0  # overdue steps the ledger returned (at most the batch size)
    claimed: int = 0
    conflicts: int = 0  # claims lost to someone else (another tick, an agent, the scheduler)
    errors: int = 0
    actions: Counter[str] = field(default_factory=Counter)
    decisions: list[Decision] = field(default_factory=list)
    overdue_instances: int = 0  # instances past their scheduler deadline (supervisor/instances.py)
    # (instance, status, action, detail) of every instance-level decision
    instance_decisions: list[tuple[str, str, str, str]] = field(default_factory=list)
    index_entities_read: int = 0
    step_entities_read: int = 0
    duration_seconds: float = 0.0

    def count(self, action: Action | str) -> int:
        return self.actions[action.value if isinstance(action, Action) else action]

    def summary(self) -> str:
        acted = ", ".join(f"{k}={v}" for k, v in sorted(self.actions.items())) or "nothing to do"
        return (
            f"watchdog tick {self.tick_id}: {self.overdue} overdue steps, "
            f"{self.overdue_instances} overdue instances, {self.claimed} claimed, "
            f"{self.conflicts} conflicts, {self.errors} errors; {acted} "
            f"({self.index_entities_read} index rows read, {self.duration_seconds:.3f}s)"
        )


def runtime_status_name(status: Any) -> str:
    """``get_status`` result -> "Running", "Completed", ... or "Unknown" (no such instance)."""
    if isinstance(status, dict):
        value = status.get("runtimeStatus")
    else:
        value = getattr(status, "runtime_status", None)
    return UNKNOWN_STATUS if value is None else str(getattr(value, "value", value))


def step_deadline_seconds(record: StepRecord, store: Any = None) -> float:
    """The step's ``deadline_seconds`` from its pinned workflow definition."""
    try:
        from workflow_core.workflows.store import definition_for

        version = record.workflow_version
        step = definition_for(record.workflow_name, version, store if version else None).step(record.step_id)
    except Exception as exc:  # unknown workflow/step, or a definition that no longer loads
        log.warning(
            "no definition for step %s of workflow %s (%s); using a %ss deadline",
            record.step_id,
            record.workflow_name,
            exc,
            FALLBACK_STEP_DEADLINE_SECONDS,
        )
        return FALLBACK_STEP_DEADLINE_SECONDS
    return float(step.deadline_seconds)


def trace_input(record: Any) -> dict[str, Any]:
    """The orchestration input's ``trace`` from a ledger row's W3C context (observability only)."""
    carrier = tracing.from_fields(record.trace_parent, record.trace_state)
    return {tracing.TRACE_FIELD: carrier} if carrier else {}


_io = asyncio.to_thread  # blocking ledger/transport calls run off the event loop the worker shares


def record_recovery(
    report: TickReport, record: Any, action: str, outcome: str, reason: str, attempt: int | None = None
) -> None:
    """The ``sas.recovery`` record of a tick's decision (or error) on a step, or an instance (step ``*``)."""
    step = isinstance(record, StepRecord)
    telemetry.record_recovery(
        record.instance_id,
        record.step_id if step else "*",
        attempt if attempt is not None else record.attempt if step else record.resume_count,
        action,
        outcome,
        workflow=record.workflow_name if step else record.workflow,
        status=record.status.value,
        tick_id=report.tick_id,
        reason=reason,
    )


def _operator_requested(record: StepRecord) -> bool:
    """An operator moved the step (``retry``/``compensate`` CLI) and wants the watchdog to act now."""
    return bool(record.owner and record.owner.startswith(OPERATOR_PREFIX))


class _TickActions:
    """One tick's state (its time, lease, grace, the orchestration statuses it read) and its moves."""

    def __init__(self, client: Any, services: Any, report: TickReport) -> None:
        self.client = client  # a DurableOrchestrationClient: get_status, raise_event, terminate, start_new
        self.ledger = services.ledger
        self.services = services
        self.report = report
        self.now = report.now
        self.actor = f"{SUPERVISOR_PREFIX}{report.tick_id}"
        self.grace = timedelta(seconds=services.settings.watchdog_grace_seconds)
        self.lease = timedelta(seconds=DEFAULT_LEASE_SECONDS)
        self._statuses: dict[str, str] = {}

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
        record_recovery(self.report, record, action.value, outcome, detail, attempt)

    def time_out_now(self, record: StepRecord, *, reason: str, last_error: str) -> StepRecord:
        """Blocking: ``record`` -> TimedOut, claimed for the lease; ``sas.step.duration`` ``timed_out``."""
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
        sent = record.sent_at()
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
        """Run ``write`` (ETag-guarded on ``found``) as this tick's claim; None when someone won."""
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
        """Overran an attempt deadline by less than the grace, so the orchestration's own timer handles
        it (docs/supervisor.md, "Grace"); operator requests and rows waiting for the scheduler are due."""
        if lateness >= self.grace or _operator_requested(found):
            return False
        if found.status in (S.DISPATCHED, S.RUNNING):
            return True
        return found.status is S.COMPENSATING and found.compensation_status in COMP_IN_FLIGHT

    async def hand_back(self, claimed: StepRecord, found: StepRecord, reason: str, **changes: Any) -> None:
        """Write the step this tick claimed back to the owner it had when the tick found it."""
        await _io(self.ledger.update, claimed, actor=self.actor, reason=reason, owner=found.owner, **changes)

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
        reason = f"released by watchdog tick {self.report.tick_id}: {action.value}"
        await self.hand_back(claimed, found, reason, deadline=found.deadline)
        self.decided(found, action, telemetry.OUTCOME_OK, detail)

    async def start_compensation_orchestration(self, record: Any, workflow: str, reason: str) -> None:
        """Start the instance's compensation; its dispatches continue the record's trace."""
        compensation_id = compensation_instance_id(record.instance_id)
        payload = {"instance_id": record.instance_id, "workflow": workflow, "reason": reason}
        await self.client.start_new(COMPENSATION_ORCHESTRATOR, compensation_id, payload | trace_input(record))
        self._statuses[compensation_id] = "Pending"  # other rows of this instance in this tick see it

    async def end_scheduler(self, found: StepRecord, reason: str) -> None:
        """Terminate the instance's scheduler, if it still runs, before a compensation starts here: its
        own later start of the same id would be dropped as a duplicate and waited on forever
        (docs/supervisor.md, "Decision table")."""
        scheduler_id = found.instance_id
        status = await self.status_of(scheduler_id)
        if status not in ALIVE_STATUSES:
            return
        detail = f"{reason}; scheduler {scheduler_id} ({status}) terminated before the compensation starts"
        await self.note(found, Action.END_SCHEDULER, detail)
        await self.client.terminate(scheduler_id, f"{reason}: the instance is being compensated")
        self._statuses[scheduler_id] = "Terminated"
        self.decided(found, Action.END_SCHEDULER, telemetry.OUTCOME_OK, detail)
