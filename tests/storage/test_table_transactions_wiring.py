"""How TransactionTableClient is built and what it sends: one request per transaction, through the
client's own pipeline (SharedKey on Azurite, a bearer token for identity clients), byte for byte
the SDK's request; storage_clients builds it for a table and for a TableServiceClient."""

from __future__ import annotations

import time
import uuid

import pytest
from azure.core.credentials import AccessToken
from azure.core.pipeline.transport import HttpTransport
from azure.data.tables import TableClient, UpdateMode

from tests.helpers.request_counter import RequestCounter
from tests.storage.support import EVERY_TYPE, entity
from workflow_core import storage_clients
from workflow_core.settings import StorageConnection
from workflow_core.table_transactions import TransactionTableClient, sdk_part_response


def test_one_http_request_per_transaction(azurite, unique_name):
    with RequestCounter() as counter:
        storage = StorageConnection(connection_string=azurite.connection_string)
        name = unique_name("count")
        client = storage_clients.table_client(storage, name)
        client.create_table()
        for size in (1, 3, 100):
            with counter.measure() as made:
                client.submit_transaction([("upsert", entity(f"r{i}")) for i in range(size)])
            assert [(r.op, r.batch_size, r.status) for r in made] == [("batch", size, 202)]
        with counter.measure() as made, pytest.raises(Exception, match="EntityAlreadyExists"):
            client.submit_transaction([("upsert", entity("n")), ("create", entity("r0"))])
        assert [(r.op, r.batch_size) for r in made] == [("batch", 2)]
        client.delete_table()
        client.close()


def test_the_request_is_byte_for_byte_the_sdks(azurite, unique_name, monkeypatch):
    """Same clock, same boundaries, same request id: the same request, Authorization included."""
    sent: list = []

    class Recorder(HttpTransport):
        def __init__(self, inner):
            self.inner = inner

        def send(self, request, **kwargs):
            sent.append((request.method, request.url, list(request.headers.items()), request.content))
            return self.inner.send(request, **kwargs)

        def open(self):
            self.inner.open()

        def close(self):
            self.inner.close()

        def __exit__(self, *args):
            self.inner.__exit__(*args)

    monkeypatch.setattr(
        "azure.data.tables._policies.format_date_time", lambda _: "Fri, 02 Jan 2026 03:04:05 GMT"
    )
    storage_clients.add_transport_hook(Recorder)
    try:
        storage = StorageConnection(connection_string=azurite.connection_string)
        name = unique_name("bytes")
        endpoint = storage_clients._endpoint_from_connection_string(azurite.connection_string, "Table")
        sdk = TableClient.from_connection_string(
            azurite.connection_string, name, transport=storage_clients.storage_transport(endpoint)
        )
        fast = storage_clients.table_client(storage, name)
    finally:
        storage_clients.remove_transport_hook(Recorder)
    sdk.create_table()
    operations = [
        ("upsert", entity("a", **EVERY_TYPE)),
        ("upsert", entity("b", x=1), {"mode": UpdateMode.REPLACE}),
        ("upsert", entity("c", y="z")),
    ]
    for client, module in (
        (sdk, "azure.data.tables._base_client"),
        (fast, "workflow_core.table_transactions"),
    ):
        fixed = iter([uuid.UUID(int=1), uuid.UUID(int=2)])
        monkeypatch.setattr(f"{module}.uuid4", lambda fixed=fixed: next(fixed))
        sent.clear()
        client.submit_transaction(operations, request_id="00000000-0000-0000-0000-00000000000a")
        if client is sdk:
            expected = list(sent)
    assert sent == expected
    sdk.delete_table()
    for client in (sdk, fast):
        client.close()


def test_identity_clients_send_one_bearer_authenticated_request_through_their_pipeline(monkeypatch):
    sent = []
    changeset = b"--c\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n"
    body = (
        b"--b\r\nContent-Type: multipart/mixed; boundary=c\r\n\r\n"
        + changeset
        + b'HTTP/1.1 204 No Content\r\nETag: W/"1"\r\n\r\n\r\n'
        + changeset
        + b"HTTP/1.1 204 No Content\r\n\r\n\r\n--c--\r\n--b--\r\n"
    )
    head = b"HTTP/1.1 202 Accepted\r\nContent-Type: multipart/mixed; boundary=b\r\nContent-Length: %d\r\n\r\n"

    class Azure(HttpTransport):
        def send(self, request, **kwargs):
            sent.append(request)
            return sdk_part_response(head % len(body) + body, request)

        def open(self): ...

        def close(self): ...

        def __exit__(self, *args): ...

    class Credential:
        def get_token(self, *scopes, **kwargs):
            return AccessToken("token-1", int(time.time()) + 3600)

    storage = StorageConnection(table_service_uri="https://acct.table.core.windows.net", client_id="id-1")

    def fake(inner):
        return Azure()

    storage_clients.add_transport_hook(fake)
    try:
        direct = storage_clients.table_client(storage, "ledger", credential=Credential())
        service = storage_clients.table_service_client(storage, credential=Credential())
        shared = storage_clients.transaction_table_client(service, "ledger")
    finally:
        storage_clients.remove_transport_hook(fake)
    for client in (direct, shared):
        assert type(client) is TransactionTableClient
        sent.clear()
        result = client.submit_transaction([("upsert", entity("a")), ("delete", entity("b"))])
        assert result == [{"etag": 'W/"1"'}, {}]
        assert [(r.method, r.url, r.headers["Authorization"]) for r in sent] == [
            ("POST", "https://acct.table.core.windows.net/$batch", "Bearer token-1")
        ]
        assert (
            b"PATCH https://acct.table.core.windows.net/ledger(PartitionKey='inst-1',RowKey='a')"
            in sent[0].content
        )
    shared.close()
    service.close()


def test_a_client_from_a_service_client_shares_its_transport(azurite, unique_name):
    with RequestCounter() as counter:
        storage = StorageConnection(connection_string=azurite.connection_string)
        service = storage_clients.table_service_client(storage)
        name = unique_name("shared")
        service.create_table(name)
        client = storage_clients.transaction_table_client(service, name)
        with counter.measure() as made:
            assert client.submit_transaction([("upsert", entity("a")), ("upsert", entity("b"))])[0]["etag"]
        assert [(r.op, r.batch_size) for r in made] == [("batch", 2)]
        client.close()  # the service's transport stays open
        service.delete_table(name)
        service.close()
