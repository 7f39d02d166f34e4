"""StorageQueueTransport details the contract suite does not cover, on a real Azurite: the wire format
the Functions queue trigger reads, lenient reading of foreign messages, limits and errors."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator

import pytest
from azure.core.credentials import AzureNamedKeyCredential
from azure.storage.queue import QueueClient

from workflow_core.settings import StorageConnection
from workflow_core.transport import OutgoingMessage, ReceivedMessage, TransportError
from workflow_core.transport.envelope import ENVELOPE_FORMAT, read_envelope
from workflow_core.transport.storage_queue import MAX_MESSAGE_BYTES, StorageQueueTransport

pytestmark = pytest.mark.timeout(60)

AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@pytest.fixture
def transport(azurite) -> Iterator[StorageQueueTransport]:
    t = StorageQueueTransport.from_connection_string(azurite.connection_string)
    yield t
    t.close()


@pytest.fixture
def queue(transport, unique_name) -> str:
    name = unique_name("sq")
    transport.ensure_queues(name)
    return name


def _raw_client(azurite, queue: str) -> QueueClient:
    """A plain client with no encoding policy: it sees the bytes as stored, like any other tool."""
    return QueueClient.from_connection_string(azurite.connection_string, queue)


def _message(**overrides) -> OutgoingMessage:
    fields = {
        "body": {"step": "ship", "n": 1},
        "message_id": f"work:{uuid.uuid4().hex}:ship:1",
        "correlation_id": "wf-1",
        "subject": "step.work",
        "application_properties": {"attempt": 1},
    }
    fields.update(overrides)
    return OutgoingMessage(**fields)


def _one(messages: list[ReceivedMessage]) -> ReceivedMessage:
    assert len(messages) == 1, messages
    return messages[0]


def test_stored_text_is_base64_of_the_envelope_as_the_functions_queue_trigger_expects(
    azurite, transport, queue
):
    sent = _message()
    transport.send(queue, sent)

    stored = _one(list(_raw_client(azurite, queue).peek_messages(max_messages=5))).content
    text = base64.b64decode(stored, validate=True).decode("utf-8")  # what the host hands the function
    doc = json.loads(text)

    assert doc == {
        "envelope": ENVELOPE_FORMAT,
        "message_id": sent.message_id,
        "correlation_id": "wf-1",
        "subject": "step.work",
        "application_properties": {"attempt": 1},
        "body": {"step": "ship", "n": 1},
    }
    parsed = read_envelope(text)  # how a queue-triggered function reads it
    assert (parsed.message_id, parsed.body, parsed.is_envelope) == (sent.message_id, sent.body, True)


@pytest.mark.parametrize(
    ("stored", "expected_body"),
    [
        ("plain text, not base64!", {"text": "plain text, not base64!"}),
        (base64.b64encode(b"hello").decode(), {"text": "hello"}),
        (base64.b64encode(b'{"order": 7}').decode(), {"order": 7}),
        ('{"order": 8}', {"order": 8}),  # JSON sent without base64
        (base64.b64encode(b"[1, 2]").decode(), {"value": [1, 2]}),
    ],
)
def test_foreign_messages_are_received_leniently(azurite, transport, queue, stored, expected_body):
    raw = _raw_client(azurite, queue)
    raw.send_message(stored)

    got = _one(transport.receive(queue))

    assert got.body == expected_body
    assert got.message_id == got.raw.id  # no envelope: the queue's own message id
    assert (got.correlation_id, got.subject, got.application_properties) == (None, None, {})
    transport.complete(got)


def test_message_the_functions_host_moved_to_the_poison_queue_has_no_reason(azurite, transport, queue):
    """The host moves a message that failed maxDequeueCount times to <queue>-poison unchanged."""
    sent = _message()
    transport.send(queue, sent)
    original = _one(list(_raw_client(azurite, queue).receive_messages()))
    _raw_client(azurite, f"{queue}-poison").send_message(original.content)  # what the host does

    dead = _one(transport.receive_dead_letters(queue))

    assert (dead.message_id, dead.body) == (sent.message_id, sent.body)
    assert dead.dead_letter_reason is None
    assert dead.queue == f"{queue}-poison"


def test_dead_letter_queue_name_can_be_overridden(azurite, unique_name):
    queue, dlq = unique_name("sq"), unique_name("dlq")
    with StorageQueueTransport.from_connection_string(
        azurite.connection_string, dead_letter_queues={queue: dlq}
    ) as t:
        t.ensure_queues(queue)
        t.send(queue, _message())
        t.dead_letter(_one(t.receive(queue)), "Bad", "")

        assert t.dead_letter_queue_for(queue) == dlq
        assert _one(list(_raw_client(azurite, dlq).peek_messages())) is not None
        assert t.dead_letter_queue_for("other") == "other-poison"


def test_dead_letter_creates_a_missing_poison_queue(azurite, transport, unique_name):
    queue = unique_name("sq")
    _raw_client(azurite, queue).create_queue()  # created by someone else, without its poison queue
    transport.send(queue, _message())

    transport.dead_letter(_one(transport.receive(queue)), "Bad", "why")

    assert _one(transport.receive_dead_letters(queue)).dead_letter_reason == "Bad"


def test_ensure_queues_is_idempotent_and_creates_the_poison_queue(azurite, transport, unique_name):
    queue = unique_name("sq")
    transport.ensure_queues(queue)
    transport.ensure_queues(queue)

    for name in (queue, f"{queue}-poison"):
        assert _raw_client(azurite, name).get_queue_properties().name == name


def test_oversized_message_is_refused_before_sending(azurite, transport, queue):
    big = _message(body={"blob": "x" * MAX_MESSAGE_BYTES})
    with pytest.raises(TransportError, match="limit is 65536"):
        transport.send(queue, big)
    assert list(_raw_client(azurite, queue).peek_messages()) == []


def test_sending_to_a_missing_queue_names_the_queue_and_the_fix(transport, unique_name):
    with pytest.raises(TransportError, match=r"'nosuch\w+' does not exist \(call ensure_queues\)"):
        transport.send(unique_name("nosuch"), _message())
    with pytest.raises(TransportError, match="does not exist"):
        transport.receive(unique_name("nosuch"))


def test_invalid_arguments_are_rejected(transport, queue):
    with pytest.raises(ValueError, match="lock_seconds"):
        transport.receive(queue, lock_seconds=0)
    with pytest.raises(ValueError, match="max_messages"):
        transport.receive(queue, max_messages=0)


def test_settling_a_message_from_another_transport_is_refused(transport):
    foreign = ReceivedMessage(body={}, message_id="x", delivery_count=1, queue="q", raw=object())
    with pytest.raises(TransportError, match="not received by a StorageQueueTransport"):
        transport.complete(foreign)


def test_a_sub_second_lock_still_locks(transport, queue):
    """Visibility timeouts are whole seconds (at least 1): 0.3 s is rounded up, never down to 0."""
    transport.send(queue, _message())
    got = _one(transport.receive(queue, lock_seconds=0.3))
    assert transport.receive(queue) == []
    transport.complete(got)


def test_more_than_32_messages_are_received_across_pages(transport, queue):
    for n in range(40):
        transport.send(queue, _message(body={"n": n}))
    got = transport.receive(queue, max_messages=40)
    assert sorted(m.body["n"] for m in got) == list(range(40))


def test_identity_based_construction_with_an_explicit_credential(azurite, unique_name):
    """The account-URI path, exercised against Azurite with its (public) shared key as the credential."""
    uri = f"http://127.0.0.1:{azurite.queue_port}/{AZURITE_ACCOUNT}"
    queue = unique_name("sq")
    connection = StorageConnection(queue_service_uri=uri, table_service_uri=uri)
    with StorageQueueTransport.from_connection(
        connection, credential=AzureNamedKeyCredential(AZURITE_ACCOUNT, AZURITE_KEY)
    ) as t:
        t.ensure_queues(queue)
        t.send(queue, _message(body={"via": "uri"}))
        assert _one(t.receive(queue)).body == {"via": "uri"}


def test_identity_connection_uses_default_credential_with_the_client_id(monkeypatch):
    calls = []

    class FakeCredential:
        def __init__(self, **kwargs):
            calls.append(kwargs)

        def get_token(self, *scopes, **kwargs):  # pragma: no cover - never reached: nothing connects
            raise AssertionError("no network in this test")

    monkeypatch.setattr("azure.identity.DefaultAzureCredential", FakeCredential)
    connection = StorageConnection(
        queue_service_uri="https://acct.queue.core.windows.net",
        table_service_uri="https://acct.table.core.windows.net",
        client_id="client-123",
    )

    StorageQueueTransport.from_connection(connection).close()

    assert calls == [{"managed_identity_client_id": "client-123"}]
