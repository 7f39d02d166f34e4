"""A reply that finds its instance's scheduler gone makes the instance due now
(``workflow_core.ledger.scheduler_gone``), on Azurite, with the SDK's real ``DurableOrchestrationClient``
talking to a local stand-in of the extension's HTTP API (``tests.api.durable_http_stub``): a raise on
a finished orchestration is answered 410, on an unknown one 404, as the extension answers them.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from datetime import timedelta
from typing import Any

import pytest
from azure.durable_functions import DurableOrchestrationClient
from azure.durable_functions.models.utils import http_utils

from activities.replies.dead_letters import handle_dead_letter
from activities.replies.results import handle_result
from activities.worker.handlers import faults
from supervisor import run_tick
from tests.api.durable_http_stub import DurableHttpStub
from tests.helpers.request_counter import RequestCounter
from workflow_core import clock
from workflow_core.contracts import WORKFLOW_ORCHESTRATOR
from workflow_core.ledger.index_keys import index_row_time
from workflow_core.ledger.scheduler_gone import REASON_PREFIX
from workflow_core.runtime import Services
from workflow_core.settings import load_settings

STEP = "create_storage"
BURST = 8  # replies per process in the two-process test


@pytest.fixture
def stub():
    with DurableHttpStub() as running:
        yield running


@pytest.fixture
def run():
    """Coroutines on one event loop of this test's own: the durable client's process-wide aiohttp
    session is bound to the loop that made it (as in ``tests/api/conftest.py``)."""
    http_utils._client_session = None
    loop = asyncio.new_event_loop()
    yield loop.run_until_complete
    loop.run_until_complete(http_utils._close_session())
    loop.close()


def client_of(stub: DurableHttpStub) -> DurableOrchestrationClient:
    return DurableOrchestrationClient(stub.binding_json())


@pytest.fixture
def handle(run, stub):
    def handled(body: dict, services: Services) -> str:
        return run(handle_result(body, client_of(stub), services))

    return handled


def brought_forward(harness, instance_id: str) -> list[Any]:
    """The instance record's audit rows that say a reply made it due."""
    return [a for a in harness.audit(instance_id, "*") if a.reason.startswith(REASON_PREFIX)]


def replied(harness, stub: DurableHttpStub, runtime_status: str | None) -> tuple[str, dict]:
    """An instance as the starter writes it, its first step dispatched and answered by the in-app
    worker; its orchestration ``runtime_status`` in the stub (None: the stub does not know it)."""
    instance_id, _ = harness.start_as_the_starter()
    [reply] = harness.run_step(instance_id, STEP)
    if runtime_status is not None:
        stub.add_instance(instance_id, runtime_status=runtime_status)
    return instance_id, reply.body


@pytest.mark.parametrize("runtime_status", ["Terminated", "Failed", "Completed", None])
def test_a_reply_that_finds_its_scheduler_gone_makes_the_instance_due_now(
    harness, stub, handle, runtime_status
):
    instance_id, body = replied(harness, stub, runtime_status)
    before = harness.ledger.get_instance(instance_id)
    assert before.scheduler_deadline > clock.utcnow() + timedelta(seconds=60)  # its promise: far ahead

    assert handle(body, harness.services) == "late-result-ignored"  # recorded as before

    now = clock.utcnow()
    record = harness.ledger.get_instance(instance_id)
    assert record.status.value == "Running" and record.owner == "scheduler"
    assert record.scheduler_deadline <= now and index_row_time(record.index_key) <= now
    [row] = brought_forward(harness, instance_id)
    assert row.actor == "result-handler"
    assert f"orchestration {instance_id} is not running" in row.reason
    assert "could not be raised" in row.reason
    assert [a.action for a in harness.audit(instance_id, STEP)].count("late-result-ignored") == 1
    assert harness.ledger.get(instance_id, STEP).status.value == "Succeeded"  # the reply stands
    # the watchdog finds it at its next look, as any overdue instance
    assert [i.instance_id for i in harness.ledger.overdue_instances(now)] == [instance_id]


def test_a_live_orchestration_is_never_brought_forward(harness, stub, handle):
    instance_id, body = replied(harness, stub, "Running")
    before = harness.ledger.get_instance(instance_id)
    assert handle(body, harness.services) == "raised"
    assert harness.ledger.get_instance(instance_id).etag == before.etag
    # the event was raised; no status was read to decide
    assert len(stub.requests_to("POST", "/raiseEvent/")) == 1
    assert stub.requests_to("GET", "/instances/") == []


@pytest.mark.parametrize("owner", ["supervisor:tick-1", "operator:ops@contoso.example"])
def test_an_instance_held_by_a_tick_or_an_operator_is_left_to_it(harness, stub, handle, owner):
    instance_id, body = replied(harness, stub, "Terminated")
    held = harness.ledger.update_instance(harness.ledger.get_instance(instance_id), actor="test", owner=owner)
    assert handle(body, harness.services) == "late-result-ignored"
    assert harness.ledger.get_instance(instance_id).etag == held.etag
    assert brought_forward(harness, instance_id) == []


def test_a_burst_of_replies_writes_the_record_once(harness, stub, handle):
    """The first makes it due; the others find it due (no write); no status read at all. Pinned."""
    instance_id, body = replied(harness, stub, "Terminated")
    with RequestCounter() as counter:
        counted = Services(harness.services.settings)
        counted.ledger, counted.transport  # noqa: B018 - tables and queues made (not measured)
        with counter.measure() as first_reply:
            assert handle(body, counted) == "late-result-ignored"
        first = harness.ledger.get_instance(instance_id)
        with counter.measure() as again:
            for _ in range(4):
                assert handle(body, counted) == "late-result-ignored"
    assert harness.ledger.get_instance(instance_id).etag == first.etag
    assert len(brought_forward(harness, instance_id)) == 1
    # the step and instance read, the late-result note; then the record made due: its new index row,
    # the record + audit transaction, the old index row's delete
    late = [("table", "query"), ("table", "insert")]
    assert [(r.service, r.op) for r in first_reply] == [
        *late,
        ("table", "insert"),
        ("table", "batch"),
        ("table", "delete"),
    ]
    assert [(r.service, r.op) for r in again] == late * 4  # each later copy: as before this change
    assert stub.requests_to("GET", "/instances/") == []


# ---- heartbeats -------------------------------------------------------------------------------------


def message_only_work(harness) -> tuple[str, dict]:
    instance_id, _ = harness.start_as_the_starter()
    harness.dispatch(instance_id, STEP)
    [work] = harness.work()
    return instance_id, work.body


def heartbeat(work: dict, **changes: Any) -> dict:
    keys = ("kind", "instance_id", "orchestration_id", "step_id", "attempt", "reply_token")
    return {"type": "heartbeat", **{k: work[k] for k in keys}, "seconds": 600, **changes}


@pytest.mark.parametrize("answered", [False, True])
def test_a_heartbeat_that_finds_its_scheduler_gone_makes_the_instance_due_now(
    harness, stub, handle, answered
):
    instance_id, work = message_only_work(harness)
    stub.add_instance(instance_id, runtime_status="Terminated")
    extra = {}
    if answered:
        extra["answer_queue"] = queue = f"{harness.services.settings.result_queue}-answers-x{os.getpid()}"
        harness.transport.ensure_queues(queue)
    assert handle(heartbeat(work, **extra), harness.services) == "heartbeat"
    record = harness.ledger.get_instance(instance_id)
    assert record.scheduler_deadline <= clock.utcnow()
    [row] = brought_forward(harness, instance_id)
    assert f"a heartbeat of {STEP} attempt 1 found it Terminated" in row.reason
    assert harness.ledger.get(instance_id, STEP).status.value == "Running"  # the beat itself stands
    if answered:
        [answer] = harness.drain(queue)
        assert answer.body["current"] is True
    # a later beat finds the instance due already: no status read, no write
    reads = len(stub.requests_to("GET", "/instances/"))
    assert handle(heartbeat(work), harness.services) == "heartbeat"
    assert len(stub.requests_to("GET", "/instances/")) == reads == 1
    assert harness.ledger.get_instance(instance_id).etag == record.etag


def test_a_heartbeat_of_a_live_scheduler_changes_nothing_on_the_instance(harness, stub, handle):
    instance_id, work = message_only_work(harness)
    stub.add_instance(instance_id, runtime_status="Running")
    before = harness.ledger.get_instance(instance_id)
    assert handle(heartbeat(work), harness.services) == "heartbeat"
    assert harness.ledger.get_instance(instance_id).etag == before.etag
    assert len(stub.requests_to("GET", "/instances/")) == 1


# ---- dead letters ----------------------------------------------------------------------------------


@pytest.mark.parametrize("runtime_status", ["Terminated", None])
def test_a_dead_letter_that_finds_its_scheduler_gone_makes_the_instance_due_now(
    harness, stub, run, runtime_status
):
    instance_id, work = message_only_work(harness)
    if runtime_status is not None:
        stub.add_instance(instance_id, runtime_status=runtime_status)
    before = harness.ledger.get_instance(instance_id)
    assert before.scheduler_deadline > clock.utcnow() + timedelta(seconds=60)
    outcome = run(
        handle_dead_letter(
            work, reason="MaxDeliveryCountExceeded", client=client_of(stub), services=harness.services
        )
    )
    assert outcome == "late-result-ignored"
    now = clock.utcnow()
    record = harness.ledger.get_instance(instance_id)
    assert record.status.value == "Running" and record.scheduler_deadline <= now
    [row] = brought_forward(harness, instance_id)
    assert row.actor == "dead-letter-handler"
    assert "dead-lettered work attempt 1: its failed could not be raised" in row.reason
    assert harness.ledger.get(instance_id, STEP).status.value == "Failed"  # the attempt still failed
    assert [i.instance_id for i in harness.ledger.overdue_instances(now)] == [instance_id]
    # the same dead letter again finds the instance due: no second write
    again = run(handle_dead_letter(work, reason="x", client=client_of(stub), services=harness.services))
    assert again == "late-result-ignored"
    assert harness.ledger.get_instance(instance_id).etag == record.etag


def test_a_dead_letter_of_a_live_scheduler_changes_nothing_on_the_instance(harness, stub, run):
    instance_id, work = message_only_work(harness)
    stub.add_instance(instance_id, runtime_status="Running")
    before = harness.ledger.get_instance(instance_id)
    outcome = run(handle_dead_letter(work, reason="x", client=client_of(stub), services=harness.services))
    assert outcome == "failed-event-raised"
    assert harness.ledger.get_instance(instance_id).etag == before.etag
    assert brought_forward(harness, instance_id) == []
    assert stub.requests_to("GET", "/instances/") == []


# ---- the watchdog's own step decision ---------------------------------------------------------------


class DiesAfterItsStatusIsRead(DurableOrchestrationClient):
    """The real client; the orchestration dies right after the tick read its status (the race)."""

    def __init__(self, stub: DurableHttpStub) -> None:
        super().__init__(stub.binding_json())
        self.stub = stub

    async def get_status(self, instance_id: str, *args: Any, **kwargs: Any) -> Any:
        status = await super().get_status(instance_id, *args, **kwargs)
        self.stub.set_status(instance_id, "Terminated")
        return status


def test_a_step_tick_whose_raise_finds_the_scheduler_gone_makes_the_instance_due(harness, stub, run, vclock):
    instance_id, _ = harness.start_as_the_starter()
    faults.inject("storage.create", faults.Stall())  # the agent claims it and never replies
    harness.run_step(instance_id, STEP, deadline_in=60)
    stub.add_instance(instance_id, runtime_status="Running")
    vclock.advance(60 + 31)  # past the deadline and the grace; the instance's promise is later
    harness.ledger.update_instance(
        harness.ledger.get_instance(instance_id),
        actor="scheduler",
        scheduler_deadline=vclock.now + timedelta(minutes=10),
    )

    report = run(run_tick(DiesAfterItsStatusIsRead(stub), harness.services))

    assert report.errors == 0
    [decision] = report.decisions
    assert decision.action == "fail_step" and "the orchestration is gone" in decision.detail
    assert harness.ledger.get(instance_id, STEP).status.value == "TimedOut"
    assert harness.ledger.get_instance(instance_id).scheduler_deadline <= vclock.now
    [row] = brought_forward(harness, instance_id)
    assert row.actor.startswith("supervisor:")
    # the next tick resumes it, by its policy, as any overdue instance
    vclock.advance(1)
    nxt = run(run_tick(client_of(stub), harness.services))
    assert [a for _, _, a, _ in nxt.instance_decisions] == ["resume_instance"]


# ---- two result-handler processes, one dead instance ------------------------------------------------


def _result_handler_process(env: dict[str, str], binding: str, body: dict, barrier: Any, out: Any) -> None:
    """One result-handler process: ``BURST`` copies of the reply, handled at once (interleaved at
    every request to the extension)."""
    os.environ.update(env)
    services = Services(load_settings(env))
    try:
        services.ledger  # noqa: B018 - built before the barrier
        barrier.wait()

        client = DurableOrchestrationClient(binding)

        async def burst() -> list[str]:
            return list(await asyncio.gather(*(handle_result(body, client, services) for _ in range(BURST))))

        out.put({"pid": os.getpid(), "outcomes": asyncio.run(burst())})
    except BaseException as exc:  # reported to the test, not lost in the child's stderr
        out.put({"pid": os.getpid(), "crash": repr(exc)})
    finally:
        services.close()


def test_two_result_handler_processes_and_a_burst_write_the_record_once_and_resume_once(harness, stub, run):
    instance_id, body = replied(harness, stub, "Terminated")
    env = dict(os.environ)
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(2, timeout=60), ctx.Queue()
    processes = [
        ctx.Process(target=_result_handler_process, args=(env, stub.binding_json(), body, barrier, out))
        for _ in range(2)
    ]
    for p in processes:
        p.start()
    reports = [out.get(timeout=120) for _ in processes]
    for p in processes:
        p.join(30)
    assert [r.get("crash") for r in reports] == [None, None]
    assert len({r["pid"] for r in reports} | {os.getpid()}) == 3
    assert [r["outcomes"] for r in reports] == [["late-result-ignored"] * BURST] * 2

    assert len(brought_forward(harness, instance_id)) == 1  # one write of the record
    assert stub.requests_to("GET", "/instances/") == []  # the raises said "gone": no status read
    ticks = [run(run_tick(client_of(stub), harness.services)) for _ in range(2)]
    starts = stub.requests_to("POST", f"/orchestrators/{WORKFLOW_ORCHESTRATOR}/{instance_id}")
    assert len(starts) == 1  # one resume
    assert [a for t in ticks for _, _, a, _ in t.instance_decisions] == ["resume_instance"]
    record = harness.ledger.get_instance(instance_id)
    assert (record.status.value, record.resume_count) == ("Running", 1)
