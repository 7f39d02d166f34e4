"""ServiceBusTransport, with the real azure-servicebus SDK, against the AMQP 1.0 Service Bus test double.

What this proves: the adapter drives the SDK correctly end to end over a socket: the messages it
sends carry MessageId, CorrelationId, Subject, application properties and a JSON body; it receives in
peek-lock mode and maps what comes back (delivery count, lock, sequence and enqueue metadata); each
settlement reaches the wire as the right AMQP outcome (complete = accepted, abandon = modified,
dead-letter = rejected with reason and description); lock renewal goes through ``$management``; the
dead-letter sub-queue is read from ``<queue>/$DeadLetterQueue``; SDK errors become TransportError.

What it does not prove: broker semantics. The double does not expire locks, enforce a delivery
limit or detect duplicates; those are covered by the transport contract suite (always on Storage
Queues, and on a real Service Bus when SERVICEBUS_CONNECTION_STRING is set).
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from tests.servicebus_double.double import AmqpTestDouble
from workflow_core.settings import ServiceBusConnection
from workflow_core.transport import (
    LockLostError,
    OutgoingMessage,
    ReceivedMessage,
    Settlement,
    TransportError,
    pump,
)
from workflow_core.transport.servicebus import ServiceBusTransport

pytestmark = pytest.mark.timeout(60)


class _Shared:
    """One transport and one queue for the module: the SDK takes about half a second to open each
    link (and the same to close it), so per-test queues and connections would dominate the run."""

    def __init__(self, double: AmqpTestDouble) -> None:
        self.double = double
        self.transport: ServiceBusTransport | None = None
        self.queue = f"adapter-{uuid.uuid4().hex[:8]}"

    def get(self) -> ServiceBusTransport:
        if self.transport is None:
            # A short minimum wait: the double answers on loopback at once.
            self.transport = ServiceBusTransport.from_connection_string(
                self.double.connection_string, min_wait_seconds=0.25
            )
        return self.transport

    def is_clean(self) -> bool:
        return all(
            self.double.queue_state(e) == (0, 0) for e in (self.queue, f"{self.queue}/$DeadLetterQueue")
        )

    def reset(self) -> None:
        """After a test left messages behind (it failed), give the next one a fresh start."""
        if self.transport is not None:
            self.transport.close()
        self.transport = None
        self.queue = f"adapter-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def shared(servicebus_double: AmqpTestDouble) -> Iterator[_Shared]:
    holder = _Shared(servicebus_double)
    yield holder
    if holder.transport is not None:
        holder.transport.close()


@pytest.fixture
def transport(shared: _Shared) -> ServiceBusTransport:
    return shared.get()


@pytest.fixture
def queue(shared: _Shared) -> Iterator[str]:
    """The module's queue, checked empty (nothing available, nothing locked) after every test."""
    yield shared.queue
    if not shared.is_clean():
        shared.reset()


def _message(**overrides) -> OutgoingMessage:
    fields = {
        "body": {"step": "charge", "amount": 99.5, "lines": [{"sku": "A1", "qty": 2}], "note": "ü ✓"},
        "message_id": f"work:{uuid.uuid4().hex}:charge:1",
        "correlation_id": "instance-7",
        "subject": "step.work",
        "application_properties": {"workflow": "payment", "attempt": 3, "ratio": 0.25, "retry": False},
    }
    fields.update(overrides)
    return OutgoingMessage(**fields)


def _one(messages: list[ReceivedMessage]) -> ReceivedMessage:
    assert len(messages) == 1, messages
    return messages[0]


def test_send_and_receive_carry_every_field(transport, queue):
    sent = _message()
    before = datetime.now(UTC)
    transport.send(queue, sent)

    got = _one(transport.receive(queue, wait_seconds=5))

    assert (got.message_id, got.correlation_id, got.subject) == (sent.message_id, "instance-7", "step.work")
    assert got.body == sent.body
    assert got.application_properties == sent.application_properties
    assert {k: type(v) for k, v in got.application_properties.items()} == {
        "workflow": str,
        "attempt": int,
        "ratio": float,
        "retry": bool,
    }
    assert got.delivery_count == 1
    assert got.queue == queue
    assert got.raw.content_type == "application/json"
    assert got.raw.sequence_number >= 1
    assert got.enqueued_time is not None and abs((got.enqueued_time - before).total_seconds()) < 10
    assert got.locked_until is not None and 20 < (got.locked_until - before).total_seconds() < 40
    transport.complete(got)


def test_complete_removes_the_message(servicebus_double, transport, queue):
    transport.send(queue, _message())
    got = _one(transport.receive(queue, wait_seconds=5))
    assert servicebus_double.queue_state(queue) == (0, 1)  # (available, locked)

    transport.complete(got)

    assert servicebus_double.queue_state(queue) == (0, 0)


def test_abandon_redelivers_with_delivery_count_plus_one(transport, queue):
    sent = _message()
    transport.send(queue, sent)
    first = _one(transport.receive(queue, wait_seconds=5))

    transport.abandon(first)

    again = _one(transport.receive(queue, wait_seconds=5))
    assert again.message_id == sent.message_id
    assert again.body == sent.body
    assert again.delivery_count == 2
    assert again.raw.sequence_number == first.raw.sequence_number
    assert again.raw.lock_token != first.raw.lock_token
    transport.complete(again)


def test_dead_letter_moves_it_to_the_dead_letter_queue_with_reason(servicebus_double, transport, queue):
    sent = _message()
    transport.send(queue, sent)
    got = _one(transport.receive(queue, wait_seconds=5))

    transport.dead_letter(got, "InvalidInput", "amount must be positive")

    assert servicebus_double.queue_state(queue) == (0, 0)
    assert servicebus_double.queue_state(f"{queue}/$DeadLetterQueue") == (1, 0)
    dead = _one(transport.receive_dead_letters(queue, wait_seconds=5))
    assert dead.queue == f"{queue}/$DeadLetterQueue"
    assert (dead.dead_letter_reason, dead.dead_letter_description) == (
        "InvalidInput",
        "amount must be positive",
    )
    assert dead.message_id == sent.message_id
    assert dead.body == sent.body
    assert dead.application_properties == sent.application_properties  # reason is not a user property
    transport.complete(dead)
    assert servicebus_double.queue_state(f"{queue}/$DeadLetterQueue") == (0, 0)


def test_renew_lock_moves_locked_until_forward(transport, queue):
    transport.send(queue, _message())
    got = _one(transport.receive(queue, wait_seconds=5))
    first = got.locked_until
    time.sleep(0.3)

    transport.renew_lock(got)

    assert got.locked_until is not None and first is not None
    assert (got.locked_until - first).total_seconds() >= 0.25
    assert got.raw.locked_until_utc == got.locked_until
    transport.complete(got)  # the lock token is unchanged by a renewal


def test_settling_twice_raises_lock_lost(transport, queue):
    transport.send(queue, _message())
    got = _one(transport.receive(queue, wait_seconds=5))
    transport.complete(got)

    with pytest.raises(LockLostError):
        transport.complete(got)
    with pytest.raises(LockLostError):
        transport.renew_lock(got)


def test_settling_after_close_raises_lock_lost(servicebus_double, queue):
    t = ServiceBusTransport.from_connection_string(servicebus_double.connection_string)
    t.send(queue, _message())
    got = _one(t.receive(queue, wait_seconds=5))
    t.close()

    with pytest.raises(TransportError, match="closed"):
        t.complete(got)
    with pytest.raises(TransportError, match="closed"):
        t.send(queue, _message())


def test_pump_dead_letters_on_the_last_allowed_delivery(servicebus_double, transport, queue):
    sent = _message()
    transport.send(queue, sent)

    def fails(message: ReceivedMessage) -> None:
        raise RuntimeError("remote service unavailable")

    settlements = [
        pump(transport, queue, fails, max_delivery_count=2, wait_seconds=5)[0].settlement for _ in range(2)
    ]

    assert settlements == [Settlement.ABANDONED, Settlement.DEAD_LETTERED]
    assert servicebus_double.queue_state(queue) == (0, 0)
    dead = _one(transport.receive_dead_letters(queue, wait_seconds=5))
    assert dead.message_id == sent.message_id
    assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"
    assert dead.dead_letter_description == "RuntimeError: remote service unavailable"
    transport.complete(dead)


def test_message_sent_by_another_client_is_read_leniently(servicebus_double, transport, queue):
    """Plain-text bodies (e.g. sent from the portal) do not break a receive."""
    from azure.servicebus import ServiceBusClient, ServiceBusMessage

    client = ServiceBusClient.from_connection_string(servicebus_double.connection_string)
    with client, client.get_queue_sender(queue) as sender:
        sender.send_messages(ServiceBusMessage("not json", message_id="portal-1"))

    got = _one(transport.receive(queue, wait_seconds=5))
    assert (got.message_id, got.body, got.application_properties) == ("portal-1", {"text": "not json"}, {})
    transport.complete(got)


def test_settling_a_message_from_another_transport_is_refused(transport):
    foreign = ReceivedMessage(body={}, message_id="x", delivery_count=1, queue="q", raw=object())
    with pytest.raises(TransportError, match="not received by a ServiceBusTransport"):
        transport.complete(foreign)


def test_unreachable_namespace_raises_transport_error_quickly():
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conn = (
        f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=a;SharedAccessKey=b;UseDevelopmentEmulator=true;"
    )
    t = ServiceBusTransport.from_connection_string(conn, client_kwargs={"retry_total": 0})
    started = time.monotonic()
    with pytest.raises(TransportError, match="Service Bus: could not send"):
        t.send("q", _message())
    assert time.monotonic() - started < 30
    t.close()


def test_invalid_connection_string_raises_transport_error():
    with pytest.raises(TransportError, match="connection string"):
        ServiceBusTransport.from_connection_string("not a connection string")


def test_identity_connection_uses_default_credential_with_the_client_id(monkeypatch):
    calls = []

    class FakeCredential:
        def __init__(self, **kwargs):
            calls.append(kwargs)

        def get_token(self, *scopes, **kwargs):  # pragma: no cover - never reached: nothing connects
            raise AssertionError("no network in this test")

    monkeypatch.setattr("azure.identity.DefaultAzureCredential", FakeCredential)
    connection = ServiceBusConnection(fully_qualified_namespace="bus.servicebus.windows.net", client_id="abc")

    t = ServiceBusTransport.from_connection(connection)

    assert calls == [{"managed_identity_client_id": "abc"}]
    assert t._client.fully_qualified_namespace == "bus.servicebus.windows.net"
    t.close()
