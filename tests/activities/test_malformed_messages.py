"""Malformed messages never make the worker or the dead-letter handler raise: they are parked with a
reason an operator can read, and the step, when it can be identified, gets a note.

Real Azurite, real queues: each message goes through the work queue and reaches the worker the way
the Functions host hands it over (the decoded envelope text in a ``func.QueueMessage``).
"""

from __future__ import annotations

import asyncio
import base64

import pytest
from azure.functions.queue import QueueMessage as HostQueueMessage

from activities.replies.dead_letters import handle_dead_letter
from activities.replies.results import handle_result
from activities.worker.agent_worker import run_queue_message
from workflow_core.ledger.parking import parked_messages
from workflow_core.transport import OutgoingMessage

BAD_IDS = {
    "slash": "a/b",
    "backslash": "a\\b",
    "hash": "a#b",
    "question-mark": "a?b",
    "control-character": "a\x07b",
    "300-characters": "a" * 300,
}


def _valid_body(harness) -> dict:
    instance = harness.start()
    harness.dispatch(instance, "create_storage")
    [work] = harness.work()
    return work.body


def _through_the_queue(harness, body_or_text) -> HostQueueMessage:
    """Send on the real work queue, receive, and hand it over as the Functions host would."""
    queue = harness.services.settings.work_queue
    if isinstance(body_or_text, str):  # a foreign, non-JSON message
        harness.transport._client(queue).send_message(body_or_text)  # the client base64-encodes it
    else:
        harness.transport.send(queue, OutgoingMessage(body=body_or_text, message_id="bad-1"))
    [received] = harness.transport.receive(queue, lock_seconds=30)
    text = base64.b64decode(received.raw.content).decode()
    harness.transport.complete(received)
    return HostQueueMessage(id=received.raw.id, body=text.encode(), dequeue_count=1)


@pytest.mark.parametrize("field", ["instance_id", "step_id"])
@pytest.mark.parametrize("bad", list(BAD_IDS.values()), ids=list(BAD_IDS))
def test_bad_ids_are_parked_by_the_worker_and_the_dead_letter_handler(harness, durable_client, field, bad):
    body = {**_valid_body(harness), field: bad}
    msg = _through_the_queue(harness, body)

    run_queue_message(msg, services=harness.services, worker_id="w1")  # must not raise
    outcome = asyncio.run(
        handle_dead_letter(
            body, reason="MaxDeliveryCountExceeded", client=durable_client, services=harness.services
        )
    )

    assert outcome == "parked" and durable_client.calls == []
    worker_row, dead_letter_row = parked_messages(harness.ledger)
    assert (worker_row.source, dead_letter_row.source) == ("work", "dead-letter")
    for row in (worker_row, dead_letter_row):
        assert row.reason.startswith(f"not a valid work message: {field}: ")
        assert ("forbid" in row.reason) if len(bad) < 100 else ("300 characters long" in row.reason)
        assert row.reason.isprintable()  # a control character is shown escaped, never raw
    assert worker_row.message_id == "bad-1"
    assert "MaxDeliveryCountExceeded" in dead_letter_row.reason


@pytest.mark.parametrize(
    "case",
    ["not-json", "missing-fields", "attempt-not-a-number", "input-too-large"],
)
def test_other_malformed_messages_are_parked_with_a_readable_reason(harness, durable_client, case):
    body = _valid_body(harness)
    if case == "not-json":
        payload, expected = "this is {not json", "kind: Field required"
    elif case == "missing-fields":
        payload = {k: v for k, v in body.items() if k not in ("agent", "deadline")}
        expected = "agent: Field required"
    elif case == "attempt-not-a-number":
        payload, expected = {**body, "attempt": "two"}, "attempt: Input should be a valid integer"
    else:
        payload, expected = {**body, "input": {"blob": "x" * 40_000}}, "input: Value error, is 40"

    run_queue_message(_through_the_queue(harness, payload), services=harness.services, worker_id="w1")

    [row] = parked_messages(harness.ledger)
    assert expected in row.reason, row.reason
    assert len(row.body) <= 16_000
    if case in ("missing-fields", "attempt-not-a-number", "input-too-large"):
        # the step can be identified: it is marked, and nothing else about it changed
        [note] = [
            a for a in harness.audit(body["instance_id"], "create_storage") if a.action == "message-parked"
        ]
        assert expected in note.reason
        assert harness.ledger.get(body["instance_id"], "create_storage").status.value == "Dispatched"


def test_a_malformed_result_message_is_parked_too(harness, durable_client):
    outcome = asyncio.run(
        handle_result({"kind": "work", "step_id": "a#b"}, durable_client, harness.services, message_id="r-1")
    )
    assert outcome == "parked" and durable_client.calls == []
    [row] = parked_messages(harness.ledger)
    assert row.source == "result" and "step_id: Value error" in row.reason and row.message_id == "r-1"


@pytest.mark.parametrize("field", ["reply_token", "idempotency_key", "expires_at"])
@pytest.mark.parametrize("value", ["missing", None])
def test_a_work_message_without_what_every_one_carries_is_parked(harness, durable_client, field, value):
    """``reply_token``, ``idempotency_key`` and ``expires_at`` are required (contract v3): a message
    without one (an older sender's, a hand-made one) is parked with the reason, never worked on."""
    body = _valid_body(harness)
    payload = {k: v for k, v in body.items() if k != field} if value == "missing" else {**body, field: None}

    run_queue_message(_through_the_queue(harness, payload), services=harness.services, worker_id="w1")
    outcome = asyncio.run(
        handle_dead_letter(
            payload, reason="MaxDeliveryCountExceeded", client=durable_client, services=harness.services
        )
    )

    assert outcome == "parked" and durable_client.calls == []
    worker_row, dead_letter_row = parked_messages(harness.ledger)
    for row in (worker_row, dead_letter_row):
        assert row.reason.startswith(f"not a valid work message: {field}: "), row.reason
    row = harness.ledger.get(body["instance_id"], "create_storage")
    assert row.status.value == "Dispatched"  # nothing claimed, nothing failed
    assert harness.results() == []


def test_a_doctor_probe_whose_cancel_did_not_take_is_dropped_not_parked(harness):
    """`sas doctor` schedules a probe on every queue and cancels it; delivered anyway (the cancel failed),
    the worker completes it without parking it or touching a step."""
    from api.diagnostics_queues import PROBE_BODY

    msg = _through_the_queue(harness, PROBE_BODY)

    run_queue_message(msg, services=harness.services, worker_id="w1")  # must not raise

    assert parked_messages(harness.services.ledger) == []
    assert harness.transport.receive(harness.services.settings.work_queue, lock_seconds=1) == []


def test_a_doctor_probe_on_the_result_queue_is_dropped_not_parked(harness, durable_client):
    """The same probe on the result queue: dropped, never parked (a parked result is an operator's
    work, and its dead letter would fire the results alert)."""
    from api.diagnostics_queues import PROBE_BODY
    from workflow_core.transport.envelope import body_from_text

    outcome = asyncio.run(handle_result(body_from_text(PROBE_BODY), durable_client, harness.services))
    assert outcome == "dropped" and durable_client.calls == []
    assert parked_messages(harness.services.ledger) == []
