"""The whole Scheduler Agent Supervisor pattern in one process: for end-to-end tests, the demo and benchmarks.

Real function bodies, orchestrators (through the SDK's replay), Azurite tables and real queues; only
the Functions host and the Durable extension are stood in for: the durable test host, agent pumps
settling like the queue triggers (``harness_agents``), the watchdog as a periodic function on the
host clock (docs/testing.md, "The harness" and "What is real").

    from devtools.harness import PatternHarness

    with PatternHarness() as h:                      # starts its own Azurite unless given one
        iid = h.start_workflow("provision-tenant", {"tenant_id": "t1", "admin_email": "a@x.net"})
        status = h.run_until_complete(iid)
        assert h.double_effects() == {}
        print(h.transport_label, h.steps(iid))

One harness at a time per process: it points the process environment, ``workflow_core.runtime``'s
services and ``workflow_core.clock`` at itself, and restores them on ``close()``.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import shutil
import tempfile
import threading
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import azure.functions as func
import yaml

from devtools.azurite import Azurite, env_for
from devtools.durable_host import DurableTestHost
from devtools.faulty_transport import FaultyTransport
from devtools.harness_agents import HarnessError, HarnessFaults, HarnessPumps, _Hold
from devtools.harness_observation import HarnessObservation, LedgerEvent
from supervisor import run_tick
from workflow_core import runtime
from workflow_core.ledger import StepLedger
from workflow_core.transport import ReceivedMessage, Transport
from workflow_core.workflows import loader
from workflow_core.workflows.pools import pool_queue

DEFAULT_WATCHDOG_PERIOD = timedelta(seconds=30)
SERVICEBUS_MIN_WAIT_SECONDS = 0.05  # Service Bus has no zero-wait receive; keep idle polls short


@functools.cache
def app_functions() -> list[Any]:
    """``function_app.app``'s functions. ``get_functions()`` may be called only once per app (a second
    call fails the duplicate-name check), so the result is kept for every harness of the process."""
    import function_app

    try:
        return list(function_app.app.get_functions())
    except ValueError:  # indexed elsewhere already: build from the same builders
        app = function_app.app
        return [b.build(app.auth_level) for b in app._function_builders]


class PatternHarness(HarnessObservation, HarnessFaults, HarnessPumps):
    """The pattern in one process on Azurite; see the module docstring.

    ``azurite``: one to use (left running on close); ``None`` starts a private one.
    ``clock``: ``"virtual"`` (default), ``"real"``, or one of the durable host's clocks.
    ``watchdog_every``: the watchdog period on the host clock (``None``: call :meth:`watchdog_tick`);
    ``watchdog_skew``: how far the periodic watchdog's clock runs ahead of everyone else's.
    ``settings``: extra app settings; ``extra_workflows``: ``{name: definition dict or YAML text}``
    served next to the shipped ones; ``on_event``: called with each :class:`LedgerEvent` as it commits.
    ``hosted_pools``: the pools the harness's agents serve (default: all), so a test can leave a pool
    to another process.
    """

    lock_seconds = 1.0  # the agent pumps' lock on a received message (Storage Queues: 1 s minimum)

    def __init__(
        self,
        azurite: Azurite | None = None,
        *,
        clock: Any = "virtual",
        watchdog_every: timedelta | None = DEFAULT_WATCHDOG_PERIOD,
        watchdog_skew: timedelta = timedelta(0),
        settings: Mapping[str, str] | None = None,
        extra_workflows: Mapping[str, Any] | None = None,
        on_event: Callable[[LedgerEvent], None] | None = None,
        hosted_pools: Iterable[str] | None = None,
    ) -> None:
        self._own_azurite = azurite is None
        self.azurite = azurite or Azurite().start()
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
                env |= {
                    "AGENT_TRANSPORT": "servicebus",
                    "ServiceBusConnection": servicebus,
                    "WORK_QUEUE_NAME": os.environ.get("SERVICEBUS_WORK_QUEUE", "agent-work"),
                    "RESULT_QUEUE_NAME": os.environ.get("SERVICEBUS_RESULT_QUEUE", "agent-results"),
                }
            env.update(settings or {})
            self._set_env(env)
            if extra_workflows:
                self._serve_workflows(extra_workflows)
            declared = loader.agent_pools().names
            self._set_env({"HOSTED_POOLS": ",".join(declared if hosted_pools is None else hosted_pools)})

            runtime.reset_services()
            self._restore.append(runtime.reset_services)
            services = runtime.get_services()
            self.settings = services.settings
            if servicebus:  # a short empty-receive wait: the pumps poll every loop iteration
                from azure.servicebus import parse_connection_string

                from workflow_core.transport.servicebus import ServiceBusTransport

                real_transport: Transport = ServiceBusTransport.from_connection(
                    services.settings.service_bus, min_wait_seconds=SERVICEBUS_MIN_WAIT_SECONDS
                )
                namespace = parse_connection_string(servicebus).fully_qualified_namespace
                self.transport_label = f"Service Bus ({namespace})"
                for queue in (self.settings.work_queue, self.settings.result_queue):  # drained
                    while batch := real_transport.receive(queue, max_messages=32, lock_seconds=30):
                        for message in batch:
                            real_transport.complete(message)
            else:
                real_transport = services.transport  # creates the Storage queues (and their poison queues)
                self.transport_label = f"Storage Queues on Azurite (127.0.0.1:{self.azurite.queue_port})"
            work = self.settings.work_queue
            self._pool_queues = {pool_queue(work, pool): pool for pool in declared}  # queue -> pool
            dead = self.settings.hosted_pools if servicebus else declared  # as the app reads them
            self._dead_letter_pools = [(pool_queue(work, pool), pool) for pool in dead]
            # Skipping a poll known to come back empty is for Storage Queues only: a Service Bus broker
            # dead-letters and redelivers on its own, without the harness's transport.
            self._skip_empty_polls = not servicebus
            self.transport = FaultyTransport(real_transport, self._queue_kind)
            services.__dict__["transport"] = self.transport
            self.services = services
            self.ledger: StepLedger = services.ledger  # creates the tables
            self._observe_ledger(self.ledger)
            self._observe_agents()
            self.host = DurableTestHost(app_functions(), clock=clock, poll_interval=0.002)
            self.host.__enter__()
            self._restore.append(self.host.close)
            # kept: a test whose work queue is served by another process removes it (host.remove_pump)
            self.work_pump = self.host.add_pump(self._pump_work, "agent_worker")
            self.host.add_pump(self._pump_results, "agent_result_handler")
            self.host.add_pump(self._pump_dead_letters, "agent_dead_letter_handler")
            self.watchdog_every: timedelta | None = None
            if watchdog_every is not None:
                self.start_watchdog(watchdog_every)
        except BaseException:
            self.close()
            raise

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
        # as the timer function does (supervisor/watchdog.py): `sas doctor` reads when it last ran
        self.services.liveness.record_tick(overdue=report.overdue, errors=report.errors)
        return report.summary() if report.overdue else None

    async def _tick(self, **kwargs: Any) -> Any:
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
