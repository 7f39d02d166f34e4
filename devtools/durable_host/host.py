"""An in-process durable test host: real orchestrators through the real Durable Functions replay.

The host plays the part of the Durable Functions extension for the Python worker, through the same
contract the extension uses: it keeps each instance's history as history event dicts, calls the
orchestrator handler (the one ``Orchestrator.create`` makes, which the SDK's replay engine drives)
with the context JSON, reads back the actions JSON, turns new actions into history events and
work (activities, timers, sub-orchestrations), and replays again when results arrive.

Sequence numbers are assigned the way the extension's out-of-process shim assigns them: one per
id-consuming action (activity, timer, sub-orchestration) in the order the flattened actions list
holds them, plus, for ``*_with_retry`` calls, one for each retry timer and one for each new
attempt, allocated when the failure (or the retry timer) is processed. To keep that allocation in
the same order as the SDK's, retry-relevant events are placed first in an episode.

See ``docs/durable-test-host.md`` for what is and is not emulated.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import json
import threading
import time
import traceback
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from azure.durable_functions.models.DurableOrchestrationStatus import DurableOrchestrationStatus
from azure.durable_functions.models.OrchestrationRuntimeStatus import OrchestrationRuntimeStatus
from azure.functions._durable_functions import OrchestrationContext

from workflow_core.clock import use_clock

from .aio import AsyncRunner, call_maybe_async
from .clock import RealClock, VirtualClock
from .history import (
    ActionType,
    HistoryEventType,
    action_label,
    event_label,
    flatten_actions,
    format_time,
    make_event,
    parse_time,
)
from .registry import FunctionTable, _is_function

Status = OrchestrationRuntimeStatus
H = HistoryEventType

#: Statuses in which an instance id cannot be started again (the extension answers 409).
RUNNING_STATUSES = frozenset({Status.Pending, Status.Running, Status.ContinuedAsNew})
TERMINAL_STATUSES = frozenset({Status.Completed, Status.Failed, Status.Terminated, Status.Canceled})

#: The schema versions the SDK speaks: 0 (V1, the SDK default: one list of actions per ``yield``)
#: and 1 (V2: one flat list with WhenAny/WhenAll compound actions).
SUPPORTED_SCHEMA_VERSIONS = (0, 1)

_OUT_OF_PROC_MARKER = "$OutOfProcData$:"


class OrchestrationAlreadyExistsError(Exception):
    """Starting an instance id that is Pending/Running (the extension's 409 Conflict)."""


class InstanceNotFoundError(LookupError):
    """No instance with that id (the extension's 404)."""


class InstanceCompletedError(RuntimeError):
    """The instance already completed, failed or was terminated (the extension's 410 Gone)."""


class _OrchestrationError(Exception):
    """Fails the orchestration (non-determinism, an unknown function, an unsupported API)."""


# ----------------------------------------------------------------------------------------------
# State kept per instance. "Durable" state survives host.crash(); "volatile" state does not.
# ----------------------------------------------------------------------------------------------


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
    next_id: int = 0
    action_signatures: list[tuple] = field(default_factory=list)
    action_task_ids: list[int | None] = field(default_factory=list)
    tasks: dict[int, _Task] = field(default_factory=dict)
    episodes: int = 0
    completion_held: bool = False


@dataclass
class _Message:
    event: dict
    #: An activity result not yet committed to history: lost (and the activity redelivered) on crash.
    volatile: bool = False
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
    version: str = ""
    parent: _ParentRef | None = None
    history: list[dict] = field(default_factory=list)
    inbox: list[_Message] = field(default_factory=list)
    output: Any = None
    custom_status: Any = None
    failure_details: str | None = None
    generations: int = 1
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
class _Fault:
    exc: BaseException | None
    mode: str  # "before" | "after" | "lose_result"


@dataclass
class _Periodic:
    name: str
    fn: Callable[[], Any]
    every: timedelta
    next_at: datetime


class DurableTestHost:
    """Runs Durable Functions orchestrations in process, deterministically, on a virtual clock.

    >>> host = DurableTestHost(app)                      # a df.DFApp: get_functions() is called once
    >>> iid = host.start_new("my_orchestrator", input={"order": 1})
    >>> status = host.run_until_complete(iid)           # timers are skipped to, not waited for
    >>> status.runtime_status, status.output
    """

    def __init__(
        self,
        *sources: Any,
        orchestrators: dict[str, Callable] | None = None,
        activities: dict[str, Callable] | None = None,
        clock: VirtualClock | RealClock | str | None = None,
        schema_version: int = 0,
        hold_completion_for_open_timers: bool = True,
        on_progress: Callable[[datetime, str, str], None] | None = None,
        task_hub: str = "TestHubName",
        base_url: str = "http://localhost:7071",
        poll_interval: float = 0.002,
        timeline_limit: int = 200_000,
    ) -> None:
        if schema_version not in SUPPORTED_SCHEMA_VERSIONS:
            raise ValueError(f"schema_version must be one of {SUPPORTED_SCHEMA_VERSIONS}")
        self.functions = FunctionTable()
        for source in sources:
            self.functions.load(source)
        for name, fn in (orchestrators or {}).items():
            self.functions.add_callable(name, fn, kind="orchestrator")
        for name, fn in (activities or {}).items():
            self.functions.add_callable(name, fn, kind="activity")

        if clock is None or clock == "virtual":
            clock = VirtualClock()
        elif clock == "real":
            clock = RealClock()
        self.clock = clock
        self.schema_version = schema_version
        self.hold_completion_for_open_timers = hold_completion_for_open_timers
        self.on_progress = on_progress
        self.task_hub = task_hub
        self.base_url = base_url.rstrip("/")
        self.poll_interval = poll_interval

        #: How many times each activity's user code was invoked.
        self.activity_calls: Counter[str] = Counter()

        self._instances: dict[str, _Instance] = {}
        self._dirty: dict[str, None] = {}  # an ordered set of instance ids with new messages
        self._activity_queue: deque[_WorkItem] = deque()
        self._timers: list[tuple[datetime, int, str, str, int]] = []
        self._timer_seq = itertools.count()
        self._periodics: list[_Periodic] = []
        self._pumps: list[tuple[str, Callable[[], Any]]] = []
        self._faults: dict[str, deque[_Fault]] = {}
        self._timeline: deque[tuple[datetime, str, str]] = deque(maxlen=timeline_limit)
        self._lock = threading.RLock()
        self._loop_thread: int | None = None
        self._async = AsyncRunner()
        self._exit_stack: ExitStack | None = None

        from .client import DurableTestClient

        #: A real ``DurableOrchestrationClient`` whose HTTP calls go to this host's emulation of the
        #: extension's HTTP API: same async methods, same status objects, same errors.
        self.client = DurableTestClient(self)

    # ------------------------------------------------------------------------------------------
    # Lifecycle
    # ------------------------------------------------------------------------------------------

    def __enter__(self) -> DurableTestHost:
        """Install the host clock as the process clock (``workflow_core.clock``) until exit."""
        self._exit_stack = ExitStack()
        self._exit_stack.enter_context(use_clock(self.clock.now))
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._exit_stack is not None:
            self._exit_stack.close()
            self._exit_stack = None
        self._async.close()

    @contextmanager
    def installed_clock(self) -> Iterator[None]:
        """The host clock as ``workflow_core.clock``'s clock for the duration of a block."""
        with use_clock(self.clock.now):
            yield

    # ------------------------------------------------------------------------------------------
    # Instances: the operations the durable client offers
    # ------------------------------------------------------------------------------------------

    def start_new(
        self, name: str, instance_id: str | None = None, input: Any = None, *, version: str = ""
    ) -> str:
        """Schedule a new orchestration instance; returns its id (a uuid hex when none is given)."""
        from azure.durable_functions.models.utils.df_serialization import df_dumps

        input_json = df_dumps(input) if input is not None else None
        return self._start(name, instance_id, input_json, version=version)

    def _start(self, name: str, instance_id: str | None, input_json: str | None, *, version: str = "") -> str:
        with self._lock:
            if name not in self.functions.orchestrators:
                raise ValueError(
                    f"The function '{name}' doesn't exist, is disabled, or is not an orchestrator function."
                )
            instance_id = instance_id or uuid.uuid4().hex
            existing = self._instances.get(instance_id)
            if existing is not None and existing.status in RUNNING_STATUSES:
                raise OrchestrationAlreadyExistsError(
                    f"An Orchestration instance with the status {existing.status.value} already exists."
                )
            self._create_instance(name, instance_id, input_json, version=version)
            return instance_id

    def raise_event(self, instance_id: str, name: str, data: Any = None) -> None:
        """Send an external event; it is kept in history even if nobody waits for it yet."""
        with self._lock:
            inst = self._require(instance_id)
            if inst.status in TERMINAL_STATUSES:
                raise InstanceCompletedError(
                    f"Instance with ID {instance_id} is gone: either completed or failed"
                )
            event = make_event(H.EVENT_RAISED, self.clock.now(), Name=name, Input=json.dumps(data))
            self._deliver(inst, event)
            self._log(instance_id, f"event {name!r} raised: {_short(data)}")

    def terminate(self, instance_id: str, reason: str = "") -> bool:
        """Terminate a non-terminal instance; returns False if it had already finished."""
        with self._lock:
            inst = self._require(instance_id)
            if inst.status in TERMINAL_STATUSES:
                return False
            now = self.clock.now()
            inst.history.append(_played(make_event(H.EXECUTION_TERMINATED, now, Input=reason)))
            inst.inbox.clear()
            self._dirty.pop(instance_id, None)
            inst.status = Status.Terminated
            inst.output = reason
            inst.updated = now
            self._log(instance_id, f"terminated: {reason!r}")
            self._notify_parent(inst, failed=True, reason=f"Orchestration terminated: {reason}", details="")
            return True

    def purge(self, instance_id: str) -> bool:
        with self._lock:
            inst = self._instances.get(instance_id)
            if inst is None:
                return False
            if inst.status not in TERMINAL_STATUSES:
                raise RuntimeError(f"only a finished instance can be purged ({inst.status.value})")
            del self._instances[instance_id]
            return True

    def get_status(self, instance_id: str, show_history: bool = False) -> DurableOrchestrationStatus | None:
        """The instance's status as the SDK's ``DurableOrchestrationStatus`` (None if unknown)."""
        with self._lock:
            inst = self._instances.get(instance_id)
            if inst is None:
                return None
            return DurableOrchestrationStatus.from_json(self._status_payload(inst, show_history=show_history))

    def history(self, instance_id: str) -> list[dict]:
        """A copy of the current execution's history events."""
        with self._lock:
            return copy.deepcopy(self._require(instance_id).history)

    def instance_ids(self) -> list[str]:
        with self._lock:
            return list(self._instances)

    def episodes(self, instance_id: str) -> int:
        """How many times the orchestrator ran (replays) in the current execution."""
        with self._lock:
            return self._require(instance_id).execution.episodes

    # ------------------------------------------------------------------------------------------
    # Pumps, periodic work, fault injection, crash
    # ------------------------------------------------------------------------------------------

    def add_pump(self, fn: Callable[[], int | None], name: str | None = None) -> Callable[[], int | None]:
        """Call ``fn()`` every loop iteration; it returns how much work it did (0/None = idle).

        While any pump reports work the host does not skip time.
        """
        with self._lock:
            self._pumps.append((name or getattr(fn, "__name__", "pump"), fn))
            return fn

    def remove_pump(self, fn: Callable[[], Any]) -> None:
        with self._lock:
            self._pumps = [(n, f) for n, f in self._pumps if f is not fn]

    def add_periodic(
        self,
        fn: Callable[[], Any],
        every: timedelta,
        *,
        name: str | None = None,
        first_at: datetime | None = None,
    ) -> Callable[[], Any]:
        """Call ``fn()`` every ``every`` of host time (a timer trigger); time skips stop at each run."""
        if every <= timedelta(0):
            raise ValueError("every must be positive")
        with self._lock:
            next_at = first_at or (self.clock.now() + every)
            self._periodics.append(_Periodic(name or getattr(fn, "__name__", "periodic"), fn, every, next_at))
            return fn

    def remove_periodic(self, fn: Callable[[], Any]) -> None:
        with self._lock:
            self._periodics = [p for p in self._periodics if p.fn is not fn]

    def crash_activity_once(
        self, name: str, exc: BaseException | None = None, *, after: bool = False, times: int = 1
    ) -> None:
        """Make the next ``times`` calls of activity ``name`` raise ``exc``.

        ``after=False``: raise instead of calling the activity (no side effect);
        ``after=True``: call it, then raise (the side effect happened, the result is a failure).
        Either way the orchestrator sees a TaskFailed.
        """
        self._add_fault(
            name,
            _Fault(exc or RuntimeError(f"injected failure in {name!r}"), "after" if after else "before"),
            times,
        )

    def lose_activity_result_once(self, name: str, *, times: int = 1) -> None:
        """Call activity ``name``, then lose its result as a worker crash would: it is redelivered."""
        self._add_fault(name, _Fault(None, "lose_result"), times)

    def _add_fault(self, name: str, fault: _Fault, times: int) -> None:
        with self._lock:
            queue = self._faults.setdefault(name, deque())
            queue.extend(fault for _ in range(times))

    def crash(self, instance_id: str | None = None) -> None:
        """Drop in-memory orchestration state, keeping only what a durable backend would keep.

        Kept: history, queued work and timers (queue messages), raised events. Lost: activity results
        not yet appended to history (their activities are redelivered, so they run again) and any
        cached replay state. The next loop iteration replays from history.
        """
        with self._lock:
            targets = [self._require(instance_id)] if instance_id else list(self._instances.values())
            for inst in targets:
                lost = [m for m in inst.inbox if m.volatile]
                inst.inbox = [m for m in inst.inbox if not m.volatile]
                for message in lost:
                    task = inst.execution.tasks.get(message.task_id)
                    if task is not None and task.kind == "activity":
                        self._activity_queue.append(
                            _WorkItem(
                                inst.instance_id, inst.execution.execution_id, task.id, task.name, task.input
                            )
                        )
                inst.last_actions = None
                detail = f"; {len(lost)} uncommitted activity result(s) lost, redelivering" if lost else ""
                self._log(inst.instance_id, f"CRASH: in-memory state dropped{detail}")
                if inst.inbox and inst.status not in TERMINAL_STATUSES:
                    self._dirty[inst.instance_id] = None

    # ------------------------------------------------------------------------------------------
    # Running
    # ------------------------------------------------------------------------------------------

    def step(self) -> int:
        """One loop iteration; returns the units of work done (0 = nothing could run now)."""
        with self._running():
            return self._step()

    def run_until_idle(self, max_steps: int = 10_000) -> int:
        """Run everything that can run at the current time; returns the work done. Never skips time."""
        with self._running():
            return self._run_idle(max_steps)

    def run_until(
        self,
        predicate: Callable[[], bool],
        timeout_virtual: timedelta = timedelta(days=1),
        max_steps: int = 100_000,
    ) -> None:
        """Run, skipping time to the next timer whenever idle, until ``predicate()`` holds.

        ``timeout_virtual`` bounds host time (real time with a real clock). Raises ``TimeoutError``
        with a diagnosis when the predicate cannot become true.
        """
        with self._running():
            deadline = self.clock.now() + timeout_virtual
            steps = 0
            while True:
                steps += self._run_idle(max_steps - steps, count_steps=True)
                if predicate():
                    return
                wake = self._next_wakeup()
                now = self.clock.now()
                if self.clock.is_virtual:
                    if wake is None:
                        raise TimeoutError(self._diagnose("nothing left to run and no timer pending"))
                    if wake > deadline:
                        raise TimeoutError(
                            self._diagnose(f"next timer at {format_time(wake)} is after the timeout")
                        )
                    self._log("", f"clock skips {_delta(wake - now)} to {format_time(wake)}")
                    self.clock.advance_to(wake)
                else:
                    if now >= deadline:
                        raise TimeoutError(self._diagnose("real-time timeout"))
                    pause = self.poll_interval
                    if wake is not None:
                        pause = min(pause, max((wake - now).total_seconds(), 0.0))
                    self._lock.release()
                    try:
                        time.sleep(min(pause, max((deadline - now).total_seconds(), 0.0)))
                    finally:
                        self._lock.acquire()

    def run_until_complete(
        self, instance_id: str, timeout_virtual: timedelta = timedelta(days=1), max_steps: int = 100_000
    ) -> DurableOrchestrationStatus:
        """Run until the instance is Completed, Failed or Terminated; returns its status."""
        self._require(instance_id)
        self.run_until(
            lambda: self._instances[instance_id].status in TERMINAL_STATUSES, timeout_virtual, max_steps
        )
        return self.get_status(instance_id)

    def advance(self, delta: timedelta, max_steps: int = 100_000) -> None:
        """Move the virtual clock forward by ``delta``, firing timers in order and running to idle."""
        if not self.clock.is_virtual:
            raise RuntimeError("advance() needs a virtual clock")
        with self._running():
            target = self.clock.now() + delta
            steps = self._run_idle(max_steps, count_steps=True)
            while True:
                wake = self._next_wakeup()
                if wake is None or wake > target:
                    break
                self.clock.advance_to(wake)
                steps += self._run_idle(max_steps - steps, count_steps=True)
            self.clock.advance_to(target)
            self._run_idle(max_steps - steps)

    # ------------------------------------------------------------------------------------------
    # Calling function bodies (HTTP starters, timer functions, agents) with the host's client
    # ------------------------------------------------------------------------------------------

    def function(self, name: str) -> Callable[..., Any]:
        """The user function of a non-durable function (HTTP, timer, queue trigger) by name."""
        function = self.functions.others.get(name)
        if function is None:
            raise KeyError(f"no non-durable function named {name!r}")
        return function.get_user_function()

    def call(self, fn: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> Any:
        """Call a function body (sync or async) under the host clock and return its result.

        Accepts a function name (see :meth:`function`), a decorated function or the plain callable.
        For a function declared with ``durable_client_input`` the SDK's wrapper, which would build a
        client from a binding string, is bypassed so ``client=host.client`` can be passed as is.
        """
        target: Any = self.function(fn) if isinstance(fn, str) else fn
        if hasattr(target, "_function") and _is_function(target._function):
            target = target._function
        if _is_function(target):
            target = target.get_user_function()
        target = getattr(target, "client_function", target)
        with self.installed_clock():
            return call_maybe_async(self._async, target, *args, **kwargs)

    def run_async(self, awaitable: Any) -> Any:
        """Run an awaitable to completion from synchronous code (under the host clock)."""
        with self.installed_clock():
            return self._async.run(awaitable)

    # ------------------------------------------------------------------------------------------
    # Tracing
    # ------------------------------------------------------------------------------------------

    def timeline(self, instance_id: str | None = None) -> list[tuple[datetime, str]]:
        """(host time, event) lines, for one instance or (prefixed with the instance id) all."""
        with self._lock:
            if instance_id is not None:
                return [(t, text) for t, iid, text in self._timeline if iid == instance_id]
            return [(t, f"[{iid}] {text}" if iid else text) for t, iid, text in self._timeline]

    def format_timeline(self, instance_id: str | None = None) -> str:
        start = self.clock.start
        return "\n".join(f"{_offset(t - start)}  {text}" for t, text in self.timeline(instance_id))

    # ------------------------------------------------------------------------------------------
    # The loop
    # ------------------------------------------------------------------------------------------

    @contextmanager
    def _running(self) -> Iterator[None]:
        with self._lock:
            if self._loop_thread == threading.get_ident():
                raise RuntimeError("the durable host loop cannot be re-entered from inside a step")
            self._loop_thread = threading.get_ident()
            try:
                with self.installed_clock():
                    yield
            finally:
                self._loop_thread = None

    @property
    def in_loop(self) -> bool:
        return self._loop_thread == threading.get_ident()

    def _run_idle(self, max_steps: int, count_steps: bool = False) -> int:
        total = 0
        for steps in range(max(max_steps, 1)):
            work = self._step()
            if work == 0:
                return steps if count_steps else total
            total += work
        raise RuntimeError(
            self._diagnose(f"still busy after {max_steps} steps: an orchestrator or a pump never goes idle")
        )

    def _step(self) -> int:
        work = self._fire_due_timers()
        work += self._run_due_periodics()
        for instance_id in list(self._dirty):
            self._dirty.pop(instance_id, None)
            inst = self._instances.get(instance_id)
            if inst is None or inst.status in TERMINAL_STATUSES or not inst.inbox:
                continue
            self._run_episode(inst)
            work += 1
            if inst.inbox and inst.status not in TERMINAL_STATUSES:
                self._dirty[instance_id] = None
        for _ in range(len(self._activity_queue)):
            self._execute_activity(self._activity_queue.popleft())
            work += 1
        for name, pump in list(self._pumps):
            done = call_maybe_async(self._async, pump)
            if done:
                work += int(done)
                self._log("", f"pump {name}: {int(done)} unit(s) of work")
        return work

    def _next_wakeup(self) -> datetime | None:
        self._drop_dead_timers()
        candidates = [p.next_at for p in self._periodics]
        if self._timers:
            candidates.append(self._timers[0][0])
        return min(candidates) if candidates else None

    def _drop_dead_timers(self) -> None:
        while self._timers and self._timer_task(self._timers[0]) is None:
            heapq.heappop(self._timers)

    def _timer_task(self, entry: tuple) -> _Task | None:
        _, _, instance_id, execution_id, task_id = entry
        inst = self._instances.get(instance_id)
        if inst is None or inst.execution.execution_id != execution_id or inst.status in TERMINAL_STATUSES:
            return None
        task = inst.execution.tasks.get(task_id)
        if task is None or task.cancelled or task.done:
            return None
        return task

    def _fire_due_timers(self) -> int:
        fired = 0
        now = self.clock.now()
        while self._timers and self._timers[0][0] <= now:
            entry = heapq.heappop(self._timers)
            task = self._timer_task(entry)
            if task is None:
                continue
            task.done = True
            inst = self._instances[entry[2]]
            event = make_event(H.TIMER_FIRED, now, TimerId=task.id, FireAt=format_time(task.fire_at))
            self._deliver(inst, event)
            self._log(inst.instance_id, f"timer #{task.id} fired")
            fired += 1
        return fired

    def _run_due_periodics(self) -> int:
        work = 0
        now = self.clock.now()
        for periodic in list(self._periodics):
            while periodic.next_at <= now:
                periodic.next_at += periodic.every
                done = call_maybe_async(self._async, periodic.fn)
                work += 1
                self._log("", f"periodic {periodic.name} ran" + (f": {done}" if done else ""))
        return work

    # ------------------------------------------------------------------------------------------
    # Orchestrator episodes
    # ------------------------------------------------------------------------------------------

    def _create_instance(
        self,
        name: str,
        instance_id: str,
        input_json: str | None,
        *,
        version: str = "",
        parent: _ParentRef | None = None,
    ) -> _Instance:
        now = self.clock.now()
        execution = _Execution(uuid.uuid4().hex, input_json)
        inst = _Instance(
            instance_id, name, Status.Pending, now, now, execution, version=version, parent=parent
        )
        self._instances[instance_id] = inst
        self._deliver(inst, self._execution_started(inst, now))
        where = f" (sub-orchestration of {parent.instance_id})" if parent else ""
        self._log(instance_id, f"scheduled {name!r}{where} with input {_short(input_json)}")
        return inst

    def _execution_started(self, inst: _Instance, now: datetime) -> dict:
        parent = inst.parent
        parent_json = None
        if parent is not None:
            parent_json = {
                "Name": parent.name,
                "OrchestrationInstance": {
                    "InstanceId": parent.instance_id,
                    "ExecutionId": parent.execution_id,
                },
                "TaskScheduleId": parent.task_id,
            }
        return make_event(
            H.EXECUTION_STARTED,
            now,
            Name=inst.name,
            Input=inst.execution.input,
            Version=inst.version,
            OrchestrationInstance={
                "InstanceId": inst.instance_id,
                "ExecutionId": inst.execution.execution_id,
            },
            ParentInstance=parent_json,
            Tags=None,
        )

    def _deliver(
        self, inst: _Instance, event: dict, *, volatile: bool = False, task_id: int | None = None
    ) -> None:
        inst.inbox.append(_Message(event, volatile, task_id))
        self._dirty[inst.instance_id] = None

    def _is_retry_relevant(self, execution: _Execution, event: dict) -> bool:
        """Events after which the engine allocates a sequence number for a retry (see module doc)."""
        kind = event["EventType"]
        if kind in (H.TASK_FAILED, H.SUB_ORCHESTRATION_INSTANCE_FAILED):
            task = execution.tasks.get(event["TaskScheduledId"])
            return bool(task and task.retry and task.retry.current_task_id == task.id)
        if kind == H.TIMER_FIRED:
            task = execution.tasks.get(event["TimerId"])
            return bool(
                task
                and task.retry
                and task.retry.timer_id == task.id
                and task.retry.attempts < task.retry.max_attempts
            )
        return False

    def _take_batch(self, inst: _Instance) -> list[_Message]:
        """All new messages, retry-relevant ones first (stable otherwise).

        The SDK allocates a retry's timer/attempt sequence number when it replays the failure (or
        the retry timer); the engine allocates it before the replay. Those events never resume the
        orchestrator code, so putting them first keeps both allocations in the same order even when
        another event in the same episode makes the orchestrator schedule new work.
        """
        execution = inst.execution
        relevant = [m for m in inst.inbox if self._is_retry_relevant(execution, m.event)]
        others = [m for m in inst.inbox if not self._is_retry_relevant(execution, m.event)]
        inst.inbox = []
        if others and others[0].event["EventType"] == H.EXECUTION_STARTED:
            return [others[0], *relevant, *others[1:]]
        return [*relevant, *others]

    def _run_episode(self, inst: _Instance) -> None:
        execution = inst.execution
        orchestrator = self.functions.orchestrators[inst.name]
        now = self.clock.now()
        batch = self._take_batch(inst)
        new_events = [make_event(H.ORCHESTRATOR_STARTED, now)] + [m.event for m in batch]
        execution.episodes += 1
        labels = ", ".join(event_label(e) for e in new_events[1:])
        self._log(
            inst.instance_id, f"replay #{execution.episodes} with {len(inst.history)} old event(s) + {labels}"
        )
        decisions: list[dict] = []
        after_commit: list[Callable[[], None]] = []
        for message in batch:
            self._account(inst, message.event, now, decisions, after_commit)

        context = {
            "history": [*inst.history, *new_events],
            "instanceId": inst.instance_id,
            "isReplaying": bool(inst.history),
            "parentInstanceId": inst.parent.instance_id if inst.parent else None,
            "input": execution.input,
            "upperSchemaVersion": self.schema_version,
        }
        error: str | None = None
        details = ""
        state: dict = {}
        try:
            raw = orchestrator.handler(OrchestrationContext(json.dumps(context)))
            state = json.loads(raw) if isinstance(raw, str) else raw
        except Exception as exc:
            state, error, details = _parse_failure(exc)

        inst.history.extend(_played(e) for e in new_events)
        if inst.status in (Status.Pending, Status.ContinuedAsNew):
            inst.status = Status.Running
        inst.updated = now
        if state.get("customStatus") is not None:
            inst.custom_status = state["customStatus"]
        inst.last_actions = state.get("actions")

        if error is None:
            try:
                self._apply_actions(inst, state.get("actions") or [], now, decisions, after_commit)
            except _OrchestrationError as exc:
                error, details = str(exc), ""
        inst.history.extend(_played(e) for e in decisions)
        inst.history.append(_played(make_event(H.ORCHESTRATOR_COMPLETED, now)))

        if error is not None:
            self._fail(inst, f"Orchestrator function '{inst.name}' failed: {error}", details)
            return
        for action in after_commit:
            action()
        if state.get("isDone"):
            continue_as_new = next(
                (
                    a
                    for a in flatten_actions(state.get("actions") or [])
                    if a.get("actionType") == ActionType.CONTINUE_AS_NEW
                ),
                None,
            )
            if continue_as_new is not None:
                self._continue_as_new(inst, continue_as_new.get("input"))
            else:
                self._complete(inst, state.get("output"))

    def _account(
        self,
        inst: _Instance,
        event: dict,
        now: datetime,
        decisions: list[dict],
        after_commit: list[Callable[[], None]],
    ) -> None:
        """Engine bookkeeping for an event entering history; retry follow-ups are decided here."""
        execution = inst.execution
        kind = event["EventType"]
        if kind in (
            H.TASK_COMPLETED,
            H.TASK_FAILED,
            H.SUB_ORCHESTRATION_INSTANCE_COMPLETED,
            H.SUB_ORCHESTRATION_INSTANCE_FAILED,
        ):
            task = execution.tasks.get(event["TaskScheduledId"])
            if task is None:
                return
            relevant = self._is_retry_relevant(execution, event)
            task.done = True
            if not relevant:
                return
            retry = task.retry
            retry.current_task_id = None
            timer_id = self._allocate(execution)
            fire_at = now + retry.first_interval
            timer = _Task(timer_id, "timer", fire_at=fire_at, retry=retry)
            execution.tasks[timer_id] = timer
            retry.timer_id = timer_id
            decisions.append(make_event(H.TIMER_CREATED, now, timer_id, FireAt=format_time(fire_at)))
            after_commit.append(lambda: self._schedule_timer(inst, timer))
            self._log(
                inst.instance_id,
                f"{retry.kind} {retry.name!r} attempt {retry.attempts}/{retry.max_attempts} failed; "
                f"retry timer #{timer_id} at {format_time(fire_at)}",
            )
        elif kind == H.TIMER_FIRED:
            task = execution.tasks.get(event["TimerId"])
            if task is None or not self._is_retry_relevant(execution, event):
                return
            retry = task.retry
            retry.timer_id = None
            retry.attempts += 1
            task_id = self._allocate(execution)
            retry.current_task_id = task_id
            attempt = _Task(task_id, retry.kind, name=retry.name, input=retry.input, retry=retry)
            execution.tasks[task_id] = attempt
            decisions.append(self._schedule_event(inst, attempt, now, retry.instance_id))
            after_commit.append(lambda: self._dispatch(inst, attempt))

    @staticmethod
    def _allocate(execution: _Execution) -> int:
        task_id = execution.next_id
        execution.next_id += 1
        return task_id

    def _apply_actions(
        self,
        inst: _Instance,
        actions: list,
        now: datetime,
        decisions: list[dict],
        after_commit: list[Callable[[], None]],
    ) -> None:
        execution = inst.execution
        flat = list(flatten_actions(actions))
        known = len(execution.action_signatures)
        if len(flat) < known:
            raise _OrchestrationError(
                f"Non-Deterministic workflow detected: a previous execution scheduled {known} action(s) "
                f"but this replay scheduled only {len(flat)}. Was the orchestrator code changed while the "
                "instance was running, or does it depend on something other than its history?"
            )
        for index, action in enumerate(flat):
            signature = _signature(action)
            if index < known:
                if signature != execution.action_signatures[index]:
                    raise _OrchestrationError(
                        f"Non-Deterministic workflow detected: action #{index} was "
                        f"{_describe_signature(execution.action_signatures[index])} in a previous execution "
                        f"but is {_describe_signature(signature)} in this replay."
                    )
                task_id = execution.action_task_ids[index]
                if action.get("actionType") == ActionType.CREATE_TIMER and action.get("isCanceled"):
                    self._cancel_timer(inst, execution.tasks[task_id])
                continue
            execution.action_signatures.append(signature)
            execution.action_task_ids.append(
                self._schedule_action(inst, action, now, decisions, after_commit)
            )

    def _schedule_action(
        self,
        inst: _Instance,
        action: dict,
        now: datetime,
        decisions: list[dict],
        after_commit: list[Callable[[], None]],
    ) -> int | None:
        execution = inst.execution
        kind = action.get("actionType")
        if kind in (ActionType.CALL_ACTIVITY, ActionType.CALL_ACTIVITY_WITH_RETRY):
            name = action["functionName"]
            if name not in self.functions.activities:
                raise _OrchestrationError(
                    f"The function '{name}' doesn't exist, is disabled, or is not an activity function."
                )
            task = _Task(self._allocate(execution), "activity", name=name, input=action.get("input"))
        elif kind in (ActionType.CALL_SUB_ORCHESTRATOR, ActionType.CALL_SUB_ORCHESTRATOR_WITH_RETRY):
            name = action["functionName"]
            if name not in self.functions.orchestrators:
                raise _OrchestrationError(
                    f"The function '{name}' doesn't exist, is disabled, or is not an orchestrator function."
                )
            requested = action.get("instanceId")
            if requested is not None and requested in (
                inst.instance_id,
                inst.parent and inst.parent.instance_id,
            ):
                raise _OrchestrationError(
                    "The instance ID of a sub-orchestration must be different than the instance ID of a "
                    "parent orchestration."
                )
            task = _Task(self._allocate(execution), "suborchestration", name=name, input=action.get("input"))
        elif kind == ActionType.CREATE_TIMER:
            fire_at = parse_time(action["fireAt"])
            task = _Task(self._allocate(execution), "timer", fire_at=fire_at)
            execution.tasks[task.id] = task
            decisions.append(make_event(H.TIMER_CREATED, now, task.id, FireAt=format_time(fire_at)))
            self._log(
                inst.instance_id,
                f"timer #{task.id} created for {format_time(fire_at)} (in {_delta(fire_at - now)})",
            )
            if action.get("isCanceled"):
                self._cancel_timer(inst, task)
            else:
                after_commit.append(lambda: self._schedule_timer(inst, task))
            return task.id
        elif kind == ActionType.WAIT_FOR_EXTERNAL_EVENT:
            self._log(inst.instance_id, f"waiting for external event {action.get('externalEventName')!r}")
            return None
        elif kind == ActionType.CONTINUE_AS_NEW:
            return None
        else:
            raise _OrchestrationError(f"{action_label(action)} is not supported by the durable test host")

        if kind in (ActionType.CALL_ACTIVITY_WITH_RETRY, ActionType.CALL_SUB_ORCHESTRATOR_WITH_RETRY):
            options = action.get("retryOptions") or {}
            task.retry = _Retry(
                kind=task.kind,
                name=task.name,
                input=task.input,
                instance_id=action.get("instanceId"),
                first_interval=timedelta(milliseconds=options.get("firstRetryIntervalInMilliseconds", 1000)),
                max_attempts=int(options.get("maxNumberOfAttempts", 1)),
                current_task_id=task.id,
            )
        execution.tasks[task.id] = task
        decisions.append(self._schedule_event(inst, task, now, action.get("instanceId")))
        after_commit.append(lambda: self._dispatch(inst, task))
        return task.id

    def _schedule_event(self, inst: _Instance, task: _Task, now: datetime, requested_id: str | None) -> dict:
        if task.kind == "activity":
            return make_event(H.TASK_SCHEDULED, now, task.id, Name=task.name, Input=task.input, Version="")
        task.child_instance_id = requested_id or f"{inst.execution.execution_id}:{task.id}"
        return make_event(
            H.SUB_ORCHESTRATION_INSTANCE_CREATED,
            now,
            task.id,
            Name=task.name,
            Input=task.input,
            InstanceId=task.child_instance_id,
            Version="",
        )

    def _dispatch(self, inst: _Instance, task: _Task) -> None:
        execution = inst.execution
        if task.kind == "activity":
            self._activity_queue.append(
                _WorkItem(inst.instance_id, execution.execution_id, task.id, task.name, task.input)
            )
            attempt = f" (attempt {task.retry.attempts})" if task.retry and task.retry.attempts > 1 else ""
            self._log(inst.instance_id, f"activity {task.name!r} #{task.id} scheduled{attempt}")
            return
        child_id = task.child_instance_id
        existing = self._instances.get(child_id)
        if existing is not None and existing.status in RUNNING_STATUSES:
            event = make_event(
                H.SUB_ORCHESTRATION_INSTANCE_FAILED,
                self.clock.now(),
                TaskScheduledId=task.id,
                Reason=f"An Orchestration instance with the status {existing.status.value} already exists.",
                Details="",
            )
            self._deliver(inst, event)
            return
        parent = _ParentRef(inst.instance_id, execution.execution_id, task.id, inst.name)
        self._create_instance(task.name, child_id, task.input, parent=parent)

    def _schedule_timer(self, inst: _Instance, task: _Task) -> None:
        entry = (task.fire_at, next(self._timer_seq), inst.instance_id, inst.execution.execution_id, task.id)
        heapq.heappush(self._timers, entry)

    def _cancel_timer(self, inst: _Instance, task: _Task) -> None:
        if task.cancelled or task.done:
            return
        task.cancelled = True
        self._log(inst.instance_id, f"timer #{task.id} cancelled (it will never fire)")

    def _open_timers(self, execution: _Execution) -> list[_Task]:
        return [t for t in execution.tasks.values() if t.kind == "timer" and not t.done and not t.cancelled]

    def _complete(self, inst: _Instance, output: Any) -> None:
        execution = inst.execution
        open_timers = self._open_timers(execution) if self.hold_completion_for_open_timers else []
        if open_timers:
            if not execution.completion_held:
                when = ", ".join(f"#{t.id} at {format_time(t.fire_at)}" for t in open_timers)
                self._log(
                    inst.instance_id,
                    f"orchestrator returned, but un-cancelled timer(s) {when} keep it Running "
                    "until they fire",
                )
            execution.completion_held = True
            return
        now = self.clock.now()
        inst.status = Status.Completed
        inst.output = output
        inst.updated = now
        result = json.dumps(output)
        inst.history.append(
            _played(make_event(H.EXECUTION_COMPLETED, now, OrchestrationStatus="Completed", Result=result))
        )
        self._log(inst.instance_id, f"completed: {_short(output)}")
        self._notify_parent(inst, failed=False, result=result)

    def _fail(self, inst: _Instance, message: str, details: str) -> None:
        now = self.clock.now()
        inst.status = Status.Failed
        inst.output = message
        inst.failure_details = details
        inst.updated = now
        inst.history.append(
            _played(
                make_event(
                    H.EXECUTION_COMPLETED,
                    now,
                    OrchestrationStatus="Failed",
                    Result=message,
                    FailureDetails={"ErrorMessage": message, "StackTrace": details},
                )
            )
        )
        self._log(inst.instance_id, f"FAILED: {message}")
        self._notify_parent(inst, failed=True, reason=message, details=details)

    def _continue_as_new(self, inst: _Instance, input_json: str | None) -> None:
        now = self.clock.now()
        carried = [m for m in inst.inbox if m.event["EventType"] == H.EVENT_RAISED]
        inst.execution = _Execution(uuid.uuid4().hex, input_json)
        inst.history = []
        inst.generations += 1
        inst.status = Status.ContinuedAsNew
        inst.updated = now
        inst.inbox = [_Message(self._execution_started(inst, now)), *carried]
        self._dirty[inst.instance_id] = None
        kept = f", {len(carried)} pending event(s) carried over" if carried else ""
        self._log(
            inst.instance_id,
            f"continued as new (generation {inst.generations}) with input {_short(input_json)}{kept}",
        )

    def _notify_parent(
        self, inst: _Instance, *, failed: bool, result: str | None = None, reason: str = "", details: str = ""
    ) -> None:
        ref = inst.parent
        if ref is None:
            return
        parent = self._instances.get(ref.instance_id)
        if (
            parent is None
            or parent.execution.execution_id != ref.execution_id
            or parent.status in TERMINAL_STATUSES
        ):
            return
        now = self.clock.now()
        if failed:
            event = make_event(
                H.SUB_ORCHESTRATION_INSTANCE_FAILED,
                now,
                TaskScheduledId=ref.task_id,
                Reason=reason,
                Details=details,
            )
        else:
            event = make_event(
                H.SUB_ORCHESTRATION_INSTANCE_COMPLETED, now, TaskScheduledId=ref.task_id, Result=result
            )
        self._deliver(parent, event)

    # ------------------------------------------------------------------------------------------
    # Activities
    # ------------------------------------------------------------------------------------------

    def _execute_activity(self, item: _WorkItem) -> None:
        activity = self.functions.activities[item.name]
        faults = self._faults.get(item.name)
        fault = faults.popleft() if faults else None
        started = time.perf_counter()
        event: dict | None = None
        try:
            if fault is not None and fault.mode == "before":
                raise fault.exc
            value = activity.decode_input(item.input)
            self.activity_calls[item.name] += 1
            result = call_maybe_async(self._async, activity.invoke, value)
            if fault is not None and fault.mode == "after":
                raise fault.exc
            encoded = activity.encode_output(result)
            event = make_event(
                H.TASK_COMPLETED, self.clock.now(), TaskScheduledId=item.task_id, Result=encoded
            )
            outcome = f"completed -> {_short(encoded)}"
        except Exception as exc:
            event = make_event(
                H.TASK_FAILED,
                self.clock.now(),
                TaskScheduledId=item.task_id,
                Reason=f"Activity function '{item.name}' failed: {type(exc).__name__}: {exc}",
                Details="".join(traceback.format_exception(exc)),
            )
            outcome = f"failed: {type(exc).__name__}: {exc}"
        elapsed = f"{(time.perf_counter() - started) * 1000:.1f} ms"
        if fault is not None and fault.mode == "lose_result":
            self._activity_queue.append(item)
            self._log(
                item.instance_id,
                f"activity {item.name!r} #{item.task_id} ran ({elapsed}) but its result was lost; "
                "redelivering",
            )
            return
        inst = self._instances.get(item.instance_id)
        if (
            inst is None
            or inst.execution.execution_id != item.execution_id
            or inst.status in TERMINAL_STATUSES
        ):
            self._log(
                item.instance_id,
                f"activity {item.name!r} #{item.task_id} {outcome} ({elapsed}); result discarded",
            )
            return
        self._log(item.instance_id, f"activity {item.name!r} #{item.task_id} {outcome} ({elapsed})")
        self._deliver(inst, event, volatile=True, task_id=item.task_id)

    # ------------------------------------------------------------------------------------------
    # Helpers
    # ------------------------------------------------------------------------------------------

    def _require(self, instance_id: str) -> _Instance:
        inst = self._instances.get(instance_id)
        if inst is None:
            raise InstanceNotFoundError(f"No instance with ID {instance_id} found.")
        return inst

    def _status_payload(
        self, inst: _Instance, *, show_history: bool = False, show_input: bool = True, precise: bool = True
    ) -> dict:
        def stamp(when: datetime) -> str:
            return format_time(when) if precise else when.strftime("%Y-%m-%dT%H:%M:%SZ")

        payload = {
            "name": inst.name,
            "instanceId": inst.instance_id,
            "runtimeStatus": inst.status.value,
            "input": _loads(inst.execution.input) if show_input else None,
            "customStatus": inst.custom_status,
            "output": inst.output,
            "createdTime": stamp(inst.created),
            "lastUpdatedTime": stamp(inst.updated),
        }
        if show_history:
            payload["historyEvents"] = copy.deepcopy(inst.history)
        return payload

    def _log(self, instance_id: str, text: str) -> None:
        now = self.clock.now()
        self._timeline.append((now, instance_id, text))
        if self.on_progress is not None:
            self.on_progress(now, instance_id, text)

    def _diagnose(self, reason: str) -> str:
        lines = [reason]
        for inst in self._instances.values():
            if inst.status in TERMINAL_STATUSES:
                continue
            timers = ", ".join(
                f"#{t.id} at {format_time(t.fire_at)}" for t in self._open_timers(inst.execution)
            )
            waiting = sorted(
                {
                    a.get("externalEventName")
                    for a in flatten_actions(inst.last_actions or [])
                    if a.get("actionType") == ActionType.WAIT_FOR_EXTERNAL_EVENT
                }
            )
            lines.append(
                f"  {inst.instance_id} ({inst.name}): {inst.status.value}; open timers: {timers or 'none'}; "
                f"events it has waited for: {waiting or 'none'}; undelivered messages: {len(inst.inbox)}"
            )
        tail = self.format_timeline().splitlines()[-15:]
        if tail:
            lines.append("last timeline lines:")
            lines.extend(f"  {line}" for line in tail)
        return "\n".join(lines)


# ----------------------------------------------------------------------------------------------


def _played(event: dict) -> dict:
    return {**event, "IsPlayed": True}


def _signature(action: dict) -> tuple:
    kind = action.get("actionType")
    if kind == ActionType.WAIT_FOR_EXTERNAL_EVENT:
        return (kind, action.get("externalEventName"))
    return (kind, action.get("functionName"))


def _describe_signature(signature: tuple) -> str:
    kind, name = signature
    try:
        label = ActionType(kind).name
    except ValueError:
        label = str(kind)
    return f"{label}({name!r})" if name else label


def _parse_failure(exc: Exception) -> tuple[dict, str, str]:
    """Split the SDK's failure form: ``<message>\\n\\n$OutOfProcData$:<state JSON>``."""
    message = str(exc)
    cause = exc.__cause__ or exc
    details = "".join(traceback.format_exception(cause))
    marker = message.find(_OUT_OF_PROC_MARKER)
    if marker < 0:
        return {}, message or type(exc).__name__, details
    try:
        state = json.loads(message[marker + len(_OUT_OF_PROC_MARKER) :])
    except ValueError:
        state = {}
    error = state.get("error") or message[:marker].strip() or type(exc).__name__
    return state, error, details


def _loads(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _short(value: Any, limit: int = 100) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _delta(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:g}s"
    if seconds < 7200:
        return f"{seconds / 60:g}m"
    return f"{seconds / 3600:g}h"


def _offset(delta: timedelta) -> str:
    total_ms = int(delta.total_seconds() * 1000)
    sign = "-" if total_ms < 0 else "+"
    total_ms = abs(total_ms)
    hours, rest = divmod(total_ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    return f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}.{millis:03d}"
