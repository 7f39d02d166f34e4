"""The agent worker against a real ledger, real queues and the real RemoteEffects table."""

from __future__ import annotations

import base64
import json
import threading
import time
from datetime import timedelta

from azure.functions.queue import QueueMessage as HostQueueMessage  # what the queue trigger passes
from azure.functions.servicebus import (
    ServiceBusMessage as HostServiceBusMessage,
)  # what the SB trigger passes

from activities.scheduler import functions as scheduling
from activities.worker.agent_worker import (
    process_work_message,
    run_queue_message,
    run_servicebus_message,
)
from activities.worker.handlers import RemoteEffects, agent, faults
from activities.worker.handlers.base import NoReply
from tests.helpers.app import GRACE_SECONDS
from workflow_core.contracts import ResultMessage
from workflow_core.ledger import NewStep, StepStatus, decode_json
from workflow_core.transport import Settlement, message_id_for, pump

S = StepStatus


def _effects(harness, service, instance, step):
    row = RemoteEffects.for_services(harness.services).get(service, f"{instance}:{step}")
    return row


def _actions(harness, instance, step):
    return [(a.action, a.to_status) for a in harness.audit(instance, step) if a.action != "created"]


def test_happy_path_claims_runs_records_and_replies(harness):
    instance = harness.start()
    harness.dispatch(instance, "create_storage", input={"tenant_id": "Contoso", "region": "northeurope"})
    [work] = harness.work()

    harness.deliver(work, worker_id="worker-1")

    row = harness.ledger.get(instance, "create_storage")
    assert row.status is S.SUCCEEDED
    assert row.owner == "worker-1"
    output = decode_json(row.result_ref)
    assert output["tenant_id"] == "contoso" and output["region"] == "northeurope"
    trail = [
        (a.from_status, a.to_status, a.actor)
        for a in harness.audit(instance, "create_storage")
        if a.action == "transition"
    ]
    assert trail == [
        ("Pending", "Dispatched", "scheduler"),
        ("Dispatched", "Running", "worker-1"),
        ("Running", "Succeeded", "worker-1"),
    ]
    [reply] = harness.results()
    assert reply.message_id == message_id_for(instance, "create_storage", 1, kind="result")
    assert reply.correlation_id == work.message_id
    assert ResultMessage.model_validate(reply.body) == ResultMessage(
        kind="work",
        instance_id=instance,
        orchestration_id=instance,
        step_id="create_storage",
        attempt=1,
        outcome="succeeded",
        output=output,
    )
    effect = _effects(harness, "storage", instance, "create_storage")
    assert effect["State"] == "applied" and json.loads(effect["Result"]) == output


def test_duplicate_delivery_after_success_resends_the_recorded_result_without_rerunning(harness):
    instance = harness.start()
    harness.dispatch(instance, "create_storage")
    [work] = harness.work()
    harness.deliver(work)
    harness.deliver(work)  # a second copy (e.g. a storage-queue duplicate send) arrives later

    replies = harness.results()
    assert len(replies) == 2
    assert replies[0].body == replies[1].body and replies[0].message_id == replies[1].message_id
    assert _effects(harness, "storage", instance, "create_storage")["State"] == "applied"
    actions = _actions(harness, instance, "create_storage")
    assert actions.count(("transition", "Succeeded")) == 1
    assert [a for a, _ in actions].count("result-resent") == 1


def test_concurrent_duplicate_runs_the_effect_once_and_replies_once(harness):
    instance = harness.start()
    harness.dispatch(instance, "create_storage")
    [work] = harness.work()
    faults.inject("storage.create", faults.Stall(seconds=1.5, times=1))  # worker A is slow

    a = threading.Thread(target=harness.deliver, args=(work,), kwargs={"worker_id": "worker-A"})
    a.start()
    deadline = time.monotonic() + 10
    while harness.ledger.get(instance, "create_storage").status is not S.RUNNING:
        assert time.monotonic() < deadline
        time.sleep(0.05)

    # A first-delivery copy while A runs: a duplicate, ignored.
    harness.deliver(work, worker_id="worker-B", delivery_count=1)
    # A redelivery (as after a crash of A): B takes over and finishes.
    harness.deliver(work, worker_id="worker-B", delivery_count=2)
    a.join(timeout=10)

    row = harness.ledger.get(instance, "create_storage")
    assert (row.status, row.owner) == (S.SUCCEEDED, "worker-B")
    actions = [a.action for a in harness.audit(instance, "create_storage")]
    assert "duplicate-delivery-ignored" in actions
    assert "abandoned-not-owner" in actions  # A's heartbeat told it the step is no longer its own
    assert _actions(harness, instance, "create_storage").count(("transition", "Succeeded")) == 1
    assert len(harness.results()) == 1
    assert _effects(harness, "storage", instance, "create_storage")["State"] == "applied"


def test_crash_after_effect_is_redelivered_and_does_not_double_the_effect(harness):
    faults.inject("payments.charge", faults.CrashAfterEffect())
    instance = harness.start("order-fulfilment")
    harness.dispatch(
        instance, "charge_payment", input={"order_id": "o-9", "amount": 42}, workflow="order-fulfilment"
    )
    settings = harness.services.settings

    def handler(message):
        process_work_message(
            message.body, delivery_count=message.delivery_count, services=harness.services, worker_id="w"
        )

    first = pump(harness.transport, settings.work_queue, handler, max_delivery_count=3, lock_seconds=5)
    assert [d.settlement for d in first] == [Settlement.ABANDONED]
    assert harness.ledger.get(instance, "charge_payment").status is S.RUNNING
    stored = json.loads(_effects(harness, "payments", instance, "charge_payment")["Result"])

    second = pump(harness.transport, settings.work_queue, handler, max_delivery_count=3, wait_seconds=5)
    assert [(d.settlement, d.message.delivery_count) for d in second] == [(Settlement.COMPLETED, 2)]
    row = harness.ledger.get(instance, "charge_payment")
    assert row.status is S.SUCCEEDED
    assert decode_json(row.result_ref) == stored  # the remote service returned the first charge
    [reply] = harness.results()
    assert reply.body["output"] == stored
    assert any(a.reason.startswith("took over") for a in harness.audit(instance, "charge_payment"))


def test_stale_attempt_is_ignored_and_audited(harness, vclock):
    instance = harness.start()
    harness.dispatch(instance, "register_dns", 1, deadline_in=5)
    [old] = harness.work()
    vclock.advance(6)
    scheduling.check_step(
        {"instance_id": instance, "step_id": "register_dns", "attempt": 1}, harness.services
    )
    scheduling.schedule_retry(
        {
            "instance_id": instance,
            "step_id": "register_dns",
            "attempt": 1,
            "retry_at": vclock.now.isoformat(),
        },
        harness.services,
    )
    harness.dispatch(instance, "register_dns", 2)

    harness.deliver(old)

    row = harness.ledger.get(instance, "register_dns")
    assert (row.status, row.attempt) == (S.DISPATCHED, 2)
    assert harness.results() == []
    assert _effects(harness, "dns", instance, "register_dns") is None  # the handler never ran
    [note] = [a for a in harness.audit(instance, "register_dns") if a.action == "stale-attempt-ignored"]
    assert note.attempt == 1 and "ledger is at attempt 2" in note.reason


def test_handler_failure_records_failed_and_replies_failed(harness, vclock):
    instance = harness.start()
    faults.inject("dns.register", faults.Fail(times=1, message="provider said 503"))
    harness.dispatch(instance, "register_dns")
    [work] = harness.work()
    harness.deliver(work)

    row = harness.ledger.get(instance, "register_dns")
    assert row.status is S.FAILED
    assert "provider said 503" in row.last_error
    assert row.deadline == vclock.now + timedelta(seconds=GRACE_SECONDS)
    [reply] = harness.results()
    assert (reply.body["outcome"], reply.body["output"]) == ("failed", None)
    assert "provider said 503" in reply.body["error"]
    assert _effects(harness, "dns", instance, "register_dns") is None  # failed before any effect
    # A redelivery of the same message re-sends the failure; it does not run the handler again.
    harness.deliver(work, delivery_count=2)
    [again] = harness.results()
    assert again.body == reply.body
    assert harness.ledger.get(instance, "register_dns").status is S.FAILED


def test_agent_without_handler_fails_the_step(harness):
    harness.ledger.create_steps(
        "inst-nohandler", "custom", [NewStep(step_id="s1", step_name="s1", agent="nobody.home")], actor="test"
    )
    scheduling.dispatch_step(
        harness.dispatch_payload("inst-nohandler", "s1", workflow="custom"), harness.services
    )
    [work] = harness.work()
    harness.deliver(work)
    row = harness.ledger.get("inst-nohandler", "s1")
    assert row.status is S.FAILED and "no handler is registered for agent 'nobody.home'" in row.last_error


def test_heartbeat_extends_the_deadline_so_the_step_is_not_overdue(harness, vclock):
    beats = []

    @agent("tests.slow")
    def slow(ctx):
        beats.append(ctx.heartbeat())  # default: the step's heartbeat_timeout_seconds (60)
        raise NoReply("keeps working (the test stops here)")

    harness.ledger.create_steps(
        "inst-heartbeat",
        "custom",
        [NewStep(step_id="slow", step_name="slow", agent="tests.slow", heartbeat_timeout_seconds=60)],
        actor="test",
    )
    scheduling.dispatch_step(
        harness.dispatch_payload("inst-heartbeat", "slow", deadline_in=10, workflow="custom"),
        harness.services,
    )
    [work] = harness.work()
    vclock.advance(5)
    harness.deliver(work)

    row = harness.ledger.get("inst-heartbeat", "slow")
    assert row.status is S.RUNNING
    assert row.deadline == vclock.now + timedelta(seconds=60) == beats[0]
    assert row.last_heartbeat == vclock.now
    later = vclock.now + timedelta(seconds=30)  # past the original deadline, before the extended one
    assert "inst-heartbeat" not in [r.instance_id for r in harness.ledger.overdue(later)]
    vclock.advance(30)
    check = scheduling.check_step(
        {"instance_id": "inst-heartbeat", "step_id": "slow", "attempt": 1}, harness.services
    )
    assert check == {
        "state": "extended",
        "deadline": row.deadline.isoformat(),
        "output": None,
        "error": None,
        "permanent": False,
    }
    vclock.advance(31)
    assert [r.step_id for r in harness.ledger.overdue(vclock.now) if r.instance_id == "inst-heartbeat"] == [
        "slow"
    ]


def test_compensate_message_undoes_the_effect_and_records_compensated(harness, vclock):
    instance = harness.start()
    harness.run_step(instance, "create_storage")
    completed_at = harness.ledger.get(instance, "create_storage").completed_at
    vclock.advance(5)
    scheduling.dispatch_compensation(
        harness.dispatch_payload(instance, "create_storage", 1, kind="compensate"), harness.services
    )
    [work] = harness.work()
    harness.deliver(work, worker_id="worker-c")

    row = harness.ledger.get(instance, "create_storage")
    assert (row.status, row.compensation_status, row.completed_at) == (
        S.COMPENSATED,
        "Compensated",
        completed_at,
    )
    assert _effects(harness, "storage", instance, "create_storage")["State"] == "undone"
    [reply] = harness.results()
    assert reply.message_id == message_id_for(instance, "create_storage", 1, kind="compensation-result")
    assert (reply.body["kind"], reply.body["outcome"]) == ("compensate", "succeeded")
    assert reply.body["output"] == {"service": "storage", "undone": True}
    check = {"instance_id": instance, "step_id": "create_storage", "attempt": 1}
    assert scheduling.check_compensation(check, harness.services)["state"] == "succeeded"
    harness.deliver(work, delivery_count=2)  # late redelivery: reply re-sent, nothing re-run
    assert [r.body["outcome"] for r in harness.results()] == ["succeeded"]


def test_compensator_failure_keeps_compensating_with_last_error_then_retry_succeeds(harness):
    instance = harness.start()
    harness.run_step(instance, "register_dns")
    faults.inject("dns.unregister", faults.Fail(times=1))
    scheduling.dispatch_compensation(
        harness.dispatch_payload(instance, "register_dns", 1, kind="compensate"), harness.services
    )
    [work] = harness.work()
    harness.deliver(work)
    row = harness.ledger.get(instance, "register_dns")
    assert (row.status, row.compensation_status) == (S.COMPENSATING, "Failed")
    assert "injected failure" in row.last_error
    assert [r.body["outcome"] for r in harness.results()] == ["failed"]
    assert (
        scheduling.check_compensation(
            {"instance_id": instance, "step_id": "register_dns", "attempt": 1}, harness.services
        )["state"]
        == "failed"
    )

    second = scheduling.dispatch_compensation(
        harness.dispatch_payload(instance, "register_dns", 2, kind="compensate"), harness.services
    )
    assert second["outcome"] == "dispatched"
    [work2] = harness.work()
    harness.deliver(work2)
    assert harness.ledger.get(instance, "register_dns").status is S.COMPENSATED
    assert [r.body["outcome"] for r in harness.results()] == ["succeeded"]


def test_compensator_with_nothing_to_undo_succeeds(harness):
    instance = harness.start()
    faults.inject("storage.create", faults.Stall())  # a dead agent: no effect, no reply
    harness.run_step(instance, "create_storage")
    scheduling.give_up_step(
        {"instance_id": instance, "step_id": "create_storage", "reason": "timed out"}, harness.services
    )
    scheduling.dispatch_compensation(
        harness.dispatch_payload(instance, "create_storage", 1, kind="compensate"), harness.services
    )
    [work] = harness.work()
    harness.deliver(work)
    assert harness.ledger.get(instance, "create_storage").status is S.COMPENSATED
    [reply] = harness.results()
    assert reply.body["output"] == {"service": "storage", "undone": False, "reason": "nothing to undo"}


def test_malformed_work_message_is_parked_not_raised(harness):
    from workflow_core.ledger.parking import parked_messages

    reason = process_work_message(
        {"hello": "world"}, delivery_count=1, services=harness.services, worker_id="w"
    )
    assert reason is not None and "instance_id: Field required" in reason
    [parked] = parked_messages(harness.ledger)
    assert parked.source == "work" and parked.reason == reason and '"hello"' in parked.body


# ---- the trigger-bound bodies, with the SDK's message objects -------------------------------------


def test_queue_trigger_body_decodes_the_storage_queue_envelope(harness):
    instance = harness.start()
    harness.dispatch(instance, "create_storage")
    [received] = harness.transport.receive(harness.services.settings.work_queue, lock_seconds=30)
    # What the Functions host hands the function: the base64-decoded message text.
    text = base64.b64decode(received.raw.content).decode()
    msg = HostQueueMessage(id=received.raw.id, body=text.encode(), dequeue_count=received.raw.dequeue_count)

    run_queue_message(msg, services=harness.services, worker_id="queue-worker")

    assert harness.ledger.get(instance, "create_storage").owner == "queue-worker"
    assert harness.ledger.get(instance, "create_storage").status is S.SUCCEEDED
    assert [r.body["outcome"] for r in harness.results()] == ["succeeded"]


def test_service_bus_trigger_body_reads_the_json_body_and_delivery_count(harness):
    instance = harness.start()
    harness.dispatch(instance, "register_dns")
    [received] = harness.work()
    msg = HostServiceBusMessage(
        body=json.dumps(received.body).encode(),
        message_id=received.message_id,
        delivery_count=1,
        content_type="application/json",
        application_properties={},
        user_properties={},
    )
    run_servicebus_message(msg, services=harness.services, worker_id="sb-worker")
    row = harness.ledger.get(instance, "register_dns")
    assert (row.status, row.owner) == (S.SUCCEEDED, "sb-worker")


def test_registered_storage_queue_function_runs_the_worker(harness):
    import azure.durable_functions as df

    from activities.worker.agent_worker import register_worker
    from workflow_core.settings import TransportKind

    function = register_worker(df.Blueprint(), TransportKind.STORAGE_QUEUE).build().get_user_function()
    instance = harness.start()
    harness.dispatch(instance, "register_dns")
    [received] = harness.transport.receive(harness.services.settings.work_queue, lock_seconds=30)
    text = base64.b64decode(received.raw.content).decode()

    class Context:
        invocation_id = "0123456789abcdef"

    function(HostQueueMessage(id=received.raw.id, body=text.encode(), dequeue_count=1), Context())

    row = harness.ledger.get(instance, "register_dns")
    assert row.status is S.SUCCEEDED
    assert row.owner.startswith("worker:") and row.owner.endswith(":01234567")


def test_a_watchdog_claim_does_not_stop_a_live_worker(harness, vclock):
    seen = {}

    @agent("tests.watched")
    def watched(ctx):
        ledger = harness.ledger
        row = ledger.get(ctx.instance_id, ctx.step_id)
        claimed = ledger.update(
            row, actor="supervisor:t1", owner="supervisor:t1", deadline=vclock.now + timedelta(seconds=300)
        )
        seen["during"] = ctx.heartbeat()  # no write while the watchdog holds its claim
        ledger.update(claimed, actor="supervisor:t1", owner=row.owner, deadline=row.deadline)
        vclock.advance(1)
        seen["after"] = ctx.heartbeat()
        return {"ok": True}

    harness.ledger.create_steps(
        "inst-watched",
        "custom",
        [NewStep(step_id="w", step_name="w", agent="tests.watched", heartbeat_timeout_seconds=45)],
        actor="test",
    )
    scheduling.dispatch_step(
        harness.dispatch_payload("inst-watched", "w", deadline_in=10, workflow="custom"), harness.services
    )
    [work] = harness.work()
    harness.deliver(work)

    assert seen["during"] == vclock.now - timedelta(seconds=1) + timedelta(seconds=300)
    assert seen["after"] == vclock.now + timedelta(seconds=45)
    assert harness.ledger.get("inst-watched", "w").status is S.SUCCEEDED


def test_a_message_whose_agent_or_input_is_not_the_ledgers_runs_nothing(harness):
    """Trust only the ledger: the handler is picked by the message's agent and given the message's
    input, so a message for the right attempt but another agent or input (forged, or corrupted on
    the way) is ignored and audited; the row stays Dispatched for the genuine message."""
    instance = harness.start()
    harness.dispatch(instance, "create_storage", input={"tenant_id": "Contoso", "region": "northeurope"})
    [work] = harness.work()
    forged_agent = {**work.body, "agent": "payments.refund"}
    forged_input = {**work.body, "input": {"tenant_id": "Mallory", "region": "northeurope"}}

    for body in (forged_agent, forged_input):
        process_work_message(body, delivery_count=1, services=harness.services, worker_id="worker-x")

    row = harness.ledger.get(instance, "create_storage")
    assert row.status is S.DISPATCHED and row.owner != "worker-x"
    assert _effects(harness, "storage", instance, "create_storage") is None
    assert not harness.results()
    reasons = [
        a.reason for a in harness.audit(instance, "create_storage") if a.action == "message-mismatch-ignored"
    ]
    assert len(reasons) == 2
    assert "agent 'payments.refund'" in reasons[0] and "input differs" in reasons[1]

    harness.deliver(work, worker_id="worker-1")  # the genuine message still runs, once
    assert harness.ledger.get(instance, "create_storage").status is S.SUCCEEDED
    assert [r.body["outcome"] for r in harness.results()] == ["succeeded"]
