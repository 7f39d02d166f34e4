"""The supervisor's watchdog: find overdue steps and instances in the ledger and recover each exactly
once, claiming it with an ETag-conditional write before anything acts (docs/supervisor.md, "One tick",
"Exactly once"). :func:`run_tick` is the whole tick as a plain coroutine.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from datetime import datetime
from typing import Any

import azure.durable_functions as df
import azure.functions as func

from supervisor.instances import InstanceSupervisor
from supervisor.step_decisions import _Tick
from supervisor.watchdog_model import (
    ERROR_ACTION,
    OPERATOR_PREFIX,
    TickReport,
    _io,
    _operator_requested,
    record_recovery,
)
from workflow_core import clock, ledger_gauges, telemetry, telemetry_instruments, tracing
from workflow_core.contracts import WATCHDOG_FUNCTION
from workflow_core.ledger import (
    SUPERVISED_INSTANCE_STATUSES,
    ConcurrencyConflict,
    IllegalInstanceTransition,
    IllegalTransition,
    InstanceRecord,
    StepRecord,
)
from workflow_core.ledger.model import require_aware
from workflow_core.workflows.loader import agent_pools

log = logging.getLogger("sas.supervisor.watchdog")


async def run_tick(
    client: Any,
    services: Any,
    *,
    now: datetime | None = None,
    tick_id: str | None = None,
    batch_size: int | None = None,
) -> TickReport:
    """One watchdog tick over at most ``batch_size`` overdue steps; never raises for one bad step."""
    now = require_aware(now, "now") or clock.utcnow()
    report = TickReport(tick_id=tick_id or f"{now:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}", now=now)
    tick = _Tick(client, services, report)
    ledger = services.ledger
    limit = batch_size or services.settings.watchdog_batch_size
    started = time.perf_counter()
    index_before, steps_before = ledger.stats.index_entities_read, ledger.stats.step_entities_read
    with telemetry_instruments.current().tracer.start_as_current_span(
        "sas.watchdog.tick", attributes={"sas.tick_id": report.tick_id, "sas.batch_size": limit}
    ) as span:
        try:
            overdue = await _io(ledger.overdue, now, limit)
        except Exception:
            log.exception("watchdog tick %s could not read the deadline index", report.tick_id)
            report.errors += 1
            overdue = []
        with ledger.deferred_index_deletes():  # retired index rows: one batch per partition at the end
            watched = await _supervise_instances(tick, now, limit)
            # steps watched through their instance's row (ledger/watch.py) join the index's, once each
            seen = {(r.instance_id, r.step_id) for r in overdue}
            overdue = overdue + [r for r in watched if (r.instance_id, r.step_id) not in seen]
            report.overdue = len(overdue)
            for record in overdue:
                with recovery_span(record):
                    await _recover(tick, record, tick.handle, (ConcurrencyConflict, IllegalTransition))
            if freed := await tend_limits(client, services, now):  # agent limits: slots freed, parked woken
                report.actions["slot_freed"] += freed
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
    workflow's trace the row recorded; ``sas.recovery`` events land on it."""
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


async def _recover(tick: _Tick, record: Any, act: Any, moved_on: tuple[type[Exception], ...]) -> None:
    """One overdue step or instance (step ``*``); a conflict or an error is reported and the tick goes on."""
    report = tick.report
    step = isinstance(record, StepRecord)
    what = f"step {record.instance_id}/{record.step_id}" if step else f"instance {record.instance_id}"
    try:
        await act(record)
    except moved_on as exc:  # it moved on (an agent or the scheduler acted): the ledger is right
        report.conflicts += 1
        log.info("%s moved on while being recovered: %s", what, exc)
    except Exception as exc:
        log.exception("watchdog tick %s failed on %s", report.tick_id, what)
        report.errors += 1
        record_recovery(report, record, ERROR_ACTION, telemetry.OUTCOME_ERROR, f"{type(exc).__name__}: {exc}")
        if not step:
            await _hand_instance_back(tick, record)
            return
        await _best_effort_claim(tick, record)
        try:
            await tick.note(
                record, "error", f"{type(exc).__name__}: {exc}; retried when the claim's lease expires"
            )
        except Exception:
            log.exception("could not audit the failure on %s/%s", record.instance_id, record.step_id)


async def _supervise_instances(tick: _Tick, now: datetime, limit: int) -> list[StepRecord]:
    """Instances whose ``scheduler_deadline`` passed (``instances.py``), before the steps, so a dead
    instance is resumed or compensated once, by its record; returns the steps their rows watch."""
    report = tick.report
    try:
        due = await _io(tick.ledger.overdue_work, now, limit)
    except Exception:
        log.exception("watchdog tick %s could not read the instance deadlines", report.tick_id)
        report.errors += 1
        return []
    overdue = due.instances
    report.overdue_instances = len(overdue)
    ledger_gauges.note_overdue_instances(Counter(i.workflow for i in overdue))  # sas.instance.overdue
    handle = InstanceSupervisor(tick).handle
    for instance in overdue:
        with recovery_span(instance):
            await _recover(tick, instance, handle, (ConcurrencyConflict, IllegalInstanceTransition))
    return due.steps


async def _hand_instance_back(tick: _Tick, found: InstanceRecord) -> None:
    """An operator's resume whose act failed after this tick claimed the record: it goes back to the
    operator, due after the lease, so a later tick carries it out (a write meanwhile stands)."""
    if not (found.owner or "").startswith(OPERATOR_PREFIX):
        return
    try:
        current = await _io(tick.ledger.get_instance, found.instance_id)
        if current.owner != tick.actor or current.status not in SUPERVISED_INSTANCE_STATUSES:
            return
        await _io(
            tick.ledger.update_instance,
            current,
            actor=tick.actor,
            reason=f"handed back to {found.owner} by watchdog tick {tick.report.tick_id} after an error; "
            "retried after the lease",
            owner=found.owner,
            scheduler_deadline=tick.now + tick.lease,
        )
    except Exception:
        log.exception("could not hand instance %s back to %s", found.instance_id, found.owner)


async def _best_effort_claim(tick: _Tick, record: StepRecord) -> None:
    """After an error on a step: claim it for the lease, so it is retried then, not every tick (a write
    meanwhile stands); an operator's request is handed back to the operator instead, so its failed
    act is retried rather than lost as an ordinary overrun."""
    operator_asked = _operator_requested(record)
    try:
        current = record
        if operator_asked:
            current = await _io(tick.ledger.get, record.instance_id, record.step_id)
            moved = (current.status, current.attempt) != (record.status, record.attempt)
            if moved or current.owner not in (record.owner, tick.actor):
                return  # the step moved on (an agent, the scheduler, another operator): that stands
        await _io(
            tick.ledger.update,
            current,
            actor=tick.actor,
            reason=f"{'handed back to ' + record.owner if operator_asked else 'claimed'} by watchdog tick "
            f"{tick.report.tick_id} after an error; retried after the lease",
            owner=record.owner if operator_asked else tick.actor,
            deadline=tick.now + tick.lease,
        )
    except Exception:  # written already (by this tick or anyone): that write stands
        return
    tick.report.claimed += 1


async def tend_limits(client: Any, services: Any, now: datetime) -> int:
    """Per-agent limits (docs/agent-limits.md): free the slots of crashed holders or lapsed admissions
    and wake the steps parked behind a circuit that lets them through; how many slots were freed.
    Circuits are not moved here."""
    limited = [a for a, lim in agent_pools().agents.items() if lim.active]
    if not limited:
        return 0
    freed, wakes = await asyncio.to_thread(services.limits.tend, limited, now)
    if freed:
        log.info("watchdog freed %d slot(s) of crashed holders or lapsed admissions", freed)
    await _wake(client, wakes)
    return freed


async def wake_parked(client: Any, services: Any, agent: str) -> int:
    """Wake the steps parked behind ``agent``'s circuit now (an operator's close); how many."""
    try:
        wakes = await asyncio.to_thread(services.limits.parked, agent)
    except Exception as exc:  # the close is recorded; the watchdog's tick wakes them instead
        log.warning("could not read the parked steps of %s: %s", agent, exc)
        return 0
    await _wake(client, wakes)
    return len(wakes)


async def _wake(client: Any, wakes: list[tuple[str, str]]) -> None:
    for orchestration, event in wakes:
        try:
            await client.raise_event(orchestration, event, None)
        except Exception as exc:  # gone, or finished: the park's own timer ends any wait anyway
            log.info("could not wake %s (%s): %s", orchestration, event, exc)


def _run_on_startup() -> bool:
    """``WATCHDOG_RUN_ON_STARTUP``, read when the function is indexed."""
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
    telemetry_instruments.configure_telemetry(services.settings)
    if timer.past_due:
        log.info("watchdog timer is past due; running the tick now")
    report = await run_tick(client, services)
    if report.errors:
        log.warning(report.summary())
    await _io(
        services.liveness.record_tick,
        now=report.now,
        overdue=report.overdue,
        errors=report.errors,
        schedule=services.settings.watchdog_schedule,
    )
