"""TransactionTableClient against the SDK's TableClient on the session's real Azurite.

Differential: the same transaction on twin tables, one through the SDK, one through the fast
client; the returned metadata, the written entities and, for failures, the exception (type,
status, error code, failing operation, message) and the untouched table must be the same.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from azure.core import MatchConditions
from azure.data.tables import EdmType, EntityProperty, TableClient, UpdateMode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.storage.support import EVERY_TYPE, entity
from workflow_core import storage_clients
from workflow_core.settings import StorageConnection
from workflow_core.table_transactions import TransactionTableClient


@pytest.fixture
def twins(azurite, unique_name):
    """(SDK TableClient, fast client from storage_clients.table_client) on twin tables."""
    storage = StorageConnection(connection_string=azurite.connection_string)
    names = unique_name("sdk"), unique_name("fast")
    service = storage_clients.table_service_client(storage)
    for name in names:
        service.create_table(name)
    endpoint = storage_clients._endpoint_from_connection_string(azurite.connection_string, "Table")
    sdk = TableClient.from_connection_string(
        azurite.connection_string, names[0], transport=storage_clients.storage_transport(endpoint)
    )
    fast = storage_clients.table_client(storage, names[1])
    assert type(fast) is TransactionTableClient
    yield sdk, fast
    for client, name in zip((sdk, fast), names, strict=True):
        client.close()
        service.delete_table(name)
    service.close()


def rows(client) -> dict[str, tuple[dict, str]]:
    return {e["RowKey"]: (dict(e), e.metadata["etag"]) for e in client.list_entities()}


def scrub(message: str) -> str:
    return re.sub(r"RequestId:\S+|Time:\S+", "", message)


Ops = Callable[[dict[str, str], dict[str, str]], list]  # (current etags, stale etags) -> operations


def run_twins(twins, existing: dict[str, dict], build: Ops):
    """Write ``existing`` twice (so each row has a stale ETag), run the transaction on both tables,
    and assert the same outcome; returns the SDK's (result, error)."""
    outcomes = []
    for client in twins:
        stale = {row: client.upsert_entity(entity(row, **p))["etag"] for row, p in existing.items()}
        current = {row: client.upsert_entity(entity(row, **p, v=2))["etag"] for row, p in existing.items()}
        before = rows(client)
        try:
            result, error = client.submit_transaction(build(current, stale)), None
        except Exception as exc:
            result, error = None, exc
        outcomes.append((result, error, before, rows(client)))
    (sdk_result, sdk_error, sdk_before, sdk_after), (result, error, before, after) = outcomes
    assert {r: e for r, (e, _) in sdk_after.items()} == {r: e for r, (e, _) in after.items()}
    if sdk_error is None:
        assert error is None, error
        assert [sorted(m) for m in sdk_result] == [sorted(m) for m in result]
        for metadata, operation in zip(result, build(current, stale), strict=True):
            if "etag" in metadata:  # the ETag the entity now has
                assert after[operation[1]["RowKey"]][1] == metadata["etag"]
            else:
                assert operation[0] == "delete" and operation[1]["RowKey"] not in after
        return sdk_result, None
    assert error is not None, "the fast client succeeded where the SDK failed"
    assert type(error) is type(sdk_error)
    fields = ("status_code", "error_code", "index", "additional_info")
    assert [getattr(error, f, None) for f in fields] == [getattr(sdk_error, f, None) for f in fields]
    assert scrub(error.message) == scrub(sdk_error.message)
    assert error.response.status_code == sdk_error.response.status_code
    assert error.response.request.method == sdk_error.response.request.method
    assert (sdk_after, after) == (sdk_before, before)  # nothing written
    return None, sdk_error


IF_MATCH = {"match_condition": MatchConditions.IfNotModified}
SUCCEEDING: dict[str, tuple[dict, Ops]] = {
    "create every type": ({}, lambda cur, old: [("create", entity("a", **EVERY_TYPE))]),
    "upsert merge and replace": (
        {"a": {"x": 1}, "b": {"y": 1}},
        lambda cur, old: [
            ("upsert", entity("a", **EVERY_TYPE)),
            ("upsert", entity("b", z=3), {"mode": UpdateMode.REPLACE}),
            ("upsert", entity("c", **EVERY_TYPE), {"mode": UpdateMode.REPLACE}),
        ],
    ),
    "update merge and replace, with and without If-Match": (
        {"a": {"x": 1}, "b": {"y": 1}, "c": {}, "d": {}},
        lambda cur, old: [
            ("update", entity("a", x=2), {"etag": cur["a"], **IF_MATCH}),
            ("update", entity("b", **EVERY_TYPE), {"mode": UpdateMode.REPLACE, "etag": cur["b"], **IF_MATCH}),
            ("update", entity("c", w=1)),
            ("update", entity("d", w=1), {"mode": UpdateMode.REPLACE}),
        ],
    ),
    "delete with and without ETag": (
        {"a": {}, "b": {}},
        lambda cur, old: [("delete", entity("a"), {"etag": cur["a"], **IF_MATCH}), ("delete", entity("b"))],
    ),
    "the ledger's shape: step update, audit row, instance": (
        {"step": {"Status": "Pending"}, "instance": {"Status": "Running"}},
        lambda cur, old: [
            (
                "update",
                entity("step", Status="Running"),
                {"mode": UpdateMode.REPLACE, "etag": cur["step"], **IF_MATCH},
            ),
            ("create", entity("~audit~1", Actor="worker", Reason="claim")),
            (
                "update",
                entity("instance", Steps=3),
                {"mode": UpdateMode.REPLACE, "etag": cur["instance"], **IF_MATCH},
            ),
        ],
    ),
    "a hundred operations": (
        {f"r{i:03d}": {"n": i} for i in range(0, 100, 2)},
        lambda cur, old: [
            ("delete", entity(f"r{i:03d}"))
            if i % 4 == 0
            else ("upsert", entity(f"r{i:03d}", n=-i, s="é" * i))
            for i in range(100)
        ],
    ),
}
FAILING: dict[str, tuple[dict, Ops, type, int, str, int]] = {
    "412 stale ETag": (
        {"a": {}},
        lambda cur, old: [("update", entity("a", x=1), {"etag": old["a"], **IF_MATCH})],
        412,
        "UpdateConditionNotSatisfied",
        0,
    ),
    "412 stale ETag on a delete": (
        {"a": {}},
        lambda cur, old: [("delete", entity("a"), {"etag": old["a"], **IF_MATCH})],
        412,
        "UpdateConditionNotSatisfied",
        0,
    ),
    "409 entity already exists": (
        {"a": {}},
        lambda cur, old: [("create", entity("a"))],
        409,
        "EntityAlreadyExists",
        0,
    ),
    "404 update of a missing entity": (
        {},
        lambda cur, old: [("update", entity("missing", x=1))],
        404,
        "ResourceNotFound",
        0,
    ),
    "failure on operation 2 of 3": (
        {"a": {}, "c": {}},
        lambda cur, old: [
            ("update", entity("a", x=1), {"etag": cur["a"], **IF_MATCH}),
            ("create", entity("b")),
            ("create", entity("c")),
        ],
        409,
        "EntityAlreadyExists",
        2,
    ),
    "duplicate row in one transaction": (
        {},
        lambda cur, old: [("upsert", entity("a")), ("upsert", entity("a"))],
        400,
        "InvalidDuplicateRow",
        1,
    ),
}


@pytest.mark.parametrize("name", SUCCEEDING)
def test_succeeding_transactions_match_the_sdk(twins, name):
    result, _ = run_twins(twins, *SUCCEEDING[name])
    assert result


@pytest.mark.parametrize("name", FAILING)
def test_failing_transactions_raise_what_the_sdk_raises(twins, name):
    existing, build, status, code, index = FAILING[name]
    _, error = run_twins(twins, existing, build)
    assert (type(error).__name__, error.status_code, error.error_code, error.index) == (
        "TableTransactionError",
        status,
        code,
        index,
    )


def test_a_transaction_too_large_raises_what_the_sdk_raises(twins):
    _, error = run_twins(twins, {}, lambda cur, old: [("upsert", entity("a", big="x" * 4_200_000))])
    assert (type(error).__name__, error.status_code) == ("RequestTooLargeError", 413)


def test_an_empty_transaction_ends_as_it_does_through_the_sdk(twins):
    """Azure answers 400 and both return []; Azurite answers 500: both raise the same error."""
    outcomes = []
    for client in twins:
        try:
            outcomes.append(client.submit_transaction([], retry_total=0))
        except Exception as error:
            outcomes.append((type(error), error.status_code, error.error_code))
    assert outcomes[0] == outcomes[1]


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)
_VALUE = st.one_of(
    _TEXT,
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**63), 2**63 - 1).map(lambda v: EntityProperty(v, EdmType.INT64)),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.datetimes(min_value=datetime(1601, 1, 2), timezones=st.just(UTC)),
    st.binary(max_size=64),
    st.uuids(),
    st.none(),
)
_counter = itertools.count()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(props=st.dictionaries(st.sampled_from([f"p{i}" for i in range(8)]), _VALUE, max_size=8))
def test_generated_entities_are_written_as_the_sdk_writes_them(twins, props):
    row = f"h{next(_counter)}"
    run_twins(
        twins,
        {"m": {"old": 1}},
        lambda cur, old: [
            ("create", entity(row, **props)),
            ("update", entity("m", **props), {"mode": UpdateMode.REPLACE, "etag": cur["m"], **IF_MATCH}),
            ("upsert", entity(f"{row}r", **props)),
        ],
    )
