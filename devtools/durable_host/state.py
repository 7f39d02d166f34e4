"""What the host keeps per instance, and the errors its API raises. Fields survive ``host.crash()``
as a storage backend would keep them, except the ones marked volatile."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from azure.durable_functions.models.OrchestrationRuntimeStatus import OrchestrationRuntimeStatus as Status

from .history import HistoryEventType as H

#: Statuses in which an instance id cannot be started again (the extension answers 409).
RUNNING_STATUSES = frozenset({Status.Pending, Status.Running, Status.ContinuedAsNew})
TERMINAL_STATUSES = frozenset({Status.Completed, Status.Failed, Status.Terminated, Status.Canceled})


class OrchestrationAlreadyExistsError(Exception):
    """Starting an instance id that is Pending/Running (the extension's 409 Conflict)."""


class InstanceNotFoundError(LookupError):
    """No instance with that id (the extension's 404)."""


class InstanceCompletedError(RuntimeError):
    """The instance already completed, failed or was terminated (the extension's 410 Gone)."""


class _OrchestrationError(Exception):
    """Fails the orchestration (non-determinism, an unknown function, an unsupported API)."""


@dataclass
class _Retry:
    kind: str  # "activity" | "suborchestration"
    name: str
    input: str | None
    instance_id: str | None
    first_interval: timedelta
    max_attempts: int
    attempts: int = 1
    current_task_id: int | None = None
    timer_id: int | None = None


@dataclass
class _Task:
    id: int
    kind: str  # "activity" | "timer" | "suborchestration"
    name: str | None = None
    input: str | None = None
    fire_at: datetime | None = None
    retry: _Retry | None = None
    child_instance_id: str | None = None
    cancelled: bool = False
    done: bool = False


@dataclass
class _Execution:
    execution_id: str
    input: str | None
    #: Sequence numbers, given in the order the extension's shim meets the actions.
    ids: Iterator[int] = field(default_factory=itertools.count)
    #: (signature, task id) of every action returned so far, checked on each replay.
    actions: list[tuple[tuple, int | None]] = field(default_factory=list)
    tasks: dict[int, _Task] = field(default_factory=dict)
    episodes: int = 0
    #: How the orchestrator code finished while tasks were still open ("returned", "raised", ...).
    held: str | None = None
    #: EventRaised messages bound for the next execution while a continue-as-new waits for open tasks.
    carried: list = field(default_factory=list)


@dataclass
class _Decisions:
    """What an episode decided: events for its history, and work that starts once they are stored."""

    now: datetime
    events: list[dict] = field(default_factory=list)
    after_commit: list[Callable[[], None]] = field(default_factory=list)


@dataclass
class _Message:
    event: dict
    #: Set on an activity result, which is volatile until its episode stores it: lost (and the
    #: activity redelivered) on crash.
    task_id: int | None = None


@dataclass(frozen=True)
class _ParentRef:
    instance_id: str
    execution_id: str
    task_id: int
    name: str


@dataclass
class _Instance:
    instance_id: str
    name: str
    status: Status
    created: datetime
    updated: datetime
    execution: _Execution
    parent: _ParentRef | None = None
    history: list[dict] = field(default_factory=list)
    inbox: list[_Message] = field(default_factory=list)
    output: Any = None
    custom_status: Any = None
    #: The histories of the generations that continued as new, oldest first.
    past_histories: list[list[dict]] = field(default_factory=list)
    #: Volatile: the actions the last replay returned (dropped on crash).
    last_actions: list | None = None


@dataclass
class _WorkItem:
    instance_id: str
    execution_id: str
    task_id: int
    name: str
    input: str | None


@dataclass
class _Periodic:
    name: str
    fn: Callable[[], Any]
    every: timedelta
    next_at: datetime


#: The messages the framework marks ``IsPlayed`` (docs/durable-test-host.md, "History").
_PROCESSED = frozenset(
    {
        H.EXECUTION_STARTED,
        H.EXECUTION_TERMINATED,
        H.TASK_COMPLETED,
        H.TASK_FAILED,
        H.SUB_ORCHESTRATION_INSTANCE_COMPLETED,
        H.SUB_ORCHESTRATION_INSTANCE_FAILED,
        H.TIMER_FIRED,
        H.EVENT_RAISED,
    }
)


def _played(event: dict) -> dict:
    """``event`` as the history stores it once its episode ran: ``IsPlayed`` as the framework left it."""
    return {**event, "IsPlayed": event["EventType"] in _PROCESSED}
