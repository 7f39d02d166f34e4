"""Scenarios that count the storage requests of each operation of the pattern: driven through the
function bodies (``step_operations``, ``watchdog_tick``), whole workflows end to end
(``end_to_end``), and the purge of finished instances (``measure_purge``).

Shared by ``bench/requests_per_step.py`` (which prints them) and ``tests/perf`` (which pins them), so
the pinned table and the printed one are the same measurement (docs/capacity.md). The driven ones
need ``Services`` built *after* the counter was installed (the hook wraps clients as they are built)
and the storage-queue transport.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from supervisor.maintenance.retention import Retention
from tests.helpers.request_counter import (
    AGENT_EFFECT,
    CREATE_STEPS,
    DISPATCH,
    HARNESS,
    QUEUE_DELETE,
    QUEUE_RECEIVE,
    REPLY,
    START,
    WORKER_CLAIM,
    WORKER_RECORD,
    RequestCounter,
    StorageRequest,
    pattern_operation,
)
from workflow_core import clock
from workflow_core.ledger import InstanceHandle, InstanceStatus, NewStep, StepLedger, StepStatus, encode_json
from workflow_core.runtime import Services
from workflow_core.workflows import get_workflow, version_of

WORKFLOW = "provision-tenant"
WORKFLOW_INPUT = {"tenant_id": "bench", "admin_email": "admin@bench.example", "plan": "basic"}

# The per-operation rows, in the order the benchmark prints them.
OPERATIONS = (
    START,
    CREATE_STEPS,
    DISPATCH,
    WORKER_CLAIM,
    WORKER_RECORD,
    REPLY,
    QUEUE_RECEIVE,
    QUEUE_DELETE,
)


class _EventClient:
    """The Durable client's ``raise_event``, recorded (no storage); ``known=False``: the client's
    answer for an instance id nobody used yet."""

    def __init__(self, known: bool = True) -> None:
        self.known = known
        self.events: list[tuple[str, str]] = []
        self.data: list[Any] = []

    async def raise_event(self, instance_id: str, event_name: str, event_data: Any = None, **_: Any) -> None:
        self.events.append((instance_id, event_name))
        self.data.append(event_data)

    async def get_status(self, instance_id: str, *args: Any, **kwargs: Any) -> Any:
        if not self.known:
            return None
        from azure.durable_functions.models.DurableOrchestrationStatus import DurableOrchestrationStatus

        return DurableOrchestrationStatus(
            instanceId=instance_id, runtimeStatus="Running", createdTime="2030-01-01T11:00:00Z"
        )

    async def start_new(self, name: str, instance_id: str | None = None, client_input: Any = None) -> str:
        return instance_id or ""


def forget_effect_clients() -> None:
    """Drop the example agent's cached ``RemoteEffects`` clients, so the next one is built (and
    wrapped by an installed counter) afresh; one cached earlier would report to an older counter."""
    from activities.worker.handlers import RemoteEffects

    with RemoteEffects._cache_lock:
        cached, RemoteEffects._cache = list(RemoteEffects._cache.values()), {}
    for effects in cached:
        effects._table.close()


@dataclass
class StepCounts:
    """Requests of one driven workflow, by operation (the counter's labels)."""

    steps: int
    by_operation: Counter[str | None] = field(default_factory=Counter)
    requests: list[StorageRequest] = field(default_factory=list)

    @property
    def effect(self) -> int:
        return self.by_operation[AGENT_EFFECT]

    @property
    def total_excluding_effect(self) -> int:
        return sum(n for label, n in self.by_operation.items() if label != AGENT_EFFECT)


def step_operations(services: Services, counter: RequestCounter) -> StepCounts:
    """Drive one ``provision-tenant`` workflow through the real function bodies, one message per receive
    (so queue figures are the unbatched worst case); count the requests of each operation."""
    from activities import handle_result, process_work_message
    from activities.scheduler.functions import dispatch_step
    from orchestrators.decisions import provisional_outcome
    from orchestrators.shortcuts import expected_rows
    from orchestrators.state import WorkflowStart
    from workflow_core.contracts import StepDispatch
    from workflow_core.starter import ensure_unused, record_instance
    from workflow_core.workflows.store import definition_for

    definition = definition_for(WORKFLOW, None, None)

    settings = services.settings
    transport = services.transport
    instance = f"req{uuid.uuid4().hex[:12]}"
    client = _EventClient()
    deadline = (datetime.now(UTC) + timedelta(minutes=10)).isoformat()
    # the example agent's effect table: a client built now (so it is counted, as the agent's) and
    # the table created outside the measurement
    forget_effect_clients()
    from activities.worker.handlers import RemoteEffects

    RemoteEffects.for_services(services)

    with counter.measure() as made:
        # the HTTP starter's check that the instance id is new (Durable status + ledger), and the
        # instance record it writes before starting the orchestration, as it runs
        asyncio.run(ensure_unused(_EventClient(known=False), services, instance))
        rows = asyncio.run(
            record_instance(
                services,
                definition,
                instance,
                WORKFLOW_INPUT,
                encode_json(WORKFLOW_INPUT),
                version_of(definition),
            )
        )
        # the steps went in the record's own transaction (three fit one): the orchestration starts at
        # step 0 carrying the starter's versions, then each confirmed result's snapshot
        step_ids = [step.id for step in definition.steps]
        start = WorkflowStart.of(definition, rows=rows)
        known = rows["instance"]
        basis = None  # the previous success, taken unread as the orchestrator takes it
        for step_id in step_ids:
            dispatch_step(
                StepDispatch(
                    instance_id=instance,
                    orchestration_id=instance,
                    workflow=WORKFLOW,
                    step_id=step_id,
                    attempt=1,
                    deadline=deadline,
                    input={**WORKFLOW_INPUT, "hostname": "bench.example"},
                    expected=expected_rows(definition, start, definition.step(step_id), known),
                    basis=basis,
                    provisional=True,
                ).model_dump(),
                services,
            )
            (work,) = transport.receive(settings.work_queue, max_messages=1, lock_seconds=30)
            process_work_message(work.body, delivery_count=1, services=services, worker_id="worker:bench")
            transport.complete(work)
            (result,) = transport.receive(settings.result_queue, max_messages=1, lock_seconds=30)
            asyncio.run(handle_result(result.body, client, services))
            event = client.data[-1] or {}
            taken = provisional_outcome(event, "work", instance, step_id, 1)
            known = taken.instance if taken is not None else event.get("instance")
            basis = taken.basis if taken is not None else None
            transport.complete(result)
    statuses = {r.step_id: r.status.value for r in services.ledger.list_for_instance(instance)}
    if set(statuses.values()) != {"Succeeded"} or len(client.events) != len(step_ids):
        raise RuntimeError(f"the driven workflow did not succeed: {statuses}, events {client.events}")
    return StepCounts(steps=len(step_ids), by_operation=counter.by_label(made), requests=list(made))


@dataclass
class TickCounts:
    overdue: int
    decisions: int
    requests: list[StorageRequest]
    index_table: str = ""

    @property
    def total(self) -> int:
        return len(self.requests)

    @property
    def detection(self) -> int:
        """Requests of the detection queries (index range query pages), not of any one step. (The
        partition query that reads an instance with the steps its row watches is per instance.)"""
        return sum(1 for r in self.requests if r.op == "query" and r.resource == self.index_table)

    @property
    def index_cleanup(self) -> int:
        """Deletes of retired index rows at the end of the tick: one batch per index partition the
        tick's old rows lie in (a single delete where a partition holds one), not one per step."""
        return sum(1 for r in self.requests if r.op in ("delete", "batch") and r.resource == self.index_table)

    @property
    def per_overdue_step(self) -> float:
        """Everything but the detection query and the end-of-tick index cleanup, per overdue step."""
        return (self.total - self.detection - self.index_cleanup) / self.overdue


NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def make_overdue(services: Services, count: int, *, now: datetime = NOW, watched: bool = False) -> list[str]:
    """``count`` Running steps, one instance each, claimed by a worker, deadline 5 min before ``now``.

    ``watched``: each has a supervised instance record whose scheduler still keeps its promise, and
    the dispatch carried it, so the instance's index row watches the step (no row of its own); else
    the steps are written without an instance and have their own index rows."""
    ledger = services.ledger
    instances = []
    for n in range(count):
        instance = f"late{uuid.uuid4().hex[:10]}{n:04d}"
        handle = None
        if watched:
            with clock.use_clock(lambda: now - timedelta(minutes=30)):
                handle = InstanceHandle(
                    ledger.create_instance(
                        instance,
                        WORKFLOW,
                        actor="bench",
                        input_json=encode_json(WORKFLOW_INPUT),
                        scheduler_deadline=now + timedelta(minutes=10),
                        version=version_of(get_workflow(WORKFLOW)),
                    )
                )
        (record,) = ledger.create_steps(
            instance,
            WORKFLOW,
            [NewStep(step_id="create_storage", step_name="create_storage", agent="storage.create")],
            actor="bench",
        )
        deadline = now - timedelta(minutes=5, seconds=n % 60)
        promise = (
            {"instance": handle, "instance_changes": {"scheduler_deadline": now + timedelta(minutes=10)}}
            if watched
            else {}
        )
        record = ledger.transition(
            record,
            StepStatus.DISPATCHED,
            actor="bench",
            owner="agent:storage.create",
            attempt=1,
            deadline=deadline,
            **promise,
        )
        ledger.transition(record, StepStatus.RUNNING, actor="worker:bench", owner="worker:bench")
        instances.append(instance)
    return instances


def watchdog_tick(
    services: Services,
    counter: RequestCounter,
    overdue: int = 10,
    *,
    now: datetime = NOW,
    watched: bool = False,
) -> TickCounts:
    """One ``run_tick`` over ``overdue`` Running steps of live orchestrations, past their deadline and
    the grace (it marks each TimedOut and raises its failed-result event); its requests.
    ``watched``: steps watched through their instance's index row (see :func:`make_overdue`)."""
    from supervisor.watchdog import run_tick

    make_overdue(services, overdue, now=now, watched=watched)
    client = _EventClient()
    with counter.measure() as made:
        report = asyncio.run(run_tick(client, services, now=now, batch_size=max(overdue, 1)))
    if report.overdue != overdue or report.errors:
        raise RuntimeError(
            f"tick found {report.overdue} overdue with {report.errors} errors: {report.summary()}"
        )
    return TickCounts(
        overdue=overdue,
        decisions=len(report.decisions),
        requests=list(made),
        index_table=services.settings.deadline_index_table,
    )


@dataclass
class EndToEndCounts:
    """What ``workflows`` whole runs cost: ``counted`` are the product's requests."""

    workflows: int
    steps: int
    index_table: str  # the deadline index's table (its requests are named by it)
    counted: list[StorageRequest] = field(default_factory=list)
    idle: list[StorageRequest] = field(default_factory=list)
    effect: list[StorageRequest] = field(default_factory=list)
    observed: list[StorageRequest] = field(default_factory=list)

    @property
    def by_operation(self) -> Counter[str | None]:
        return Counter(r.label for r in self.counted)


def end_to_end(azurite: Any, workflows: int, workflow_input: dict[str, Any] | None = None) -> EndToEndCounts:
    """Start ``workflows`` three-step workflows together through the real starter, orchestrators,
    worker and result handler on the durable test host, run them to completion, count what they cost
    (``workflow_input``: another input than ``WORKFLOW_INPUT``, e.g. one with a large field).

    Left out of the per-step figure, and counted apart: receives that came back empty (how often an
    idle queue is polled is the host's choice, not a step's cost), the example agent's own effect,
    and the harness reading its ledger to observe it."""
    base = WORKFLOW_INPUT if workflow_input is None else workflow_input
    forget_effect_clients()
    from devtools.harness import PatternHarness

    with (
        RequestCounter(classify=pattern_operation) as counter,
        PatternHarness(azurite, watchdog_every=None, settings={"WATCHDOG_GRACE_SECONDS": "30"}) as h,
    ):
        counter.reset()  # the harness's setup (tables, queues) is not a step's cost
        iids = [h.start_workflow(WORKFLOW, {**base, "tenant_id": f"t{n}"}) for n in range(workflows)]
        for iid in iids:
            status = h.run_until_complete(iid, timeout=timedelta(hours=1))
            if not isinstance(status.output, dict) or status.output.get("status") != "succeeded":
                raise RuntimeError(f"{iid} did not succeed: {status.runtime_status} {status.output}")
        made = counter.snapshot()
        steps = sum(len(h.steps(iid)) for iid in iids)
        index_table = h.settings.deadline_index_table
    idle = [r for r in made if r.op == "receive" and r.empty]
    effect = [r for r in made if r.label == AGENT_EFFECT]
    observed = [r for r in made if r.label == HARNESS]
    excluded = {id(r) for r in (*idle, *effect, *observed)}
    counted = [r for r in made if id(r) not in excluded]
    return EndToEndCounts(workflows, steps, index_table, counted, idle, effect, observed)


T0 = datetime(2030, 1, 1, tzinfo=UTC)
STEPS = ("create_storage", "register_dns", "send_welcome")


def finished_instance(ledger: StepLedger, instance_id: str) -> None:
    """Three steps walked Pending -> Dispatched -> Running -> Succeeded, then the instance Succeeded:
    the rows a real run leaves (records, audit rows, listing row)."""
    with clock.use_clock(lambda: T0):
        ledger.create_instance_with_steps(
            instance_id,
            "provision-tenant",
            actor="api:start",
            input_json="{}",
            scheduler_deadline=T0 + timedelta(hours=1),
            version="provision-tenant@bench",
            steps=[NewStep(step_id=s, step_name=s, agent="bench.agent") for s in STEPS],
        )
        for step_id in STEPS:
            step = ledger.get(instance_id, step_id)
            step = ledger.transition(
                step, StepStatus.DISPATCHED, actor="scheduler", deadline=T0 + timedelta(minutes=5)
            )
            step = ledger.transition(
                step, StepStatus.RUNNING, actor="worker", deadline=T0 + timedelta(minutes=5)
            )
            ledger.transition(step, StepStatus.SUCCEEDED, actor="worker")
        record = ledger.get_instance(instance_id)
        ledger.transition_instance(record, InstanceStatus.SUCCEEDED, actor="scheduler")


def measure_purge(
    counter: RequestCounter, ledger: StepLedger, count: int, *, archive: Any = None
) -> tuple[Counter[str], int]:
    """Purge ``count`` finished instances in one tick; the requests by (service, operation), and
    how many were purged."""

    async def no_history(_: str) -> None:  # the Durable purge is one call per orchestration, not Storage
        return None

    retention = Retention(ledger, batch_size=count, purge_history=no_history, archive=archive)
    with counter.measure() as made:
        report = asyncio.run(retention.run(T0 + timedelta(days=31)))
    return Counter(f"{r.service} {r.op}" for r in made), len(report.purged)
