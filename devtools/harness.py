"""The whole Scheduler Agent Supervisor pattern in one process: for end-to-end tests, the demo and benchmarks.

What is real and what stands in::

    HTTP starter body (api)  --host.client-->  DurableTestHost: real orchestrators + activities (SDK replay)
                                                      |  dispatch_step: ledger write, then send
                                                      v
    Azurite tables (ledger, deadline index)    real queues (Storage Queues on Azurite, or Service Bus)
                                                      |
          agent pumps (this module) = the Functions host's queue triggers: receive, call the REAL
          worker / result-handler / dead-letter bodies, complete on success, abandon on an exception,
          dead-letter after MAX_DELIVERY_COUNT deliveries (``workflow_core.transport.settle_failure``)
                                                      |
          watchdog = ``supervisor.run_tick`` as a periodic function on the host clock (default 30 s)

Only the Functions host itself is emulated (the durable test host for the Durable extension, the
pumps for the queue triggers, a periodic callback for the timer trigger). Every function body,
the ledger, the queues and the simulated remote services (the ``RemoteEffects`` table) are the
production code on a real Azurite.

    from devtools.harness import PatternHarness

    with PatternHarness() as h:                      # starts its own Azurite unless given one
        iid = h.start_workflow("provision-tenant", {"tenant_id": "t1", "admin_email": "a@x.net"})
        status = h.run_until_complete(iid)
        assert h.double_effects() == {}
        print(h.transport_label, h.steps(iid))

Observation: ``events`` (every ledger write, in the order it committed, live through ``on_event``),
``handler_calls`` / ``effects`` / ``double_effects`` per (instance, step), ``remote_effects`` (the
simulated service's rows), ``decisions`` / ``tick_reports`` of the watchdog, ``transport.sent_ids``.

Fault hooks (besides ``activities.handlers.faults`` for failing, stalling and crashing handlers, and
the durable host's own ``terminate``, ``crash`` and ``crash_activity_once``):

* ``fail_send`` / ``duplicate_send``: the next matching send raises, or goes out twice;
* ``hold`` / ``release`` / ``take_held`` + ``deliver``: an agent keeps a message (locked, unanswered)
  and answers late, or you deliver it yourself (e.g. to two competing workers at once);
* ``kill_agent``: the agent process dies mid-step without settling its message (:class:`AgentKilled`):
  it comes back when its lock expires;
* ``crash_dispatch_before_send``: the process running ``dispatch_step`` dies between its ledger write
  and its send; the Durable runtime redelivers the activity minutes later;
* ``pause_agents`` / ``resume_agents``; ``watchdog_skew`` (a watchdog whose clock runs ahead).

One harness at a time per process: it points the process environment, ``workflow_core.runtime``'s
services and ``workflow_core.clock`` at itself, and restores them on ``close()``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import azure.functions as func

from devtools.azurite import Azurite, env_for
from devtools.faulty_transport import FaultyTransport
from devtools.harness_faults import (  # noqa: F401 (re-exported)
    AgentKilled,
    HarnessError,
    HarnessFaults,
    ProcessDied,
    _Hold,
)
from devtools.harness_observation import HarnessObservation, LedgerEvent
from workflow_core.ledger import StepLedger, StepRecord
from workflow_core.transport import (
    LockLostError,
    OutgoingMessage,
    ReceivedMessage,
    Transport,
    settle_failure,
)

DEFAULT_WATCHDOG_PERIOD = timedelta(seconds=30)
DEFAULT_LOCK_SECONDS = 1.0  # Storage Queues: visibility timeout of a received message (1 s minimum)
RECEIVE_BATCH = 16  # messages a pump asks for per poll
SERVICEBUS_MIN_WAIT_SECONDS = 0.05  # Service Bus has no zero-wait receive; keep idle polls short

# ---- the function app, indexed once per process -------------------------------------------------

_functions_lock = threading.Lock()
_functions: list[Any] | None = None


def app_functions() -> list[Any]:
    """``function_app.app``'s functions. ``get_functions()`` may be called only once per app (a second
    call fails the duplicate-name check), so the result is kept for every harness of the process."""
    global _functions
    with _functions_lock:
        if _functions is None:
            import function_app

            try:
                _functions = list(function_app.app.get_functions())
            except ValueError:  # indexed elsewhere already: build from the same builders
                app = function_app.app
                _functions = [b.build(app.auth_level) for b in app._function_builders]
        return _functions


# ---- which agent queues are known to be empty ------------------------------------------------------


class _KnownEmpty:
    """The agent queues ("work", "results", "dead") whose last poll took every message there was (it
    came back with fewer than it asked for), with nothing put into them through the harness's
    transport since, in the current run of the host loop.

    The pumps skip such a poll only in a loop iteration that already did other work
    (``DurableTestHost.iteration_busy``): the host never counts as idle, nor skips virtual time, before
    an iteration in which every pump polled for real, so a message that arrived another way (a lock
    that expired, a test's own send) is still seen before time moves. Each entry into the host loop
    (``run_serial``) starts from nothing known.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._empty: set[str] = set()
        self._serial: int | None = None

    def known(self, kind: str, serial: int) -> bool:
        with self._lock:
            if serial != self._serial:
                self._empty.clear()
                self._serial = serial
            return kind in self._empty

    def polled(self, kind: str, drained: bool) -> None:
        with self._lock:
            if drained:
                self._empty.add(kind)
            else:
                self._empty.discard(kind)

    def forget(self, kind: str | None = None) -> None:
        with self._lock:
            if kind is None:
                self._empty.clear()
            else:
                self._empty.discard(kind)


class _WatchedTransport(FaultyTransport):
    """The harness's transport: tells :class:`_KnownEmpty` about everything that may fill a queue."""

    def __init__(self, real: Transport, queue_kind: Callable[[str], str], known_empty: _KnownEmpty) -> None:
        super().__init__(real, queue_kind)
        self._known_empty = known_empty

    def send(self, queue: str, message: OutgoingMessage) -> None:
        try:
            super().send(queue, message)
        finally:
            kind = self._queue_kind(queue)
            self._known_empty.forget(kind if kind in ("work", "results") else None)

    def abandon(self, message: ReceivedMessage) -> None:
        try:
            super().abandon(message)
        finally:
            self._known_empty.forget()

    def dead_letter(self, message: ReceivedMessage, reason: str, description: str = "") -> None:
        try:
            super().dead_letter(message, reason, description)
        finally:
            self._known_empty.forget()

    def renew_lock(self, message: ReceivedMessage, lock_seconds: float = 30.0) -> None:
        try:
            super().renew_lock(message, lock_seconds)
        finally:
            self._known_empty.forget()


# ---- the harness ---------------------------------------------------------------------------------


class PatternHarness(HarnessObservation, HarnessFaults):
    """The pattern in one process on Azurite; see the module docstring.

    ``azurite``: an :class:`Azurite` to use (it is left running on close); ``None`` starts a private one.
    ``clock``: ``"virtual"`` (default), ``"real"``, or a clock object (the durable host's clocks).
    ``watchdog_every``: the watchdog period on the host clock (``None``: no periodic watchdog; call
    :meth:`watchdog_tick`);
    ``watchdog_skew``: how far the periodic watchdog's clock runs ahead of everyone else's.
    ``lock_seconds``: the lock (visibility timeout) the agent pumps take on a received message.
    ``settings``: extra app settings (``WATCHDOG_GRACE_SECONDS``, ``MAX_DELIVERY_COUNT``...).
    ``extra_workflows``: ``{name: definition dict or YAML text}`` served next to the shipped ones.
    ``on_event``: called with each :class:`LedgerEvent` as it commits (the demo prints them).
    """

    def __init__(
        self,
        azurite: Azurite | None = None,
        *,
        clock: Any = "virtual",
        watchdog_every: timedelta | None = DEFAULT_WATCHDOG_PERIOD,
        watchdog_skew: timedelta = timedelta(0),
        settings: Mapping[str, str] | None = None,
        lock_seconds: float = DEFAULT_LOCK_SECONDS,
        extra_workflows: Mapping[str, Any] | None = None,
        on_event: Callable[[LedgerEvent], None] | None = None,
        poll_interval: float = 0.002,
    ) -> None:
        self._own_azurite = azurite is None
        self.azurite = azurite or Azurite().start()
        self.lock_seconds = lock_seconds
        self.watchdog_skew = watchdog_skew
        self.on_event = on_event
        self.events: list[LedgerEvent] = []
        self.tick_reports: list[Any] = []
        self.agents_paused = False
        self._seq = itertools.count(1)
        self._lock = threading.RLock()
        self._calls: Counter[tuple[str, str, str, int]] = Counter()
        self._effects: Counter[tuple[str, str, str]] = Counter()
        self._effect_keys: dict[tuple[str, str], set[tuple[str, str]]] = defaultdict(set)
        self._holds: list[_Hold] = []
        self._kills: list[list[Any]] = []
        self._released: list[tuple[str, ReceivedMessage]] = []
        self._orphans: list[float] = []  # monotonic times when messages of killed agents reappear
        self._deliveries = itertools.count(1)
        self._restore: list[Callable[[], None]] = []
        self._closed = False
        try:
            self._setup(clock, watchdog_every, settings or {}, extra_workflows or {}, poll_interval)
        except BaseException:
            self.close()
            raise

    # ---- setup ------------------------------------------------------------------------------------

    def _setup(
        self,
        clock: Any,
        watchdog_every: timedelta | None,
        settings: Mapping[str, str],
        extra_workflows: Mapping[str, Any],
        poll_interval: float,
    ) -> None:
        from workflow_core import runtime

        tag = uuid.uuid4().hex[:10]
        work_queue = f"h{tag}-work"
        env = {
            **env_for(self.azurite),
            "LEDGER_TABLE_NAME": f"h{tag}steps",
            "DEADLINE_INDEX_TABLE_NAME": f"h{tag}deadlines",
            "WORK_QUEUE_NAME": work_queue,
            "RESULT_QUEUE_NAME": f"h{tag}-results",
            "DEAD_LETTER_QUEUE_NAME": f"{work_queue}-poison",  # what the Functions host uses
        }
        servicebus = os.environ.get("SERVICEBUS_CONNECTION_STRING", "").strip()
        if servicebus:  # infrastructure owns Service Bus queues: use the configured ones
            env.update(
                {
                    "AGENT_TRANSPORT": "servicebus",
                    "ServiceBusConnection": servicebus,
                    "WORK_QUEUE_NAME": os.environ.get("SERVICEBUS_WORK_QUEUE", "agent-work"),
                    "RESULT_QUEUE_NAME": os.environ.get("SERVICEBUS_RESULT_QUEUE", "agent-results"),
                }
            )
        env.update(settings)
        self._set_env(env)
        if extra_workflows:
            self._serve_workflows(extra_workflows)

        runtime.reset_services()
        self._restore.append(runtime.reset_services)
        services = runtime.get_services()
        self.settings = services.settings
        if servicebus:  # a short empty-receive wait: the pumps poll every loop iteration
            from workflow_core.transport.servicebus import ServiceBusTransport

            real_transport: Transport = ServiceBusTransport.from_connection(
                services.settings.service_bus, min_wait_seconds=SERVICEBUS_MIN_WAIT_SECONDS
            )
        else:
            real_transport = services.transport  # creates the Storage queues (and their poison queues)
        self._known_empty = _KnownEmpty()
        # Skipping a poll known to come back empty is for Storage Queues only: a Service Bus broker
        # dead-letters and redelivers on its own, without the harness's transport.
        self._skip_empty_polls = not servicebus
        self.transport = _WatchedTransport(real_transport, self._queue_kind, self._known_empty)
        services.__dict__["transport"] = self.transport
        self.services = services
        self.ledger: StepLedger = services.ledger  # creates the tables
        self._observe_ledger(self.ledger)
        self._observe_agents()
        if servicebus:
            self.transport_label = f"Service Bus ({_endpoint(servicebus)})"
            for queue in (self.settings.work_queue, self.settings.result_queue):
                self._drain(queue)
        else:
            self.transport_label = f"Storage Queues on Azurite (127.0.0.1:{self.azurite.queue_port})"

        from devtools.durable_host import DurableTestHost

        self.host = DurableTestHost(app_functions(), clock=clock, poll_interval=poll_interval)
        self.host.__enter__()
        self._restore.append(self.host.close)
        self.host.add_pump(self._pump_work, "agent_worker")
        self.host.add_pump(self._pump_results, "agent_result_handler")
        self.host.add_pump(self._pump_dead_letters, "agent_dead_letter_handler")
        self.watchdog_every = watchdog_every
        if watchdog_every is not None:
            self.host.add_periodic(self._watchdog, watchdog_every, name="supervisor_watchdog")

    def _set_env(self, env: Mapping[str, str]) -> None:
        previous = {name: os.environ.get(name) for name in env}

        def restore() -> None:
            for name, value in previous.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

        self._restore.append(restore)
        os.environ.update(env)

    def _serve_workflows(self, extra: Mapping[str, Any]) -> None:
        """Shipped definitions plus ``extra``, from a temporary directory the loader reads instead."""
        import yaml

        from workflow_core.workflows import loader

        directory = Path(tempfile.mkdtemp(prefix="harness-workflows-"))
        for path in loader.DEFAULT_DIRECTORY.glob("*.y*ml"):
            shutil.copy(path, directory / path.name)
        for name, definition in extra.items():
            text = definition if isinstance(definition, str) else yaml.safe_dump(dict(definition))
            (directory / f"{name}.yaml").write_text(text, encoding="utf-8")
        original = loader.DEFAULT_DIRECTORY

        def restore() -> None:
            loader.DEFAULT_DIRECTORY = original
            loader.clear_workflow_cache()
            shutil.rmtree(directory, ignore_errors=True)

        self._restore.append(restore)
        loader.DEFAULT_DIRECTORY = directory
        loader.clear_workflow_cache()
        # Parse them now, while setting up, rather than inside the first start: a definition that does
        # not load raises where it did before (at its first use), so only a loadable set is read here.
        with contextlib.suppress(Exception):
            loader.load_workflows()

    def _queue_kind(self, queue: str) -> str:
        if queue == self.settings.work_queue:
            return "work"
        if queue == self.settings.result_queue:
            return "results"
        return queue

    def _drain(self, queue: str) -> None:
        while batch := self.transport.receive(queue, max_messages=32, lock_seconds=30):
            for message in batch:
                self.transport.complete(message)

    # ---- agent pumps: the Functions host's queue triggers -----------------------------------------

    def _work_handler(self, message: ReceivedMessage) -> None:
        from activities import process_work_message

        process_work_message(
            message.body,
            delivery_count=message.delivery_count,
            services=self.services,
            worker_id=f"worker:w{next(self._deliveries)}",
            message_id=message.message_id,
            trace=message.application_properties,
        )

    def _result_handler(self, message: ReceivedMessage) -> None:
        from activities import handle_result

        self.host.run_async(
            handle_result(
                message.body,
                self.host.client,
                self.services,
                message_id=message.message_id,
                trace=message.application_properties,
            )
        )

    def _pump_work(self) -> int:
        return self._consume("work", self.settings.work_queue, self._work_handler)

    def _pump_results(self) -> int:
        return self._consume("results", self.settings.result_queue, self._result_handler)

    def _pump_dead_letters(self) -> int:
        from activities import handle_dead_letter

        if self.agents_paused or self._may_skip_poll("dead"):
            return 0
        done = 0
        received = self.transport.receive_dead_letters(
            self.settings.work_queue, max_messages=RECEIVE_BATCH, lock_seconds=30
        )
        self._known_empty.polled("dead", drained=len(received) < RECEIVE_BATCH)
        for message in received:
            self.host.run_async(
                handle_dead_letter(
                    message.body,
                    reason=message.dead_letter_reason,
                    description=message.dead_letter_description,
                    client=self.host.client,
                    services=self.services,
                    message_id=message.message_id,
                    trace=message.application_properties,
                )
            )
            self.transport.complete(message)
            done += 1
        return done

    def _consume(self, kind: str, queue: str, handle: Callable[[ReceivedMessage], None]) -> int:
        """Receive, then settle each message like the Functions host (see the module docstring)."""
        if self.agents_paused:
            return 0
        with self._lock:
            released = [m for k, m in self._released if k == kind]
            self._released = [(k, m) for k, m in self._released if k != kind]
        wait = self._orphan_wait() if kind == "work" else 0.0
        if not released and not wait and self._may_skip_poll(kind):
            return 0
        received = self.transport.receive(
            queue, max_messages=RECEIVE_BATCH, lock_seconds=self.lock_seconds, wait_seconds=wait
        )
        self._known_empty.polled(kind, drained=len(received) < RECEIVE_BATCH)
        for message in released:
            self._settle(message, handle)
        for message in received:
            if not self._hold_if_matching(kind, message):
                self._settle(message, handle)
        return len(released) + len(received)

    def _may_skip_poll(self, kind: str) -> bool:
        """Whether this pump may leave its queue unpolled in this loop iteration (see :class:`_KnownEmpty`):
        the iteration already did work, and the last poll drained the queue with nothing sent since.
        While an agent holds a message, or a killed agent's message is due back, every poll is made."""
        if not self._skip_empty_polls or not self.host.iteration_busy:
            return False
        with self._lock:
            if self._orphans or any(h.held for h in self._holds):
                return False
        return self._known_empty.known(kind, self.host.run_serial)

    def _settle(self, message: ReceivedMessage, handle: Callable[[ReceivedMessage], None]) -> None:
        try:
            try:
                handle(message)
            except AgentKilled:
                # The process died: nothing settles the message; it reappears when its lock expires.
                with self._lock:
                    self._orphans.append(time.monotonic() + self.lock_seconds)
                return
            except Exception as exc:
                settle_failure(
                    self.transport,
                    message,
                    self.settings.max_delivery_count,
                    description=f"{type(exc).__name__}: {exc}",
                )
                return
            self.transport.complete(message)
        except LockLostError:
            pass  # the lock expired meanwhile: the queue delivers it again, as in Azure

    def _orphan_wait(self) -> float:
        """Seconds to wait for a killed agent's message to reappear (0 if none is pending).

        Waiting here (real time; the host clock stands still) is the host restarting the agent: it
        keeps the redelivery ahead of the step's deadline, as a lock much shorter than the deadline
        does in Azure.
        """
        with self._lock:
            now = time.monotonic()
            self._orphans = [t for t in self._orphans if t > now]
            return min(self._orphans) - now + 0.3 if self._orphans else 0.0

    # ---- running ----------------------------------------------------------------------------------

    def start_workflow(
        self, workflow: str, workflow_input: Mapping[str, Any], instance_id: str | None = None
    ) -> str:
        """``POST /api/workflows/{workflow}/instances`` through the real HTTP starter; the instance id."""
        params = {"instance_id": instance_id} if instance_id else {}
        request = func.HttpRequest(
            "POST",
            f"{self.host.base_url}/api/workflows/{workflow}/instances",
            headers={"Content-Type": "application/json", "X-SAS-Client": "harness"},
            params=params,
            route_params={"name": workflow},
            body=json.dumps(dict(workflow_input)).encode(),
        )
        response = self.host.call("http_start_workflow", request, client=self.host.client)
        body = json.loads(response.get_body() or b"{}")
        if response.status_code != 202:
            raise HarnessError(f"the starter answered {response.status_code}: {body}")
        self.last_start_response = body
        return body["instanceId"]

    def run_until_complete(self, instance_id: str, timeout: timedelta = timedelta(days=1)) -> Any:
        """Run (skipping virtual time) until the instance finished; its ``DurableOrchestrationStatus``."""
        return self.host.run_until_complete(instance_id, timeout_virtual=timeout)

    def run_until(self, predicate: Callable[[], bool], timeout: timedelta = timedelta(days=1)) -> None:
        self.host.run_until(predicate, timeout_virtual=timeout)

    def now(self) -> datetime:
        return self.host.clock.now()

    def elapsed(self) -> timedelta:
        """Host time since the harness started (virtual time with the default clock)."""
        return self.host.clock.now() - self.host.clock.start

    async def _watchdog(self) -> str | None:
        report = await self._tick(now=self.host.clock.now() + self.watchdog_skew)
        return report.summary() if report.overdue else None

    async def _tick(self, **kwargs: Any) -> Any:
        from supervisor import run_tick

        report = await run_tick(self.host.client, self.services, **kwargs)
        with self._lock:
            self.tick_reports.append(report)
        return report

    def start_watchdog(self, every: timedelta = DEFAULT_WATCHDOG_PERIOD) -> None:
        """Start the periodic watchdog now (for a harness made with ``watchdog_every=None``)."""
        if self.watchdog_every is not None:
            raise HarnessError("the watchdog already runs")
        self.watchdog_every = every
        self.host.add_periodic(self._watchdog, every, name="supervisor_watchdog")

    def watchdog_tick(self, **kwargs: Any) -> Any:
        """One watchdog tick now (``run_tick`` keyword arguments pass through); returns its report."""
        return self.host.run_async(self._tick(**kwargs))

    # ---- inspection -------------------------------------------------------------------------------

    def steps(self, instance_id: str) -> dict[str, StepRecord]:
        return {r.step_id: r for r in self.ledger.list_for_instance(instance_id)}

    def statuses(self, instance_id: str) -> dict[str, str]:
        return {r.step_id: r.status.value for r in self.ledger.list_for_instance(instance_id)}

    def handler_calls(
        self, instance_id: str, step_id: str, *, kind: str = "work", attempt: int | None = None
    ) -> int:
        with self._lock:
            return sum(
                n
                for (i, s, k, a), n in self._calls.items()
                if (i, s, k) == (instance_id, step_id, kind) and (attempt is None or a == attempt)
            )

    def effects(self, instance_id: str, step_id: str, *, kind: str = "work") -> int:
        """Remote effects made for the step (``kind="compensate"``: effects undone)."""
        with self._lock:
            return self._effects[(instance_id, step_id, kind)]

    def double_effects(self, instance_ids: Iterable[str] | None = None) -> dict[tuple[str, str, str], int]:
        """Every (instance, step, kind) with more than one remote effect: must be empty."""
        wanted = None if instance_ids is None else set(instance_ids)
        with self._lock:
            return {
                key: n for key, n in self._effects.items() if n > 1 and (wanted is None or key[0] in wanted)
            }

    def remote_effects(self, instance_id: str, step_id: str) -> list[dict[str, Any]]:
        """The simulated remote service's rows for the step (``State``: applied / undone)."""
        from activities.handlers import RemoteEffects

        effects = RemoteEffects.for_services(self.services)
        with self._lock:
            keys = sorted(self._effect_keys.get((instance_id, step_id), ()))
        return [row for service, key in keys if (row := effects.get(service, key)) is not None]

    def events_for(self, instance_id: str) -> list[LedgerEvent]:
        with self._lock:
            return [e for e in self.events if e.instance_id == instance_id]

    def decisions(self, instance_id: str | None = None) -> list[Any]:
        """Every watchdog decision so far (``supervisor.Decision``), optionally for one instance."""
        with self._lock:
            found = [d for r in self.tick_reports for d in r.decisions]
        return [d for d in found if instance_id is None or d.instance_id == instance_id]

    # ---- lifecycle --------------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for restore in reversed(self._restore):
            with contextlib.suppress(Exception):
                restore()
        self._restore.clear()
        if self._own_azurite:
            self.azurite.close()

    def __enter__(self) -> PatternHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _endpoint(connection_string: str) -> str:
    for part in connection_string.split(";"):
        if part.lower().startswith("endpoint="):
            return part.split("=", 1)[1].removeprefix("sb://").rstrip("/")
    return "configured namespace"
