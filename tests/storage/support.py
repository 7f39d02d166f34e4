"""What the table-transaction tests share: entities with every property type, the sub-requests the
SDK builds for a transaction, and the multipart request the SDK's ``_batch_send`` sets up."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from azure.core.credentials import AzureNamedKeyCredential
from azure.core.rest import HttpRequest
from azure.data.tables import EdmType, EntityProperty, TableClient
from azure.data.tables._table_batch import TableBatchOperations

DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
ENDPOINT = "http://127.0.0.1:10002/devstoreaccount1"
BATCH, CHANGESET = f"batch_{uuid.uuid4()}", f"changeset_{uuid.uuid4()}"

P = "inst-1"
EVERY_TYPE = {
    "s": "text",
    "i": -42,
    "i64": EntityProperty(2**40 + 1, EdmType.INT64),
    "f": 2.5,
    "b": False,
    "d": datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
    "bin": b"\x00\x01\xfebytes",
    "g": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "none": None,
    "u": 'h\u00e9llo \u4e2d\u6587 \U0001f600 "quoted" back\\slash\nnew line',
    "big": "\u00e9" * 30_000,
}


def entity(row: str, **props) -> dict:
    return {"PartitionKey": P, "RowKey": row, **props}


def sub_requests(operations) -> list[HttpRequest]:
    """The sub-requests submit_transaction builds (the SDK's TableBatchOperations)."""
    client = TableClient(ENDPOINT, "ledger", credential=AzureNamedKeyCredential("devstoreaccount1", DEV_KEY))
    batch = TableBatchOperations(
        config=client._client._config,
        endpoint=f"{client.scheme}://{client._primary_hostname}",
        table_name=client.table_name,
        is_cosmos_endpoint=client._cosmos_endpoint,
    )
    for operation in operations:
        batch.add_operation(operation)
    return batch.requests


def sdk_multipart(reqs) -> tuple[HttpRequest, HttpRequest]:
    """The outer request and changeset as the SDK's _batch_send sets them up (without policies)."""
    changeset = HttpRequest("POST", "")
    changeset.set_multipart_mixed(*reqs, policies=[], boundary=CHANGESET)
    outer = HttpRequest("POST", f"{ENDPOINT}/$batch", headers={"Content-Type": "application/json"})
    outer.set_multipart_mixed(changeset, policies=[], enforce_https=False, boundary=BATCH)
    return outer, changeset
