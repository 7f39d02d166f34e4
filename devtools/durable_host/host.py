"""The durable test host's public face: construction, the instance operations, calling function
bodies; the rest is in mixins (docs/durable-test-host.md, "Where the code is")."""

from __future__ import annotations

import copy
import itertools
import json
import threading
import uuid
from collections import Counter, deque
from collections.abc import Callable
from datetime import datetime
from typing import Any

from azure.durable_functions.models.DurableOrchestrationStatus import DurableOrchestrationStatus
from azure.durable_functions.models.utils.df_serialization import df_dumps

from workflow_core.clock import use_clock

from .aio import AsyncRunner, call_maybe_async
from .client import DurableTestClient
from .clock import RealClock, VirtualClock
from .episodes import _Episodes
from .history import format_time, json_value, make_event, unknown_function
from .lifecycle import _Lifecycle
from .registry import FunctionTable, _is_function
from .state import (
    RUNNING_STATUSES,
    TERMINAL_STATUSES,
    H,
    InstanceCompletedError,
    InstanceNotFoundError,
    OrchestrationAlreadyExistsError,
    Status,
    _Instance,
    _Periodic,
    _WorkItem,
)
from .timers import _Loop, _short

#: The replay schemas the SDK speaks, V1-V3 (docs/durable-test-host.md, "Schema version").
SUPPORTED_SCHEMA_VERSIONS = (0, 1, 2)


class DurableTestHost(_Lifecycle, _Episodes, _Loop):
    """Runs Durable Functions orchestrations in process, deterministically, on a virtual clock
    (docs/durable-test-host.md, "Quick start")."""

    def __init__(
        self,
        *sources: Any,
        orchestrators: dict[str, Callable] | None = None,
        activities: dict[str, Callable] | None = None,
        clock: VirtualClock | RealClock | str | None = None,
        schema_version: int = 2,
        poll_interval: float = 0.002,
    ) -> None:
        if schema_version not in SUPPORTED_SCHEMA_VERSIONS:
            raise ValueError(f"schema_version must be one of {SUPPORTED_SCHEMA_VERSIONS}")
        self.functions = FunctionTable()
        self.functions.load(sources)
        for kind, table in (("orchestrator", orchestrators), ("activity", activities)):
            for name, fn in (table or {}).items():
                self.functions.add_callable(name, fn, kind=kind)
        if clock in (None, "virtual", "real"):
            clock = RealClock() if clock == "real" else VirtualClock()
        self.clock = clock
        self.schema_version = schema_version
        self.base_url = "http://localhost:7071"
        self.poll_interval = poll_interval
        self.activity_calls: Counter[str] = Counter()  # user-code invocations per activity
        self._instances: dict[str, _Instance] = {}
        self._batching: set[str] = set()  # instances whose episodes wait (see ``batched``)
        self._dirty: dict[str, None] = {}  # an ordered set of instance ids with new messages
        self._activity_queue: deque[_WorkItem] = deque()
        self._timers: list[tuple[datetime, int, str, str, int]] = []
        self._timer_seq = itertools.count()
        self._periodics: list[_Periodic] = []
        self._pumps: list[tuple[str, Callable[[], Any]]] = []
        self._faults: dict[str, deque[tuple[str, BaseException | None]]] = {}  # (mode, exception)
        self._timeline: deque[tuple[datetime, str, str]] = deque(maxlen=200_000)
        self._lock = threading.RLock()
        self._loop_thread: int | None = None
        self._run_serial = 0  # entries into the loop (``run_serial``)
        self._iteration_work = 0  # work done so far by the iteration calling a pump (``iteration_busy``)
        self._async = AsyncRunner()
        self._clock_scope: Any = None
        # The SDK's own client, its HTTP calls answered by this host's emulation of the extension's API.
        self.client = DurableTestClient(self)

    def __enter__(self) -> DurableTestHost:
        self._clock_scope = use_clock(self.clock.now)
        self._clock_scope.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._clock_scope is not None:
            self._clock_scope.__exit__(None, None, None)
            self._clock_scope = None
        self._async.close()

    def start_new(self, name: str, instance_id: str | None = None, input: Any = None) -> str:
        """Schedule a new orchestration instance; returns its id (a uuid hex when none is given)."""
        return self._start(name, instance_id, df_dumps(input) if input is not None else None)

    def _start(self, name: str, instance_id: str | None, input_json: str | None) -> str:
        with self._lock:
            if name not in self.functions.orchestrators:
                raise ValueError(unknown_function(name, "orchestrator"))
            instance_id = instance_id or uuid.uuid4().hex
            existing = self._instances.get(instance_id)
            if existing is not None and existing.status in RUNNING_STATUSES:
                raise OrchestrationAlreadyExistsError(
                    f"An Orchestration instance with the status {existing.status.value} already exists."
                )
            self._create_instance(name, instance_id, input_json)
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
            inst.inbox.clear()
            self._dirty.pop(instance_id, None)
            ended = make_event(H.EXECUTION_TERMINATED, self.clock.now(), Input=reason)
            # The parent hears the termination reason, no details (``TaskOrchestrationDispatcher``).
            self._finish(inst, Status.Terminated, reason, ended, {"Reason": reason, "Details": None})
            self._log(instance_id, f"terminated: {reason!r}")
            return True

    def get_status(self, instance_id: str) -> DurableOrchestrationStatus | None:
        """The instance's status as the SDK's ``DurableOrchestrationStatus`` (None if unknown)."""
        with self._lock:
            inst = self._instances.get(instance_id)
            return None if inst is None else DurableOrchestrationStatus.from_json(self._status_payload(inst))

    def history(self, instance_id: str) -> list[dict]:
        """A copy of the current execution's history events."""
        with self._lock:
            return copy.deepcopy(self._require(instance_id).history)

    def histories(self, instance_id: str) -> list[list[dict]]:
        """A copy of every generation's history, oldest first."""
        with self._lock:
            inst = self._require(instance_id)
            return copy.deepcopy([*inst.past_histories, inst.history])

    def instance_ids(self) -> list[str]:
        with self._lock:
            return list(self._instances)

    def episodes(self, instance_id: str) -> int:
        """How many times the orchestrator ran (replays) in the current execution."""
        with self._lock:
            return self._require(instance_id).execution.episodes

    def function(self, name: str) -> Callable[..., Any]:
        """The user function of a non-durable function (HTTP, timer, queue trigger) by name."""
        if name not in self.functions.others:
            raise KeyError(f"no non-durable function named {name!r}")
        return self.functions.others[name].get_user_function()

    def call(self, fn: Callable[..., Any] | str, *args: Any, **kwargs: Any) -> Any:
        """Call a function body under the host clock, bypassing the SDK's ``durable_client_input``
        wrapper so ``client=host.client`` passes as is."""
        target: Any = self.function(fn) if isinstance(fn, str) else fn
        if _is_function(target):
            target = target.get_user_function()
        target = getattr(target, "client_function", target)
        with use_clock(self.clock.now):
            return call_maybe_async(self._async, target, *args, **kwargs)

    def run_async(self, awaitable: Any) -> Any:
        """Run an awaitable to completion from synchronous code (under the host clock)."""
        with use_clock(self.clock.now):
            return self._async.run(awaitable)

    def _require(self, instance_id: str) -> _Instance:
        inst = self._instances.get(instance_id)
        if inst is None:
            raise InstanceNotFoundError(f"No instance with ID {instance_id} found.")
        return inst

    def _status_payload(self, inst: _Instance, *, precise: bool = True) -> dict:
        stamp = format_time if precise else lambda when: when.strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "name": inst.name,
            "instanceId": inst.instance_id,
            "runtimeStatus": inst.status.value,
            "input": json_value(inst.execution.input),
            "customStatus": inst.custom_status,
            "output": inst.output,
            "createdTime": stamp(inst.created),
            "lastUpdatedTime": stamp(inst.updated),
        }
