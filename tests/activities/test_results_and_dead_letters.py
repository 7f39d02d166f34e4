"""The result and dead-letter handlers: real ledger and queues; a recording durable client."""

from __future__ import annotations

import asyncio
import base64
import json
from unittest.mock import ANY

import pytest
from azure.functions.queue import QueueMessage as HostQueueMessage
from azure.functions.servicebus import ServiceBusMessage as HostServiceBusMessage

from activities.replies.dead_letters import handle_dead_letter
from activities.replies.results import handle_result, is_instance_gone
from activities.scheduler import functions as scheduling
from activities.worker.agent_worker import process_work_message
from activities.worker.handlers import faults
from activities.worker.messages import HOST_POISON_REASON, from_queue_message, from_servicebus_message
from tests.helpers.durable import sdk_raise_event_answering
from workflow_core.contracts import result_event_name
from workflow_core.ledger import StepStatus
from workflow_core.transport import Settlement, pump

S = StepStatus


def _run(coro):
    return asyncio.run(coro)


# ---- result handler -------------------------------------------------------------------------------


def test_result_handler_raises_the_attempts_event_on_the_orchestration(harness, durable_client):
    instance = harness.start()
    [reply] = harness.run_step(instance, "create_storage")

    assert _run(handle_result(reply.body, durable_client, harness.services)) == "raised"

    [(target, event, data)] = durable_client.calls
    assert target == instance
    assert event == result_event_name("create_storage", 1) == "result:create_storage:1"
    # the reply as the ledger confirmed it, plus the ledger's verdict and the attempt's token (and no
    # instance snapshot: these steps were written without an instance record)
    token = harness.ledger.get(instance, "create_storage").attempt_token
    assert data == {**reply.body, "ledger_token": token, "verdict": ANY, "instance": None}
    assert data["outcome"] == "succeeded"
    assert data["verdict"] == {
        "state": "succeeded",
        "output": reply.body["output"],
        "error": None,
        "permanent": False,
    }
    assert len(token) == 32


def test_result_handler_uses_the_compensation_event_name(harness, durable_client):
    instance = harness.start()
    harness.run_step(instance, "create_storage")
    scheduling.dispatch_compensation(
        harness.dispatch_payload(instance, "create_storage", 1, kind="compensate"), harness.services
    )
    for work in harness.work():
        harness.deliver(work)
    [reply] = harness.results()
    _run(handle_result(reply.body, durable_client, harness.services))
    assert [c[1] for c in durable_client.calls] == ["compensation-result:create_storage:1"]


@pytest.mark.parametrize("status", [404, 410])
def test_result_for_a_gone_orchestration_is_audited_and_completed(harness, durable_client, status):
    instance = harness.start()
    [reply] = harness.run_step(instance, "create_storage")
    durable_client.answers[instance] = status

    assert _run(handle_result(reply.body, durable_client, harness.services)) == "late-result-ignored"

    [note] = [a for a in harness.audit(instance, "create_storage") if a.action == "late-result-ignored"]
    assert note.actor == "result-handler" and note.attempt == 1
    assert "result:create_storage:1" in note.reason


def test_other_raise_event_failures_propagate_so_the_message_is_retried(harness, durable_client):
    instance = harness.start()
    [reply] = harness.run_step(instance, "create_storage")
    durable_client.answers[instance] = 500
    with pytest.raises(Exception, match="unrecognized status code 500"):
        _run(handle_result(reply.body, durable_client, harness.services))
    assert not [a for a in harness.audit(instance) if a.action == "late-result-ignored"]


@pytest.mark.parametrize(("status", "gone"), [(404, True), (410, True), (400, False), (500, False)])
def test_is_instance_gone_matches_the_sdk_errors(status, gone):
    with pytest.raises(Exception) as caught:
        _run(sdk_raise_event_answering(status, "some-instance", "result:x:1", {}))
    assert is_instance_gone(caught.value) is gone


# ---- dead-letter handler --------------------------------------------------------------------------


def test_dead_lettered_work_fails_the_step_and_raises_a_failed_event(harness, durable_client):
    instance = harness.start()
    harness.dispatch(instance, "create_storage")
    queue = harness.services.settings.work_queue
    [message] = harness.transport.receive(queue, lock_seconds=30)
    harness.transport.dead_letter(message, "MaxDeliveryCountExceeded", "ledger unavailable")
    [dead] = harness.transport.receive_dead_letters(queue, lock_seconds=30)

    outcome = _run(
        handle_dead_letter(
            dead.body,
            reason=dead.dead_letter_reason,
            description=dead.dead_letter_description,
            client=durable_client,
            services=harness.services,
        )
    )

    assert outcome == "failed-event-raised"
    row = harness.ledger.get(instance, "create_storage")
    assert row.status is S.FAILED
    assert row.last_error == "dead-lettered: MaxDeliveryCountExceeded: ledger unavailable"
    [(target, event, data)] = durable_client.calls
    assert (target, event) == (instance, "result:create_storage:1")
    assert (data["outcome"], data["error"], data["attempt"]) == ("failed", row.last_error, 1)
    # Handling the same dead letter again changes nothing and raises the same event again.
    again = _run(
        handle_dead_letter(
            dead.body, reason="x", description="", client=durable_client, services=harness.services
        )
    )
    assert again == "failed-event-raised"
    assert durable_client.calls[1][2]["error"] == row.last_error
    assert [a.to_status for a in harness.audit(instance, "create_storage") if a.action == "transition"].count(
        "Failed"
    ) == 1


def test_poison_path_end_to_end_crashing_agent(harness, durable_client):
    """An agent that crashes on every delivery: abandoned, redelivered, dead-lettered, step Failed."""
    instance = harness.start()
    faults.inject("storage.create", faults.CrashAfterEffect(times=None))
    harness.dispatch(instance, "create_storage")
    settings = harness.services.settings

    def handler(message):
        process_work_message(
            message.body, delivery_count=message.delivery_count, services=harness.services, worker_id="w"
        )

    outcomes = []
    for _ in range(settings.max_delivery_count):
        outcomes += [
            d.settlement
            for d in pump(
                harness.transport, settings.work_queue, handler, max_delivery_count=3, wait_seconds=5
            )
        ]
    assert outcomes == [Settlement.ABANDONED, Settlement.ABANDONED, Settlement.DEAD_LETTERED]
    [dead] = harness.transport.receive_dead_letters(settings.work_queue, lock_seconds=30)
    _run(
        handle_dead_letter(
            dead.body,
            reason=dead.dead_letter_reason,
            description=dead.dead_letter_description,
            client=durable_client,
            services=harness.services,
        )
    )
    row = harness.ledger.get(instance, "create_storage")
    assert row.status is S.FAILED and "InjectedCrash" in row.last_error
    assert durable_client.calls[0][2]["outcome"] == "failed"


def test_host_poison_message_without_reason(harness, durable_client):
    """The Functions host moves a poison message to <queue>-poison as is: no reason in it."""
    instance = harness.start()
    harness.dispatch(instance, "register_dns")
    [received] = harness.transport.receive(harness.services.settings.work_queue, lock_seconds=30)
    text = base64.b64decode(received.raw.content).decode()
    incoming = from_queue_message(
        HostQueueMessage(id="m1", body=text.encode(), dequeue_count=1), dead_letter=True
    )
    assert incoming.dead_letter_reason == HOST_POISON_REASON

    _run(
        handle_dead_letter(
            incoming.body,
            reason=incoming.dead_letter_reason,
            description=incoming.dead_letter_description,
            client=durable_client,
            services=harness.services,
        )
    )
    row = harness.ledger.get(instance, "register_dns")
    assert row.status is S.FAILED and row.last_error.startswith(f"dead-lettered: {HOST_POISON_REASON}")


def test_service_bus_dead_letter_properties(harness, durable_client):
    instance = harness.start()
    harness.dispatch(instance, "register_dns")
    [received] = harness.work()
    msg = HostServiceBusMessage(
        body=json.dumps(received.body).encode(),
        message_id=received.message_id,
        delivery_count=5,
        dead_letter_reason="MaxDeliveryCountExceeded",
        dead_letter_error_description="Message could not be consumed after 5 delivery attempts.",
        application_properties={},
        user_properties={},
    )
    incoming = from_servicebus_message(msg)
    outcome = _run(
        handle_dead_letter(
            incoming.body,
            reason=incoming.dead_letter_reason,
            description=incoming.dead_letter_description,
            client=durable_client,
            services=harness.services,
        )
    )
    assert outcome == "failed-event-raised"
    assert "after 5 delivery attempts" in harness.ledger.get(instance, "register_dns").last_error


def test_dead_letter_of_a_settled_attempt_reports_the_ledger_outcome_or_is_audited(harness, durable_client):
    instance = harness.start()
    harness.dispatch(instance, "register_dns")
    [work] = harness.work()
    harness.deliver(work)  # succeeded meanwhile (a copy of the message was dead-lettered anyway)
    harness.results()

    outcome = _run(
        handle_dead_letter(work.body, reason="TTLExpired", client=durable_client, services=harness.services)
    )
    # The ledger already has this attempt's outcome: that is what the orchestration hears.
    assert outcome == "result-event-raised"
    assert durable_client.calls[0][2]["outcome"] == "succeeded"
    assert harness.ledger.get(instance, "register_dns").status is S.SUCCEEDED

    scheduling.plan_compensation({"instance_id": instance}, harness.services)
    scheduling.dispatch_compensation(
        harness.dispatch_payload(instance, "register_dns", 1, kind="compensate"), harness.services
    )
    for w in harness.work():
        harness.deliver(w)
    durable_client.calls.clear()
    assert (
        _run(handle_dead_letter(work.body, reason="late", client=durable_client, services=harness.services))
        == "ignored"
    )
    assert durable_client.calls == []
    assert [a for a in harness.audit(instance, "register_dns") if a.action == "dead-letter-ignored"]


def test_dead_lettered_compensation_marks_the_compensator_failed(harness, durable_client):
    instance = harness.start()
    harness.run_step(instance, "create_storage")
    scheduling.dispatch_compensation(
        harness.dispatch_payload(instance, "create_storage", 1, kind="compensate"), harness.services
    )
    [work] = harness.work()
    outcome = _run(
        handle_dead_letter(
            work.body, reason="MaxDeliveryCountExceeded", client=durable_client, services=harness.services
        )
    )
    assert outcome == "failed-event-raised"
    row = harness.ledger.get(instance, "create_storage")
    assert (row.status, row.compensation_status) == (S.COMPENSATING, "Failed")
    assert durable_client.calls[0][1] == "compensation-result:create_storage:1"


def test_unreadable_dead_letter_is_parked_with_its_reason(harness, durable_client):
    from workflow_core.ledger.parking import parked_messages

    assert (
        _run(
            handle_dead_letter(
                {"text": "garbage"}, reason="x", client=durable_client, services=harness.services
            )
        )
        == "parked"
    )
    [parked] = parked_messages(harness.ledger)
    assert parked.source == "dead-letter" and "instance_id: Field required" in parked.reason
    assert "dead-lettered: x" in parked.reason and durable_client.calls == []


def test_a_plain_synchronous_client_works_too(harness):
    class SyncClient:
        def __init__(self):
            self.calls = []

        def raise_event(self, instance_id, event_name, event_data=None):
            self.calls.append((instance_id, event_name))

    instance = harness.start()
    [reply] = harness.run_step(instance, "register_dns")
    client = SyncClient()
    assert _run(handle_result(reply.body, client, harness.services)) == "raised"
    assert client.calls == [(instance, "result:register_dns:1")]
