"""create_transport picks the adapter AGENT_TRANSPORT names, built from the same settings the app reads."""

from __future__ import annotations

import dataclasses

import pytest

from workflow_core.settings import TransportKind, load_settings
from workflow_core.transport import OutgoingMessage, TransportError, create_transport
from workflow_core.transport.servicebus import ServiceBusTransport
from workflow_core.transport.storage_queue import StorageQueueTransport


def test_storage_queue_transport_from_azurite_settings(azurite, unique_name):
    env = {"AzureWebJobsStorage": azurite.connection_string, "AGENT_TRANSPORT": "storage-queue"}
    settings = load_settings(env)

    with create_transport(settings) as transport:
        assert isinstance(transport, StorageQueueTransport)
        assert transport.dead_letter_queue_for(settings.work_queue) == settings.dead_letter_queue
        queue = unique_name("fq")
        transport.ensure_queues(queue)
        transport.send(queue, OutgoingMessage(body={"ok": True}, message_id="m1"))
        [got] = transport.receive(queue)
        assert got.body == {"ok": True}


def test_dead_letter_queue_setting_is_honoured(azurite):
    env = {
        "AzureWebJobsStorage": azurite.connection_string,
        "AGENT_TRANSPORT": "storage-queue",
        "WORK_QUEUE_NAME": "jobs",
        "DEAD_LETTER_QUEUE_NAME": "jobs-dead",
    }
    with create_transport(load_settings(env)) as transport:
        assert transport.dead_letter_queue_for("jobs") == "jobs-dead"
        assert transport.dead_letter_queue_for("agent-results") == "agent-results-poison"


def test_service_bus_transport_from_a_connection_string(azurite):
    env = {
        "AzureWebJobsStorage": azurite.connection_string,
        "AGENT_TRANSPORT": "servicebus",
        "ServiceBusConnection": (
            "Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;"
            "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
        ),
    }
    transport = create_transport(load_settings(env))  # constructing does not connect
    assert isinstance(transport, ServiceBusTransport)
    transport.close()


def test_service_bus_transport_from_a_namespace_and_managed_identity(azurite, monkeypatch):
    calls = []

    class FakeCredential:
        def __init__(self, **kwargs):
            calls.append(kwargs)

        def get_token(self, *scopes, **kwargs):  # pragma: no cover - never reached: nothing connects
            raise AssertionError("no network in this test")

    monkeypatch.setattr("azure.identity.DefaultAzureCredential", FakeCredential)
    env = {
        "AzureWebJobsStorage": azurite.connection_string,
        "AGENT_TRANSPORT": "servicebus",
        "ServiceBusConnection__fullyQualifiedNamespace": "bus.servicebus.windows.net",
        "ServiceBusConnection__clientId": "mi-client",
    }

    transport = create_transport(load_settings(env))

    assert isinstance(transport, ServiceBusTransport)
    assert calls == [{"managed_identity_client_id": "mi-client"}]
    transport.close()


def test_service_bus_without_a_connection_is_a_clear_error(azurite):
    settings = load_settings(
        {"AzureWebJobsStorage": azurite.connection_string, "AGENT_TRANSPORT": "storage-queue"}
    )
    broken = dataclasses.replace(settings, transport=TransportKind.SERVICE_BUS, service_bus=None)
    with pytest.raises(TransportError, match="no Service Bus connection"):
        create_transport(broken)


def test_the_ledger_may_live_on_its_own_storage_account():
    from workflow_core.settings import load_settings

    base = {"AzureWebJobsStorage": "UseDevelopmentStorage=true", "AGENT_TRANSPORT": "storage-queue"}
    shared = load_settings(base)
    assert shared.ledger_storage is None and shared.ledger_connection == shared.storage

    own = load_settings(
        {**base, "LedgerStorage__accountName": "ledgeracct", "LedgerStorage__clientId": "id1"}
    )
    assert own.ledger_connection.table_service_uri == "https://ledgeracct.table.core.windows.net"
    assert own.ledger_connection.client_id == "id1"
    assert own.storage.connection_string is not None  # the task hub and queues stay where they were

    conn = load_settings({**base, "LedgerStorage": "UseDevelopmentStorage=true"})
    assert "devstoreaccount1" in (conn.ledger_connection.connection_string or "")


@pytest.mark.parametrize(("length", "valid"), [(46, True), (47, False), (55, False)])
def test_a_result_queue_name_leaves_room_for_answer_queues(length, valid):
    """An agent's answer queue is ``<RESULT_QUEUE_NAME>-answers-`` and up to 8 characters of its own
    (the Node example's 8 hex): a longer result queue name would leave it no valid name."""
    from workflow_core.settings import SettingsError

    name = ("r" * length)[: length - 2] + "-q"
    env = {"AzureWebJobsStorage": "UseDevelopmentStorage=true", "AGENT_TRANSPORT": "storage-queue"}
    env["RESULT_QUEUE_NAME"] = name
    if valid:
        assert len(f"{load_settings(env).result_queue}-answers-{'0' * 8}") == 63
        return
    with pytest.raises(SettingsError, match=r"RESULT_QUEUE_NAME=.*3-46 .*answer queues"):
        load_settings(env)
