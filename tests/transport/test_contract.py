"""The transport contract: one set of tests, run against every Transport implementation.

- ``storage-queue``: StorageQueueTransport on a real Azurite. Always runs.
- ``servicebus``: ServiceBusTransport on a real Service Bus (the emulator or a namespace), when
  ``SERVICEBUS_CONNECTION_STRING`` is set; skipped with the reason otherwise. It uses the queue
  ``SERVICEBUS_QUEUE`` (default ``agent-work``), which must exist with duplicate detection on and a
  ``MaxDeliveryCount`` above 3; it is drained before each test.

Where the brokers differ on purpose (duplicate MessageIds), the test states both behaviours.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from workflow_core.transport import (
    LockLostError,
    OutgoingMessage,
    ReceivedMessage,
    Settlement,
    Transport,
    pump,
)
from workflow_core.transport.base import MAX_DELIVERY_REASON

STORAGE = "storage-queue"
SERVICE_BUS = "servicebus"


@dataclass
class Harness:
    kind: str
    transport: Transport
    queue: str

    @property
    def deduplicates_message_ids(self) -> bool:
        return self.kind == SERVICE_BUS


def _drain(transport: Transport, queue: str) -> None:
    for receive in (transport.receive, transport.receive_dead_letters):
        while batch := receive(queue, max_messages=50, wait_seconds=1):
            for message in batch:
                transport.complete(message)


@pytest.fixture(params=[STORAGE, pytest.param(SERVICE_BUS, marks=pytest.mark.servicebus)])
def harness(request, unique_name) -> Iterator[Harness]:
    if request.param == STORAGE:
        from workflow_core.transport.storage_queue import StorageQueueTransport

        azurite = request.getfixturevalue("azurite")
        transport = StorageQueueTransport.from_connection_string(azurite.connection_string)
        queue = unique_name("contract")
        transport.ensure_queues(queue)
    else:
        connection_string = os.environ.get("SERVICEBUS_CONNECTION_STRING")
        if not connection_string:
            pytest.skip(
                "SERVICEBUS_CONNECTION_STRING is not set: the Service Bus run of the transport contract "
                "needs the Service Bus emulator or a namespace (queue SERVICEBUS_QUEUE, default agent-work)"
            )
        from workflow_core.transport.servicebus import ServiceBusTransport

        transport = ServiceBusTransport.from_connection_string(connection_string)
        queue = os.environ.get("SERVICEBUS_QUEUE", "agent-work")
        _drain(transport, queue)
    try:
        yield Harness(request.param, transport, queue)
    finally:
        transport.close()


def _message(**overrides) -> OutgoingMessage:
    fields = {
        "body": {"step": "reserve", "amount": 12.5, "items": [1, 2, 3], "note": "naïve ✓"},
        "message_id": f"work:{uuid.uuid4().hex}:reserve:1",
        "correlation_id": "instance-42",
        "subject": "step.work",
        "application_properties": {"workflow": "trip", "attempt": 1, "weight": 0.5, "urgent": True},
    }
    fields.update(overrides)
    return OutgoingMessage(**fields)


def _receive_one(h: Harness, *, lock_seconds: float = 30, wait: float = 10) -> ReceivedMessage:
    received = h.transport.receive(h.queue, lock_seconds=lock_seconds, wait_seconds=wait)
    assert len(received) == 1, f"expected one message, got {received}"
    return received[0]


def _sleep_past(moment: datetime | None, margin: float = 1.0) -> None:
    assert moment is not None, "a locked message must say until when"
    delay = (moment - datetime.now(UTC)).total_seconds() + margin
    assert delay < 150, f"lock lasts {delay:.0f}s; configure a shorter LockDuration for this queue"
    time.sleep(max(0.0, delay))


pytestmark = pytest.mark.timeout(240)


def test_round_trip_preserves_id_correlation_subject_properties_and_body(harness: Harness):
    sent = _message()
    before = datetime.now(UTC)
    harness.transport.send(harness.queue, sent)

    got = _receive_one(harness)

    assert got.message_id == sent.message_id
    assert got.correlation_id == "instance-42"
    assert got.subject == "step.work"
    assert got.application_properties == {"workflow": "trip", "attempt": 1, "weight": 0.5, "urgent": True}
    types = {k: type(v) for k, v in got.application_properties.items()}
    assert types == {"workflow": str, "attempt": int, "weight": float, "urgent": bool}
    assert got.body == sent.body
    assert got.delivery_count == 1
    assert got.queue == harness.queue
    assert got.dead_letter_reason is None
    assert got.enqueued_time is not None and got.enqueued_time.tzinfo is not None
    assert abs((got.enqueued_time - before).total_seconds()) < 60
    assert got.locked_until is not None and got.locked_until > before
    harness.transport.complete(got)


def test_absent_optional_fields_stay_absent(harness: Harness):
    harness.transport.send(
        harness.queue, OutgoingMessage(body={"k": "v"}, message_id="m-" + uuid.uuid4().hex)
    )
    got = _receive_one(harness)
    assert (got.correlation_id, got.subject, got.application_properties) == (None, None, {})
    assert got.body == {"k": "v"}
    harness.transport.complete(got)


def test_receive_on_empty_queue_returns_nothing_within_the_wait(harness: Harness):
    started = time.monotonic()
    assert harness.transport.receive(harness.queue, wait_seconds=1.0) == []
    assert time.monotonic() - started < 15


def test_batch_receive_returns_each_message_once(harness: Harness):
    sent = {_message().message_id for _ in range(5)}
    for message_id in sent:
        harness.transport.send(harness.queue, _message(message_id=message_id))
    seen: list[ReceivedMessage] = []
    deadline = time.monotonic() + 20
    while len(seen) < 5 and time.monotonic() < deadline:
        seen += harness.transport.receive(harness.queue, max_messages=10, wait_seconds=2)
    assert sorted(m.message_id for m in seen) == sorted(sent)
    for message in seen:
        harness.transport.complete(message)


def test_complete_removes_the_message_for_good(harness: Harness):
    harness.transport.send(harness.queue, _message())
    got = _receive_one(harness, lock_seconds=1)
    harness.transport.complete(got)
    _sleep_past(got.locked_until)  # past the lock: an uncompleted message would be visible again
    assert harness.transport.receive(harness.queue, wait_seconds=1) == []


def test_abandon_redelivers_at_once_with_delivery_count_plus_one(harness: Harness):
    sent = _message()
    harness.transport.send(harness.queue, sent)
    first = _receive_one(harness, lock_seconds=60)
    harness.transport.abandon(first)

    again = _receive_one(harness, lock_seconds=60, wait=10)  # long before the 60 s lock would expire

    assert again.message_id == sent.message_id
    assert again.body == sent.body
    assert again.delivery_count == first.delivery_count + 1 == 2
    harness.transport.complete(again)


def test_lock_expiry_redelivers_with_delivery_count_plus_one(harness: Harness):
    sent = _message()
    harness.transport.send(harness.queue, sent)
    first = _receive_one(harness, lock_seconds=2)
    assert harness.transport.receive(harness.queue) == [], "a locked message must not be delivered twice"

    _sleep_past(first.locked_until)
    again = _receive_one(harness)

    assert again.message_id == sent.message_id
    assert again.delivery_count == 2
    harness.transport.complete(again)


def test_settling_with_a_lost_lock_raises_lock_lost(harness: Harness):
    harness.transport.send(harness.queue, _message())
    stale = _receive_one(harness, lock_seconds=1)
    _sleep_past(stale.locked_until)
    current = _receive_one(harness)  # another consumer now holds it

    with pytest.raises(LockLostError):
        harness.transport.complete(stale)

    assert current.delivery_count == 2
    harness.transport.complete(current)


def test_renew_lock_keeps_the_message_locked_past_its_first_lock(harness: Harness):
    harness.transport.send(harness.queue, _message())
    got = _receive_one(harness, lock_seconds=3)
    first_lock = got.locked_until
    assert first_lock is not None
    _sleep_past(first_lock, margin=-1.5)  # renew shortly before the first lock runs out

    harness.transport.renew_lock(got, lock_seconds=30)  # Service Bus: by the queue's LockDuration

    assert got.locked_until is not None and got.locked_until > first_lock
    _sleep_past(first_lock)
    assert harness.transport.receive(harness.queue, wait_seconds=1) == [], "renewed lock must still hold"
    harness.transport.complete(got)  # the renewed lock is still ours


def test_dead_letter_moves_it_to_the_dead_letter_queue_with_reason(harness: Harness):
    sent = _message()
    harness.transport.send(harness.queue, sent)
    got = _receive_one(harness)

    harness.transport.dead_letter(got, "InvalidInput", "amount must be positive")

    dead = harness.transport.receive_dead_letters(harness.queue, lock_seconds=1, wait_seconds=10)
    assert [d.message_id for d in dead] == [sent.message_id]
    assert dead[0].dead_letter_reason == "InvalidInput"
    assert dead[0].dead_letter_description == "amount must be positive"
    assert dead[0].body == sent.body
    assert dead[0].correlation_id == sent.correlation_id
    assert dead[0].application_properties == sent.application_properties
    assert harness.transport.receive(harness.queue, wait_seconds=1) == []

    harness.transport.complete(dead[0])  # an operator drains the dead-letter queue
    _sleep_past(dead[0].locked_until)
    assert harness.transport.receive_dead_letters(harness.queue, wait_seconds=1) == []


def test_pump_abandons_failures_then_dead_letters_after_max_deliveries(harness: Harness):
    sent = _message()
    harness.transport.send(harness.queue, sent)

    def always_fails(message: ReceivedMessage) -> None:
        raise ValueError(f"boom on delivery {message.delivery_count}")

    outcomes = []
    for _ in range(3):
        deliveries = pump(
            harness.transport, harness.queue, always_fails, max_delivery_count=3, wait_seconds=10
        )
        assert len(deliveries) == 1
        outcomes.append((deliveries[0].message.delivery_count, deliveries[0].settlement))
        assert isinstance(deliveries[0].error, ValueError)

    assert outcomes == [(1, Settlement.ABANDONED), (2, Settlement.ABANDONED), (3, Settlement.DEAD_LETTERED)]
    assert harness.transport.receive(harness.queue, wait_seconds=1) == []
    dead = harness.transport.receive_dead_letters(harness.queue, wait_seconds=10)
    assert [d.message_id for d in dead] == [sent.message_id]
    assert dead[0].dead_letter_reason == MAX_DELIVERY_REASON
    assert dead[0].dead_letter_description == "ValueError: boom on delivery 3"
    harness.transport.complete(dead[0])


def test_pump_completes_what_the_handler_processed(harness: Harness):
    sent = _message()
    harness.transport.send(harness.queue, sent)
    handled = []

    deliveries = pump(harness.transport, harness.queue, handled.append, max_delivery_count=3, lock_seconds=1)

    assert [d.settlement for d in deliveries] == [Settlement.COMPLETED]
    assert [m.message_id for m in handled] == [sent.message_id]
    _sleep_past(deliveries[0].message.locked_until)
    assert harness.transport.receive(harness.queue, wait_seconds=1) == []


def test_pump_reports_lock_lost_when_the_handler_outlives_its_lock(harness: Harness):
    harness.transport.send(harness.queue, _message())
    taken_over = []

    def slow(message: ReceivedMessage) -> None:
        _sleep_past(message.locked_until)
        taken_over.extend(harness.transport.receive(harness.queue, wait_seconds=10))  # a competing consumer

    deliveries = pump(harness.transport, harness.queue, slow, max_delivery_count=5, lock_seconds=1)

    assert [d.settlement for d in deliveries] == [Settlement.LOCK_LOST]
    assert [m.delivery_count for m in taken_over] == [2]
    harness.transport.complete(taken_over[0])


def test_duplicate_message_id_is_delivered_twice_on_storage_queues_and_once_on_service_bus(
    harness: Harness,
):
    """Storage Queues have no duplicate detection: the consumer (the ledger) must dedupe.
    Service Bus with duplicate detection drops the second send of the same MessageId."""
    message_id = f"work:{uuid.uuid4().hex}:charge:1"
    harness.transport.send(harness.queue, _message(message_id=message_id, body={"copy": 1}))
    harness.transport.send(harness.queue, _message(message_id=message_id, body={"copy": 2}))

    received: list[ReceivedMessage] = []
    deadline = time.monotonic() + 10
    while len(received) < 2 and time.monotonic() < deadline:
        received += harness.transport.receive(harness.queue, max_messages=10, wait_seconds=2)

    assert {m.message_id for m in received} == {message_id}
    if harness.deduplicates_message_ids:
        assert [m.body for m in received] == [{"copy": 1}]
    else:
        assert sorted(m.body["copy"] for m in received) == [1, 2]
    for message in received:
        harness.transport.complete(message)


def test_a_probe_proves_the_send_right_and_no_consumer_ever_receives_it(harness: Harness):
    """Doctor's queue row: ``probe`` sends a message nobody sees and removes it; the queue's own
    message is all a consumer gets, and the report names the probe and the oldest message."""
    harness.transport.send(harness.queue, _message(message_id="real-1"))

    report = harness.transport.probe(harness.queue)

    assert report.startswith("probe "), report
    assert "oldest message" in report or "not readable" in report, report
    received = _receive_one(harness)
    assert received.message_id == "real-1"
    harness.transport.complete(received)
    assert harness.transport.receive(harness.queue, wait_seconds=2) == []


def test_a_receiver_apart_completes_and_abandons_and_holds_nothing_after(harness: Harness):
    """Doctor's answer round trip reads through ``receiver_apart``: what it completes is gone, what it
    abandons is delivered again (count + 1) to the transport's own receive once it is closed."""
    for ident in ("apart-1", "apart-2"):
        harness.transport.send(harness.queue, _message(message_id=ident))
    with harness.transport.receiver_apart(harness.queue) as receiver:
        got: dict[str, ReceivedMessage] = {}
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            for message in receiver.receive(harness.queue, max_messages=32, lock_seconds=60, wait_seconds=2):
                got[message.message_id] = message
        assert sorted(got) == ["apart-1", "apart-2"]
        receiver.complete(got["apart-1"])
        receiver.abandon(got["apart-2"])

    again = _receive_one(harness)
    assert (again.message_id, again.delivery_count) == ("apart-2", 2)
    harness.transport.complete(again)
    assert harness.transport.receive(harness.queue, wait_seconds=2) == []
