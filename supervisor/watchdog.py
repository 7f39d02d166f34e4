"""The supervisor's watchdog: find overdue steps in the ledger and recover them, exactly once each.

One tick (see docs/supervisor.md for the full decision table):

1. ``ledger.overdue(now, limit=WATCHDOG_BATCH_SIZE)`` reads only the deadline index up to ``now``
   (a bounded page; what does not fit waits for the next tick).
2. Each step is **claimed** with an ETag-conditional ``ledger.update`` that sets the owner to
   ``supervisor:<tick>`` and moves the deadline to ``now + lease``. The claim moves the step's index
   row forward, so an overlapping tick neither sees it nor wins it (a lost claim is a
   ``ConcurrencyConflict``: someone else acted, skip). A tick that dies after claiming leaves the step
   to be retried when the lease expires.
3. The decision uses the step and the orchestration's real state (``client.get_status``): re-send a
   work message lost between the ledger write and the send; note a short overrun the orchestration's
   own timer will handle; fail a step whose orchestration missed its timer (the orchestration then
   applies its retry policy); start the compensation orchestration when the workflow's orchestration
   is gone; nudge or (re)start a compensation that overran.
4. Every decision leaves an audit row in the ledger and a telemetry record (``sas.recovery``).

:func:`run_tick` is the whole tick as a plain coroutine: the timer function in this package only
builds its arguments. ``client`` is anything with the async ``get_status``/``raise_event``/
``start_new`` of ``DurableOrchestrationClient``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol, TypeVar

import azure.durable_functions as df
import azure.functions as func

from supervisor.instances import InstanceSupervisor, trace_input
from workflow_core import clock, ledger_gauges, telemetry, tracing
from workflow_core.contracts import (
    COMPENSATION_ORCHESTRATOR,
    WATCHDOG_FUNCTION,
    ResultMessage,
    compensation_instance_id,
    result_event_name,
)
from workflow_core.ledger import (
    ConcurrencyConflict,
    IllegalInstanceTransition,
    IllegalTransition,
    StepNotFound,
    StepRecord,
    StepStatus,
)
from workflow_core.ledger.model import require_aware
from workflow_core.messages import work_message

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

# Orchestration runtime statuses in which the orchestration will still react (to its own timers and
# to raised events). Anything else (Completed, Failed, Terminated, Canceled, unknown) is "gone".
ALIVE_STATUSES = frozenset({"Running", "Pending", "ContinuedAsNew", "Suspended"})
UNKNOWN_STATUS = "Unknown"

# ``StepRecord.compensation_status`` values the scheduler and the agents write (activities.common).
COMP_DISPATCHED = "Dispatched"
COMP_RUNNING = "Running"
COMP_FAILED = "Failed"
COMP_TIMED_OUT = "TimedOut"
COMP_GIVEN_UP = "GivenUp"  # on a work step whose attempts ran out: the scheduler compensates next
COMP_IN_FLIGHT = frozenset({COMP_DISPATCHED, COMP_RUNNING})
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


class DurableClient(Protocol):
    """The part of ``azure.durable_functions.DurableOrchestrationClient`` the watchdog uses."""

    async def get_status(self, instance_id: str) -> Any: ...

    async def raise_event(self, instance_id: str, event_name: str, event_data: Any = None) -> None: ...

    async def terminate(self, instance_id: str, reason: str) -> None: ...

    async def start_new(
        self, orchestration_function_name: str, instance_id: str | None = None, client_input: Any = None
    ) -> str: ...


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
    if status is None:
        return UNKNOWN_STATUS
    value = (
        status.get("runtimeStatus") if isinstance(status, dict) else getattr(status, "runtime_status", None)
    )
    if value is None:
        return UNKNOWN_STATUS
    return str(getattr(value, "value", value))


def new_tick_id(now: datetime) -> str:
    return f"{now:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


def step_deadline_seconds(record: StepRecord, kind: str = "work", store: Any = None) -> float:
    """The step's ``deadline_seconds`` (or its compensation's) from its pinned workflow definition."""
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
    if kind == "compensate" and step.compensation is not None:
        return float(step.compensation.deadline_seconds)
    return float(step.deadline_seconds)


async def _io(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking ledger/transport call off the event loop (the Functions worker shares it)."""
    return await asyncio.to_thread(functools.partial(fn, *args, **kwargs))


class _Tick:
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

    async def time_out(self, claimed: StepRecord, *, reason: str, last_error: str) -> None:
        """Record a mid-flight attempt as TimedOut; the claim's lease stays its deadline."""
        await _io(self.time_out_now, claimed, reason=reason, last_error=last_error)

    def time_out_now(self, record: StepRecord, *, reason: str, last_error: str) -> StepRecord:
        """Blocking: ``record`` -> TimedOut, owned by this tick until now + lease (its claim); counted
        in ``sas.step.duration`` with outcome ``timed_out``, from the recorded send."""
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
        sent = record.message_sent_at
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

    # ---- one step -------------------------------------------------------------------------------

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
        """Run ``write`` (an ETag-guarded write of ``found`` as the tick read it) as this tick's claim:
        whoever wrote the step since the tick read it won, and the tick skips it (None)."""
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

    async def handle(self, found: StepRecord) -> None:
        """Decide for one overdue step. The decision that changes the step's status (an attempt
        timed out) is itself the claim: one ETag-guarded write of the row as the tick read it, made
        before any side effect. Decisions that only look, note or re-send claim first."""
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
            if in_flight:
                # Nobody waits for this attempt's result any more: record it as abandoned, so the ledger
                # says why (a resumed scheduler then retries it; a compensation undoes it).
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
            # The instance record decides between resume and compensation, exactly once per instance.
            if not await InstanceSupervisor(self).step_orphaned(found.instance_id, why):
                await self.start_compensation(found, reason=f"supervisor: {why}")
            return
        if (
            not self.within_grace(found, lateness)
            and in_flight
            and not (found.status is S.DISPATCHED and found.message_sent_at is None)
            and found.compensation_status != COMP_GIVEN_UP
        ):
            await self.fail_step(found, None, orchestration_id, orchestration, lateness)
            return
        claimed = await self.claim(found)
        if claimed is None:
            return
        if found.compensation_status == COMP_GIVEN_UP:
            # The scheduler gave the step up and is about to start (or runs) the compensation as its
            # sub-orchestration: starting it here too would race the scheduler for the same id.
            status = await self.status_of(compensation_instance_id(found.instance_id))
            detail = (
                f"step was given up; orchestration {orchestration_id} is {orchestration} and its "
                f"compensation is {status}; the scheduler starts it"
            )
            await self.note(found, Action.NOTE_COMPENSATION_RUNNING, detail)
            self.decided(found, Action.NOTE_COMPENSATION_RUNNING, telemetry.OUTCOME_OK, detail)
        elif found.status is S.DISPATCHED and found.message_sent_at is None:
            await self.resend(found, claimed)
        elif self.within_grace(found, lateness):
            await self.release_with_note(found, claimed, lateness, f"orchestration {orchestration}")
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

    async def resend(self, found: StepRecord, claimed: StepRecord) -> None:
        """Dispatched but the send never happened: send the same attempt again, then record it."""
        deadline = self.now + timedelta(
            seconds=step_deadline_seconds(found, store=getattr(self.services, "definitions", None))
        )
        message = work_message(found, deadline=deadline)
        await _io(self.services.transport.send, self.services.settings.work_queue, message)
        detail = (
            f"work message {message.message_id} was never sent (crash between ledger write and send); "
            f"re-sent, new deadline {deadline.isoformat()}"
        )
        await _io(
            self.ledger.update,
            claimed,
            actor=self.actor,
            reason=f"{Action.RESEND.value}: {detail}",
            message_sent_at=self.now,
            deadline=deadline,
            owner=found.owner,
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
        """The orchestration is alive but missed its deadline timer (or did not act on a failed
        attempt): raise the attempt's failed result so it applies its retry policy.

        ``claimed`` None: the step is unclaimed, as the tick read it, and the TimedOut write is the
        claim (a lost race skips the step: someone else acted)."""
        error = found.last_error if found.status in SETTLED_ATTEMPT and found.last_error else None
        error = error or OVERRUN_ERROR
        detail = (
            f"{found.status.value} {lateness.total_seconds():.0f}s past its deadline (grace "
            f"{self.grace.total_seconds():.0f}s) while orchestration {orchestration_id} is {orchestration}; "
            f"raised a failed result for attempt {found.attempt}"
        )
        if _operator_requested(found):
            detail += f" (requested by {found.owner})"
        if claimed is None:
            written = await self.claim_with(
                found,
                self.time_out_now,
                found,
                reason=f"{Action.FAIL_STEP.value}: {detail}",
                last_error=OVERRUN_ERROR,
            )
            if written is None:
                return
        elif found.status in (S.DISPATCHED, S.RUNNING):
            await self.time_out(
                claimed, reason=f"{Action.FAIL_STEP.value}: {detail}", last_error=OVERRUN_ERROR
            )
        else:
            await self.note(found, Action.FAIL_STEP, detail)
        result = ResultMessage(
            kind="work",
            instance_id=found.instance_id,
            orchestration_id=orchestration_id,
            step_id=found.step_id,
            attempt=found.attempt,
            outcome="failed",
            error=error,
        )
        await self.client.raise_event(
            orchestration_id, result_event_name(found.step_id, found.attempt), result.model_dump(mode="json")
        )
        self.decided(found, Action.FAIL_STEP, telemetry.OUTCOME_OK, detail)

    async def compensate(
        self, found: StepRecord, claimed: StepRecord, orchestration_id: str, orchestration: str
    ) -> None:
        """The workflow's orchestration is gone while the step is mid-flow: compensate the instance."""
        why = (
            f"orchestration {orchestration_id} is {orchestration} "
            f"while step {found.step_id} is {found.status.value}"
        )
        if found.status in (S.DISPATCHED, S.RUNNING):
            # Nobody waits for this attempt's result any more: record it as abandoned, as the
            # compensation plan would, so the ledger says why.
            await self.time_out(
                claimed,
                reason=f"{why}; no orchestration waits for its result",
                last_error=f"supervisor: {why}",
            )
        await self.start_compensation(found, reason=f"supervisor: {why}")

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

    async def compensating(self, found: StepRecord, claimed: StepRecord, lateness: timedelta) -> None:
        compensation_id = compensation_instance_id(found.instance_id)
        status = await self.status_of(compensation_id)
        if status not in ALIVE_STATUSES:
            who = f"requested by {found.owner}" if _operator_requested(found) else "overdue"
            reason = f"supervisor: step {found.step_id} is Compensating ({who}) with no compensation running"
            # With an instance record, the instance is claimed (-> Compensating) first: one start per
            # instance across ticks, and no resume of the scheduler this ends.
            if await InstanceSupervisor(self).compensate_for_step(found, reason):
                return
            await self.end_scheduler(found, reason)
            await self.start_compensation(found, reason=reason)
            return
        if self.within_grace(found, lateness):
            await self.release_with_note(found, claimed, lateness, f"compensation {compensation_id}")
            return
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


def _operator_requested(record: StepRecord) -> bool:
    """An operator moved the step (``retry``/``compensate`` CLI) and wants the watchdog to act now."""
    return bool(record.owner and record.owner.startswith(OPERATOR_PREFIX))


async def run_tick(
    client: DurableClient,
    services: Any,
    *,
    now: datetime | None = None,
    tick_id: str | None = None,
    batch_size: int | None = None,
    grace_seconds: float | None = None,
    lease_seconds: float | None = None,
) -> TickReport:
    """One watchdog tick over at most ``batch_size`` overdue steps; never raises for one bad step.

    ``services`` needs ``settings``, ``ledger`` and ``transport`` (``workflow_core.runtime.Services``).
    Defaults: ``now`` = ``clock.utcnow()``, batch size and grace from ``WATCHDOG_BATCH_SIZE`` /
    ``WATCHDOG_GRACE_SECONDS``, lease :data:`DEFAULT_LEASE_SECONDS`.
    """
    settings = services.settings
    now = require_aware(now, "now") if now is not None else clock.utcnow()
    assert now is not None
    report = TickReport(tick_id=tick_id or new_tick_id(now), now=now)
    tick = _Tick(
        client,
        services,
        report,
        grace=timedelta(seconds=settings.watchdog_grace_seconds if grace_seconds is None else grace_seconds),
        lease=timedelta(seconds=DEFAULT_LEASE_SECONDS if lease_seconds is None else lease_seconds),
    )
    ledger = services.ledger
    limit = batch_size or settings.watchdog_batch_size
    started = time.perf_counter()
    index_before, steps_before = ledger.stats.index_entities_read, ledger.stats.step_entities_read
    with telemetry.tracer().start_as_current_span(
        "sas.watchdog.tick", attributes={"sas.tick_id": report.tick_id, "sas.batch_size": limit}
    ) as span:
        try:
            overdue = await _io(ledger.overdue, now, limit)
        except Exception:
            log.exception("watchdog tick %s could not read the deadline index", report.tick_id)
            report.errors += 1
            overdue = []
        report.overdue = len(overdue)
        # Index rows the tick's writes retire go in one batch per index partition at the end.
        cleanup = ledger.deferred_index_deletes() if hasattr(ledger, "deferred_index_deletes") else None
        with cleanup or contextlib.nullcontext():
            await _supervise_and_handle(tick, now, limit, overdue)
        report.index_entities_read = ledger.stats.index_entities_read - index_before
        report.step_entities_read = ledger.stats.step_entities_read - steps_before
        report.duration_seconds = time.perf_counter() - started
        span.set_attributes(
            {
                "sas.overdue": report.overdue,
                "sas.claimed": report.claimed,
                "sas.conflicts": report.conflicts,
                "sas.errors": report.errors,
            }
        )
    log.info(report.summary())
    return report


def recovery_span(record: Any) -> Any:
    """The span of one step's (or instance's) recovery: a child of the tick's span, *linked* to the
    trace the ledger row recorded (the workflow's), so each trace leads to the other. Recovery events
    (``sas.recovery``) land on it."""
    return tracing.span(
        tracing.RECOVERY_SPAN,
        attributes={
            "sas.instance_id": record.instance_id,
            "sas.step_id": getattr(record, "step_id", "*"),
            "sas.status": record.status.value,
            "sas.workflow": getattr(record, "workflow_name", None) or getattr(record, "workflow", None),
        },
        link_to=tracing.links(tracing.from_fields(record.trace_parent, record.trace_state)),
    )


async def _supervise_and_handle(tick: _Tick, now: datetime, limit: int, overdue: list[StepRecord]) -> None:
    await _supervise_instances(tick, now, limit)
    for record in overdue:
        with recovery_span(record):
            await _handle_one(tick, record)


async def _handle_one(tick: _Tick, record: StepRecord) -> None:
    """One overdue step; a conflict or an error is reported and the tick goes on."""
    report = tick.report
    try:
        await tick.handle(record)
    except (ConcurrencyConflict, IllegalTransition) as exc:
        # The step moved on between our claim and our decision (an agent or the scheduler
        # acted): the ledger is right, nothing to do; the step comes back if it is overdue again.
        report.conflicts += 1
        log.info("step %s/%s moved on while being recovered: %s", record.instance_id, record.step_id, exc)
    except Exception as exc:
        report.errors += 1
        log.exception(
            "watchdog tick %s failed on step %s/%s",
            report.tick_id,
            record.instance_id,
            record.step_id,
        )
        telemetry.record_recovery(
            record.instance_id,
            record.step_id,
            record.attempt,
            ERROR_ACTION,
            telemetry.OUTCOME_ERROR,
            workflow=record.workflow_name,
            status=record.status.value,
            tick_id=report.tick_id,
            reason=f"{type(exc).__name__}: {exc}",
        )
        await _best_effort_claim(tick, record)
        await _best_effort_note(tick, record, exc)


async def _supervise_instances(tick: _Tick, now: datetime, limit: int) -> None:
    """Instances whose scheduler broke its promise (``scheduler_deadline`` passed): see
    ``supervisor/instances.py``. Handled before the steps, so a dead instance is resumed or
    compensated once, by the instance, whichever of its rows the tick met first."""
    report = tick.report
    try:
        overdue = await _io(tick.ledger.overdue_instances, now, limit)
    except Exception:
        log.exception("watchdog tick %s could not read the instance deadlines", report.tick_id)
        report.errors += 1
        return
    report.overdue_instances = len(overdue)
    ledger_gauges.note_overdue_instances(Counter(i.workflow for i in overdue))  # sas.instance.overdue
    supervisor = InstanceSupervisor(tick)
    for instance in overdue:
        try:
            with recovery_span(instance):
                await supervisor.handle(instance)
        except (ConcurrencyConflict, IllegalInstanceTransition) as exc:
            report.conflicts += 1
            log.info("instance %s moved on while being recovered: %s", instance.instance_id, exc)
        except Exception as exc:
            report.errors += 1
            log.exception("watchdog tick %s failed on instance %s", report.tick_id, instance.instance_id)
            telemetry.record_recovery(
                instance.instance_id,
                "*",
                instance.resume_count,
                ERROR_ACTION,
                telemetry.OUTCOME_ERROR,
                workflow=instance.workflow,
                status=instance.status.value,
                tick_id=report.tick_id,
                reason=f"{type(exc).__name__}: {exc}",
            )


async def _best_effort_claim(tick: _Tick, record: StepRecord) -> None:
    """After an error on a step the tick had not written yet: claim it for the lease anyway, so it
    is retried after the lease, not hammered every tick. If anyone wrote it meanwhile, leave it."""
    try:
        await _io(
            tick.ledger.update,
            record,
            actor=tick.actor,
            reason=f"claimed by watchdog tick {tick.report.tick_id} after an error; retried after the lease",
            owner=tick.actor,
            deadline=tick.now + tick.lease,
        )
    except Exception:  # written already (by this tick or anyone): that write stands
        return
    tick.report.claimed += 1


async def _best_effort_note(tick: _Tick, record: StepRecord, exc: BaseException) -> None:
    try:
        await tick.note(
            record, "error", f"{type(exc).__name__}: {exc}; retried when the claim's lease expires"
        )
    except Exception:
        log.exception("could not audit the failure on %s/%s", record.instance_id, record.step_id)


# ---- the Azure Function ---------------------------------------------------------------------------


def _run_on_startup() -> bool:
    """``WATCHDOG_RUN_ON_STARTUP``, read when the function is indexed (off unless settings say so)."""
    from workflow_core.settings import SettingsError, load_settings

    try:
        return load_settings().watchdog_run_on_startup
    except SettingsError:
        return False


blueprint = df.Blueprint()


@blueprint.function_name(WATCHDOG_FUNCTION)
@blueprint.timer_trigger(
    arg_name="timer", schedule="%WATCHDOG_SCHEDULE%", run_on_startup=_run_on_startup(), use_monitor=True
)
@blueprint.durable_client_input(client_name="client")
async def supervisor_watchdog(timer: func.TimerRequest, client: df.DurableOrchestrationClient) -> None:
    """Timer trigger: one :func:`run_tick` with the app's services and a Durable client."""
    from workflow_core.runtime import get_services

    services = get_services()
    telemetry.configure_telemetry(services.settings)
    if timer.past_due:
        log.info("watchdog timer is past due; running the tick now")
    report = await run_tick(client, services)
    if report.errors:
        log.warning(report.summary())
