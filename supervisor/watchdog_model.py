"""The watchdog's vocabulary, which every part of it, and its tests and tools, speak: what it can
decide, what a tick reports, and the constants it reads.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from workflow_core.ledger import StepRecord, StepStatus

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
# A step of an instance the watchdog gave up on (flagged for an operator, parked), or of an instance
# with no record at all, is looked at again this much later, not every lease: it stays in the deadline
# index (its status needs a deadline).
FLAGGED_LOOK_SECONDS = 86_400.0

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
    NOTE_INSTANCE_FLAGGED = "note_instance_flagged"  # its instance waits for an operator: nothing done
    NOTE_NO_INSTANCE_RECORD = "note_no_instance_record"  # invariant broken: no record decides; left as is


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


async def _io(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking ledger/transport call off the event loop (the Functions worker shares it)."""
    return await asyncio.to_thread(functools.partial(fn, *args, **kwargs))


def _operator_requested(record: StepRecord) -> bool:
    """An operator moved the step (``retry``/``compensate`` CLI) and wants the watchdog to act now."""
    return bool(record.owner and record.owner.startswith(OPERATOR_PREFIX))
