"""The $batch encoder of workflow_core.table_transactions against azure-core's own (email-based) one,
and the pin on the private SDK method the client overrides.

No network: the SDK's ``TableBatchOperations`` builds the sub-requests; azure-core encodes them with
``set_multipart_mixed`` + the pipeline's multipart preparation. The codec must write the same bytes
and refuse what azure-core refuses, with the same errors.
"""

from __future__ import annotations

import hashlib
import inspect
import uuid
from datetime import UTC, datetime

import azure.core
import azure.data.tables
import pytest
from azure.core import MatchConditions
from azure.core.pipeline import Pipeline
from azure.core.pipeline.transport import RequestsTransport
from azure.core.rest import HttpRequest
from azure.data.tables import EdmType, EntityProperty, TableClient, TableServiceClient, UpdateMode
from azure.data.tables._base_client import TablesBaseClient, extract_batch_part_metadata

from tests.storage.support import BATCH, CHANGESET, ENDPOINT, sdk_multipart, sub_requests
from workflow_core.table_transactions import TransactionTableClient, encode_transaction

ETAG = "W/\"datetime'2026-01-02T03%3A04%3A05.1234567Z'\""


# ---- the pin -------------------------------------------------------------------------------------


def test_the_private_sdk_method_the_client_overrides_is_the_pinned_one():
    """TransactionTableClient replaces TablesBaseClient._batch_send of azure-data-tables 12.7.0 /
    azure-core 1.41.0. If this fails, the SDK changed under the override: re-check the codec's
    parity (tests/storage: the encoding, decoding, differential and wiring tests), then the pins."""
    assert (azure.data.tables.__version__, azure.core.__version__) == ("12.7.0", "1.41.0")
    expected = [
        ("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        ("table_name", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        ("reqs", inspect.Parameter.VAR_POSITIONAL),
        ("kwargs", inspect.Parameter.VAR_KEYWORD),
    ]
    for method in (TablesBaseClient._batch_send, TransactionTableClient._batch_send):
        assert [(p.name, p.kind) for p in inspect.signature(method).parameters.values()] == expected
    assert "self._batch_send(self.table_name, *batched_requests.requests, **kwargs)" in inspect.getsource(
        TableClient.submit_transaction
    )
    pinned = {  # what the override replaces, and what storage_clients.transaction_table_client mirrors
        TablesBaseClient._batch_send: "0ada8524fa600705",
        extract_batch_part_metadata: "0c44ee07d828c200",
        TableServiceClient.get_table_client: "1cf6abb883686254",
        # what TransactionTableClient.submit_transaction and table_subrequests.SubRequests mirror
        TableClient.submit_transaction: "8333c3c4d9d81679",
    }
    for function, digest in pinned.items():
        source = inspect.getsource(function)
        assert hashlib.sha256(source.encode()).hexdigest()[:16] == digest, f"the SDK changed:\n{source}"


# ---- encoding ------------------------------------------------------------------------------------


def sdk_encoded(reqs) -> bytes:
    outer, _ = sdk_multipart(reqs)
    Pipeline(RequestsTransport())._prepare_multipart(outer)
    return outer.content


KEY = {"PartitionKey": "p", "RowKey": "r"}
EVERY_TYPE = {
    **KEY,
    "s": "text",
    "i": 42,
    "i64": EntityProperty(2**40, EdmType.INT64),
    "f": 1.5,
    "b": True,
    "d": datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
    "bin": b"\x00\xffbytes",
    "g": uuid.UUID(int=7),
    "none": None,
    "u": "h\u00e9llo \u4e2d\u6587 \U0001f600 \n\r\t\"'\\",
    "big": "x" * 32_000,
}
IF_MATCH = {"etag": ETAG, "match_condition": MatchConditions.IfNotModified}
OPERATION_SETS = {
    "create": [("create", EVERY_TYPE)],
    "upsert merge": [("upsert", EVERY_TYPE)],
    "upsert replace": [("upsert", EVERY_TYPE, {"mode": UpdateMode.REPLACE})],
    "update merge if-match": [("update", EVERY_TYPE, IF_MATCH)],
    "update replace if-match": [("update", EVERY_TYPE, {"mode": UpdateMode.REPLACE, **IF_MATCH})],
    "update unconditional": [("update", {**KEY, "x": 1})],
    "delete": [("delete", KEY)],
    "delete if-match": [("delete", KEY, IF_MATCH)],
    "keys to quote": [("upsert", {"PartitionKey": "a'b c/é", "RowKey": "#?%&"})],
    "three mixed": [
        ("update", {**KEY, "x": 1}, IF_MATCH),
        ("create", {**KEY, "RowKey": "a"}),
        ("delete", {**KEY, "RowKey": "z"}),
    ],
    "hundred": [("upsert", {**KEY, "RowKey": f"r{i:03d}", "n": i}) for i in range(100)],
    "empty": [],
}


@pytest.mark.parametrize("name", OPERATION_SETS)
def test_the_body_is_byte_for_byte_what_azure_core_writes(name):
    reqs = sub_requests(OPERATION_SETS[name])
    for request in reqs:  # what StorageHeadersPolicy stamps
        request.headers["x-ms-date"] = request.headers["Date"] = "Fri, 02 Jan 2026 03:04:05 GMT"
    assert encode_transaction(reqs, BATCH, CHANGESET) == sdk_encoded(reqs)


ODD_REQUESTS = {
    "bare line breaks in the body": [HttpRequest("POST", f"{ENDPOINT}/t", content=b"a\nb\rc\r\nd\n")],
    "str body, trailing LF": [HttpRequest("POST", f"{ENDPOINT}/t", content="a\nb\n")],
    "dropped and kept headers": [
        HttpRequest("DELETE", f"{ENDPOINT}/t", headers={"Host": "h", "Accept-Encoding": "gzip", "X-Int": 5})
    ],
    "lower-case host is kept": [HttpRequest("GET", f"{ENDPOINT}/t", headers={"host": "h"})],
    "no body: PUT gets Content-Length 0, GET none": [
        HttpRequest("PUT", f"{ENDPOINT}/t"),
        HttpRequest("GET", ""),
    ],
    "empty bytes body": [HttpRequest("PATCH", f"{ENDPOINT}/t", content=b"")],
    "a blank inside a header name": [HttpRequest("GET", f"{ENDPOINT}/t", headers={"Odd Name": "v"})],
    "bool and int header values": [HttpRequest("GET", f"{ENDPOINT}/t", headers={"X-B": True, "X-I": 7})],
    "bytes header value": [HttpRequest("GET", f"{ENDPOINT}/t", headers={"X": b"v"})],
    "explicit content length": [
        HttpRequest("POST", f"{ENDPOINT}/t", headers={"Content-Length": "3"}, content=b"abc")
    ],
}


@pytest.mark.parametrize("name", ODD_REQUESTS)
def test_odd_requests_are_encoded_as_azure_core_encodes_them(name):
    reqs = ODD_REQUESTS[name]
    assert encode_transaction(reqs, BATCH, CHANGESET) == sdk_encoded(reqs)


@pytest.mark.parametrize(
    "request_",
    [
        HttpRequest("GET", f"{ENDPOINT}/t", headers={"X": "a\r\nInjected: 1"}),
        HttpRequest("GET", f"{ENDPOINT}/t", headers={" Bad": "v"}),
        HttpRequest("GET", f"{ENDPOINT}/t", headers={"Bad:Name": "v"}),
        HttpRequest("GET", f"{ENDPOINT}/t bad"),
        HttpRequest("GET", f"{ENDPOINT}/t", headers={"X": "caf\u00e9"}),
        HttpRequest("POST", f"{ENDPOINT}/t", content="\u4e2d"),
        HttpRequest("POST", f"{ENDPOINT}/t", content=b"\xff"),
    ],
)
def test_what_azure_core_refuses_is_refused_with_the_same_error(request_):
    with pytest.raises(Exception) as sdk_error:
        sdk_encoded([request_])
    with pytest.raises(type(sdk_error.value)) as ours:
        encode_transaction([request_], BATCH, CHANGESET)
    if isinstance(sdk_error.value, ValueError) and not isinstance(sdk_error.value, UnicodeError):
        assert str(ours.value) == str(sdk_error.value)


def test_a_body_it_does_not_handle_is_left_to_the_sdk():
    assert (
        encode_transaction([HttpRequest("POST", f"{ENDPOINT}/t", content=iter([b"a"]))], BATCH, CHANGESET)
        is None
    )
