"""SubRequests builds, for every operation a transaction can hold, the request the SDK's
TableBatchOperations builds (method, URL, headers in order, body), or raises what it raises."""

from __future__ import annotations

import hashlib
import inspect
import string

import pytest
from azure.core import MatchConditions
from azure.core.credentials import AzureNamedKeyCredential
from azure.data.tables import TableClient, TableEntity, UpdateMode
from azure.data.tables._generated.operations import _operations
from azure.data.tables._table_batch import TableBatchOperations
from hypothesis import given
from hypothesis import strategies as st

from tests.storage.support import DEV_KEY, ENDPOINT, EVERY_TYPE, P, entity
from workflow_core.table_subrequests import SubRequests


def _build(cls, operations, table="ledger"):
    client = TableClient(ENDPOINT, table, credential=AzureNamedKeyCredential("devstoreaccount1", DEV_KEY))
    batch = cls(
        config=client._client._config,
        endpoint=f"{client.scheme}://{client._primary_hostname}",
        table_name=client.table_name,
        is_cosmos_endpoint=client._cosmos_endpoint,
    )
    try:
        for operation in operations:
            batch.add_operation(operation)
    except Exception as error:  # the error is what is compared
        return (type(error), str(error))
    return [(r.method, r.url, list(r.headers.items()), r.content) for r in batch.requests]


def _same(operations, table="ledger"):
    theirs = _build(TableBatchOperations, operations, table)
    assert _build(SubRequests, operations, table) == theirs
    return theirs


def test_the_sdk_builders_it_mirrors_are_the_pinned_ones():
    """If this fails, the SDK changed: re-check SubRequests against it (this file), then the pins."""
    pinned = {
        TableBatchOperations.create: "716754b81fb0d1cc",
        TableBatchOperations.update: "dc21ad81535d4d31",
        TableBatchOperations.upsert: "32a9e4ddfb0e862b",
        TableBatchOperations.delete: "967ffa8e9814fa48",
        _operations.build_table_insert_entity_request: "125bb8062cfcaa37",
        _operations.build_table_merge_entity_request: "c6dc5eef028ad1ff",
        _operations.build_table_update_entity_request: "96ea706c0322943d",
        _operations.build_table_delete_entity_request: "bf349aaf5eb09054",
    }
    for function, digest in pinned.items():
        source = inspect.getsource(function)
        assert hashlib.sha256(source.encode()).hexdigest()[:16] == digest, f"the SDK changed:\n{source}"


ETAG = "W/\"datetime'2026-01-02T03%3A04%3A05.1234567Z'\""
ROW = entity("r'1 /é#?%", **EVERY_TYPE)
READ = TableEntity(entity("read", s="x"))
READ._metadata = {"etag": ETAG}


@pytest.mark.parametrize(
    "operation",
    [
        ("create", ROW),
        ("CREATE", ROW),
        ("update", ROW),
        ("update", ROW, {"mode": UpdateMode.REPLACE}),
        ("update", ROW, {"mode": "merge", "etag": ETAG, "match_condition": MatchConditions.IfNotModified}),
        ("update", ROW, {"mode": "replace", "etag": ETAG, "match_condition": MatchConditions.IfNotModified}),
        ("update", ROW, {"etag": '"unquoted-then-quoted"', "match_condition": MatchConditions.IfNotModified}),
        ("update", ROW, {"etag": "bare", "match_condition": MatchConditions.IfNotModified}),
        ("update", ROW, {"match_condition": MatchConditions.IfNotModified}),
        ("update", ROW, {"etag": ETAG}),
        ("update", ROW, {"match_condition": MatchConditions.IfMissing}),
        ("update", ROW, {"mode": "bogus"}),
        ("update", READ, {"match_condition": MatchConditions.IfNotModified}),
        ("upsert", ROW),
        ("upsert", ROW, {"mode": UpdateMode.REPLACE}),
        ("upsert", ROW, {"etag": ETAG}),
        ("delete", ROW),
        ("delete", ROW, {"etag": ETAG, "match_condition": MatchConditions.IfNotModified}),
        ("delete", READ, {"match_condition": MatchConditions.IfNotModified}),
        ("delete", ROW, {"mode": UpdateMode.MERGE}),
        ("delete", {"PartitionKey": P}),
        ("create", {"RowKey": "r"}),
        ("create", entity("r", bad=object())),
        ("create", entity("r"), {"timeout": 5}),
        ("update", {"PartitionKey": 1, "RowKey": "r"}),
        ("create", "not an entity"),
        ("merge", ROW),
    ],
)
def test_each_shape_is_the_sdks_request(operation):
    _same([operation])


def test_a_batch_of_several_and_a_second_partition():
    assert len(_same([("create", ROW), ("update", entity("s")), ("delete", entity("t"))])) == 3
    assert _same([("create", ROW), ("create", {"PartitionKey": "other", "RowKey": "r"})])[0] is ValueError
    _same([("create", ROW)], table="odd table'name")


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_VALUE = st.one_of(st.none(), st.booleans(), st.integers(-(2**31), 2**31 - 1), st.floats(), _TEXT)
_ETAG = st.one_of(st.none(), st.just(ETAG), st.text(string.printable, min_size=1, max_size=8))
_CONDITION = st.one_of(st.none(), st.sampled_from(MatchConditions))


@given(
    st.sampled_from(["create", "update", "upsert", "delete"]),
    _TEXT,
    _TEXT,
    st.dictionaries(st.text(string.ascii_letters, min_size=1, max_size=6), _VALUE, max_size=4),
    st.sampled_from([None, UpdateMode.MERGE, UpdateMode.REPLACE, "merge", "replace"]),
    _ETAG,
    _CONDITION,
)
def test_any_operation_is_the_sdks_request(kind, pk, rk, props, mode, etag, condition):
    kwargs = {
        k: v for k, v in (("mode", mode), ("etag", etag), ("match_condition", condition)) if v is not None
    }
    _same([(kind, {**props, "PartitionKey": pk, "RowKey": rk}, kwargs)])
