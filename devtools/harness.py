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
import functools
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
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import azure.functions as func

from activities.handlers.base import AgentCrash
from devtools.azurite import Azurite, env_for
from devtools.faulty_transport import FaultyTransport, SendFault
from workflow_core.ledger import StepLedger, StepRecord
from workflow_core.transport import (
    LockLostError,
    ReceivedMessage,
    Transport,
    settle_failure,
)

DEFAULT_WATCHDOG_PERIOD = timedelta(seconds=30)
DEFAULT_LOCK_SECONDS = 1.0  # Storage Queues: visibility timeout of a received message (1 s minimum)
HELD_LOCK_SECONDS = 3600.0  # a message an agent holds on purpose (``hold``) stays invisible this long
SERVICEBUS_MIN_WAIT_SECONDS = 0.05  # Service Bus has no zero-wait receive; keep idle polls short


class HarnessError(RuntimeError):
    """The harness could not do what was asked (starter refused the request, a hold never matched...)."""


class ProcessDied(Exception):
    """Injected by :meth:`PatternHarness.crash_dispatch_before_send`: the process running an activity died."""


class AgentKilled(AgentCrash):
    """Raise from a handler to kill the agent process mid-step (see :meth:`PatternHarness.kill_agent`).

    Unlike an exception the Functions host catches (the message is abandoned and redelivered at once),
    a killed process settles nothing: the message reappears when its lock (visibility timeout) expires.
    It is an ``AgentCrash``, so the worker records nothing and lets it propagate.
    """


# ---- what the harness observes ------------------------------------------------------------------


@dataclass(frozen=True)
class LedgerEvent:
    """One committed ledger write (a status change, a field update, a heartbeat or an audit note)."""

    seq: int
    at: datetime  # host time of the write
    instance_id: str
    step_id: str  # "*" for the instance's "created" row
    actor: str
    action: str  # created | transition | update | heartbeat | note
    from_status: str | None
    to_status: str | None
    attempt: int | None
    reason: str
    note: str | None = None  # the audit action of a note ("late-result-ignored", "recovery"...)
    changes: tuple[str, ...] = ()  # fields an update/transition set
    record: StepRecord | None = None  # the step after the write (None for notes)


@dataclass
class _Hold:
    queue: str  # "work" or "results"
    step_id: str
    attempt: int | None
    kind: str
    times: int | None  # None: every matching message
    held: list[ReceivedMessage] = field(default_factory=list)
    matched: int = 0


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


# ---- the harness ---------------------------------------------------------------------------------


class PatternHarness:
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
        self.transport = FaultyTransport(real_transport, self._queue_kind)
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

    # ---- observation: ledger writes, handler calls, remote effects -------------------------------

    def _emit(self, **fields: Any) -> None:
        with self._lock:
            event = LedgerEvent(seq=next(self._seq), **fields)
            self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    def _observe_ledger(self, ledger: StepLedger) -> None:
        """Wrap the ledger's public writes (on this instance only) to record each committed write."""
        from workflow_core import clock

        names = ("transition", "update", "extend_deadline", "note")
        originals = {name: getattr(ledger, name) for name in names}
        original_create = ledger.create_steps

        def transition(record: StepRecord, to: Any, *, actor: str, reason: str = "", **changes: Any):
            updated = originals["transition"](record, to, actor=actor, reason=reason, **changes)
            self._emit_write("transition", record, updated, actor, reason, changes)
            return updated

        def update(record: StepRecord, *, actor: str, reason: str = "", **changes: Any):
            updated = originals["update"](record, actor=actor, reason=reason, **changes)
            self._emit_write("update", record, updated, actor, reason, changes)
            return updated

        def extend_deadline(record: StepRecord, seconds: float, *, actor: str, **kwargs: Any):
            updated = originals["extend_deadline"](record, seconds, actor=actor, **kwargs)
            if updated is not record:  # a heartbeat that kept a later deadline writes nothing
                reason = kwargs.get("reason", "heartbeat")
                self._emit_write("heartbeat", record, updated, actor, reason, {"deadline": updated.deadline})
            return updated

        def note(instance_id: str, step_id: str, *, actor: str, action: str, reason: str, **kwargs: Any):
            originals["note"](instance_id, step_id, actor=actor, action=action, reason=reason, **kwargs)
            self._emit(
                at=clock.utcnow(),
                instance_id=instance_id,
                step_id=step_id,
                actor=actor,
                action="note",
                from_status=kwargs.get("status"),
                to_status=kwargs.get("status"),
                attempt=kwargs.get("attempt"),
                reason=reason,
                note=action,
            )

        def create_steps(instance_id: str, workflow_name: str, steps: Any, *, actor: str, **kwargs: Any):
            before = bool(ledger.list_for_instance(instance_id))
            records = original_create(instance_id, workflow_name, steps, actor=actor, **kwargs)
            if not before:
                self._emit(
                    at=clock.utcnow(),
                    instance_id=instance_id,
                    step_id="*",
                    actor=actor,
                    action="created",
                    from_status=None,
                    to_status="Pending",
                    attempt=0,
                    reason=f"workflow {workflow_name}: {', '.join(r.step_id for r in records)}",
                )
            return records

        for name, fn in (
            ("transition", transition),
            ("update", update),
            ("extend_deadline", extend_deadline),
            ("note", note),
            ("create_steps", create_steps),
        ):
            setattr(ledger, name, fn)

    def _emit_write(
        self, action: str, before: StepRecord, after: StepRecord, actor: str, reason: str, changes: Mapping
    ) -> None:
        self._emit(
            at=after.updated_at,
            instance_id=after.instance_id,
            step_id=after.step_id,
            actor=actor,
            action=action,
            from_status=before.status.value,
            to_status=after.status.value,
            attempt=after.attempt,
            reason=reason,
            changes=tuple(sorted(changes)),
            record=after,
        )

    def _observe_agents(self) -> None:
        """Count every handler call per (instance, step, kind, attempt) and every remote effect made."""
        from activities.handlers import AGENT_HANDLERS, RemoteEffects

        current = threading.local()
        originals = dict(AGENT_HANDLERS)

        def counting(name: str, handler: Callable) -> Callable:
            @functools.wraps(handler)
            def wrapper(ctx: Any) -> Any:
                key = (ctx.instance_id, ctx.step_id, ctx.kind, ctx.attempt)
                with self._lock:
                    self._calls[key] += 1
                current.step = key
                try:
                    self._maybe_kill(ctx, after_effect=False)
                    result = handler(ctx)
                    self._maybe_kill(ctx, after_effect=True)
                    return result
                finally:
                    current.step = None

            return wrapper

        for name, handler in originals.items():
            AGENT_HANDLERS[name] = counting(name, handler)

        original_apply, original_undo = RemoteEffects.apply, RemoteEffects.undo

        def apply(effects: Any, service: str, key: str, result: dict[str, Any]) -> dict[str, Any]:
            out = original_apply(effects, service, key, result)
            step = getattr(current, "step", None)
            if step is not None:
                with self._lock:
                    self._effect_keys[step[:2]].add((service, key))
                    if out is result:  # apply returns its argument only when it created the effect
                        self._effects[(step[0], step[1], "work")] += 1
            return out

        def undo(effects: Any, service: str, key: str) -> dict[str, Any]:
            out = original_undo(effects, service, key)
            step = getattr(current, "step", None)
            if step is not None and out.get("undone"):
                with self._lock:
                    self._effects[(step[0], step[1], "compensate")] += 1
            return out

        RemoteEffects.apply, RemoteEffects.undo = apply, undo

        def restore() -> None:
            AGENT_HANDLERS.clear()
            AGENT_HANDLERS.update(originals)
            RemoteEffects.apply, RemoteEffects.undo = original_apply, original_undo

        self._restore.append(restore)

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

        if self.agents_paused:
            return 0
        done = 0
        for message in self.transport.receive_dead_letters(
            self.settings.work_queue, max_messages=16, lock_seconds=30
        ):
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
        received = self.transport.receive(
            queue, max_messages=16, lock_seconds=self.lock_seconds, wait_seconds=wait
        )
        for message in released:
            self._settle(message, handle)
        for message in received:
            if not self._hold_if_matching(kind, message):
                self._settle(message, handle)
        return len(released) + len(received)

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

    # ---- fault hooks ------------------------------------------------------------------------------

    def kill_agent(
        self, agent: str, *, step_id: str | None = None, after_effect: bool = False, times: int = 1
    ) -> None:
        """The agent process running ``agent`` (optionally only for ``step_id``) dies, ``times`` times:
        before its handler runs, or right after the handler made its effect. The message is left
        unsettled and comes back when its lock expires (see :class:`AgentKilled`)."""
        with self._lock:
            self._kills.append([agent, step_id, after_effect, times])

    def _maybe_kill(self, ctx: Any, *, after_effect: bool) -> None:
        with self._lock:
            for rule in self._kills:
                agent, step_id, when, left = rule
                matches = agent == ctx.agent and step_id in (None, ctx.step_id) and when == after_effect
                if left > 0 and matches:
                    rule[3] -= 1
                    break
            else:
                return
        moment = "after its effect" if after_effect else "before doing anything"
        raise AgentKilled(f"{ctx.agent} process killed {moment} (step {ctx.step_id}, attempt {ctx.attempt})")

    def crash_dispatch_before_send(
        self, step_id: str, *, attempt: int = 1, redeliver_after: timedelta = timedelta(minutes=5)
    ) -> None:
        """The process running ``dispatch_step`` for this attempt dies after its ledger write, before
        its send; the Durable runtime redelivers the activity when its lease expires (``redeliver_after``;
        five minutes with the Azure Storage provider). Meanwhile the orchestration waits on the activity
        and only the watchdog can notice the step. (The durable test host redelivers lost activity
        results at once, so the delay is added here, around its activity executor.)"""
        self.fail_send(step_id, attempt=attempt, kind="work", exc=ProcessDied(f"died sending {step_id}"))
        host = self.host
        execute = host._execute_activity

        def execute_or_die(item: Any) -> None:
            payload = json.loads(item.input or "{}")
            if item.name != "dispatch_step" or (payload.get("step_id"), payload.get("attempt")) != (
                step_id,
                attempt,
            ):
                return execute(item)
            host._execute_activity = execute  # once
            try:
                host.functions.activities[item.name].invoke(payload)
            except ProcessDied:
                pass
            else:
                raise HarnessError(f"dispatch of {step_id} attempt {attempt} did not reach its send")

            def redeliver() -> None:
                host._activity_queue.append(item)
                host.remove_periodic(redeliver)

            host.add_periodic(redeliver, timedelta(days=365), first_at=host.clock.now() + redeliver_after)
            return None

        host._execute_activity = execute_or_die

    def pause_agents(self) -> None:
        """Agents stop receiving (messages wait in their queues) until :meth:`resume_agents`."""
        self.agents_paused = True

    def resume_agents(self) -> None:
        self.agents_paused = False

    def hold(
        self,
        step_id: str,
        *,
        queue: str = "work",
        attempt: int | None = None,
        kind: str = "work",
        times: int | None = 1,
    ) -> _Hold:
        """The next ``times`` messages of ``queue`` ("work" or "results") for this step are taken by an
        agent that keeps them (locked, unanswered) until :meth:`release`: a slow agent, a late reply."""
        entry = _Hold(queue, step_id, attempt, kind, times)
        with self._lock:
            self._holds.append(entry)
        return entry

    def _hold_if_matching(self, kind: str, message: ReceivedMessage) -> bool:
        body = message.body
        with self._lock:
            for entry in self._holds:
                if entry.queue != kind or (entry.times is not None and entry.matched >= entry.times):
                    continue
                if body.get("step_id") != entry.step_id or body.get("kind") != entry.kind:
                    continue
                if entry.attempt is not None and body.get("attempt") != entry.attempt:
                    continue
                entry.matched += 1
                entry.held.append(message)
                break
            else:
                return False
        self.transport.renew_lock(message, HELD_LOCK_SECONDS)
        return True

    def held(self, entry: _Hold | None = None) -> list[ReceivedMessage]:
        with self._lock:
            holds = [entry] if entry is not None else self._holds
            return [m for h in holds for m in h.held]

    def take_held(self, entry: _Hold) -> list[ReceivedMessage]:
        """Take the messages ``entry`` holds (still locked) to deliver them yourself (:meth:`deliver`)."""
        with self._lock:
            taken, entry.held[:] = list(entry.held), []
            return taken

    def deliver(self, kind: str, message: ReceivedMessage) -> None:
        """Handle and settle one received message exactly as the ``kind`` pump ("work"/"results") does."""
        handle = self._work_handler if kind == "work" else self._result_handler
        self._settle(message, handle)

    def release(self, entry: _Hold | None = None) -> int:
        """Let the holding agent(s) process what they kept, on the next pump run; returns how many."""
        with self._lock:
            holds = [entry] if entry is not None else list(self._holds)
            count = 0
            for h in holds:
                self._released.extend((h.queue, m) for m in h.held)
                count += len(h.held)
                h.held.clear()
                h.times = h.matched  # matches no more
            return count

    def fail_send(
        self,
        step_id: str | None = None,
        *,
        queue: str = "work",
        attempt: int | None = None,
        kind: str | None = None,
        exc: BaseException | None = None,
        times: int = 1,
    ) -> SendFault:
        """The next ``times`` sends to ``queue`` matching the step (and attempt, kind) raise ``exc``."""
        return self.transport.add_fault(SendFault(queue, step_id, attempt, kind, "fail", times, exc))

    def duplicate_send(
        self,
        step_id: str | None = None,
        *,
        queue: str = "work",
        attempt: int | None = None,
        kind: str | None = None,
        times: int = 1,
    ) -> SendFault:
        """The next ``times`` matching sends are sent twice (same body, same MessageId)."""
        return self.transport.add_fault(SendFault(queue, step_id, attempt, kind, "duplicate", times))

    # ---- running ----------------------------------------------------------------------------------

    def start_workflow(
        self, workflow: str, workflow_input: Mapping[str, Any], instance_id: str | None = None
    ) -> str:
        """``POST /api/workflows/{workflow}/instances`` through the real HTTP starter; the instance id."""
        params = {"instance_id": instance_id} if instance_id else {}
        request = func.HttpRequest(
            "POST",
            f"{self.host.base_url}/api/workflows/{workflow}/instances",
            headers={"Content-Type": "application/json"},
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
