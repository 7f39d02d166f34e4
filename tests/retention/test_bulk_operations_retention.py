"""Retention of bulk operations (real Azurite): a finished operation older than RETENTION_DAYS goes
with its outcome rows and its idempotency keys (a reused key is free again); unfinished and recent
ones stay; a crash midway is finished by the next tick; the requests per deleted operation are pinned
(docs/capacity.md, "Retention and bulk operations")."""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta

import pytest

from supervisor.maintenance import bulk
from supervisor.maintenance.bulk import KEYS_PARTITION
from supervisor.maintenance.retention import BulkRetention
from tests.helpers.request_counter import RequestCounter
from workflow_core import clock
from workflow_core.ledger import StepLedger
from workflow_core.ledger.idempotency import (
    KEY_INDEX_PARTITION,
    IdempotencyKeys,
    key_index_row,
)

LATER = timedelta(days=31)  # Azurite stamps rows with the real time: the tick runs "31 days later"


def make_op(ledger: StepLedger, *, outcomes: int, key: str | None, done: bool = True) -> bulk.BulkOperation:
    store = bulk.BulkStore(ledger)
    if key is not None:
        assert (
            IdempotencyKeys(ledger).claim_or_replay(KEYS_PARTITION, key, f"bulk retry {key}", "operator:ana")
            is None
        )
    op = store.create("retry", bulk.BulkFilter(workflow="w"), reason="outage over", actor="operator:ana")
    store.rows.freeze(op.bulk_id, [f"inst-{n:04d}" for n in range(outcomes)])
    op.done = done
    store.save(op)
    if key is not None:
        IdempotencyKeys(ledger).record_answer(KEYS_PARTITION, key, 202, json.dumps(store.progress(op)))
    return op


def rows(ledger: StepLedger, partition: str) -> list:
    return list(ledger.table_client().query_entities("PartitionKey eq @p", parameters={"p": partition}))


def index_row(ledger: StepLedger, key: str):
    found = ledger._index.query_entities(
        "PartitionKey eq @p and RowKey eq @r", parameters={"p": KEY_INDEX_PARTITION, "r": key_index_row(key)}
    )
    return next(iter(found), None)


def test_old_finished_op_goes_with_its_keys_others_stay(ledger):
    old = make_op(ledger, outcomes=130, key="k-old")
    running = make_op(ledger, outcomes=3, key="k-run", done=False)
    report = BulkRetention(ledger, retention_days=30).run(clock.utcnow() + LATER)
    assert report.deleted == [old.bulk_id] and not report.failed
    store = bulk.BulkStore(ledger)
    assert store.get(old.bulk_id) is None and rows(ledger, f"~bulk~{old.bulk_id}") == []
    assert index_row(ledger, "k-old") is None
    assert [r["RowKey"] for r in rows(ledger, KEYS_PARTITION)] == ["~idem~k-run"]
    # the key is free again: another request may claim it
    assert (
        IdempotencyKeys(ledger).claim_or_replay(KEYS_PARTITION, "k-old", "bulk skip other", "operator:bo")
        is None
    )
    # the unfinished one is untouched, even long after
    assert store.get(running.bulk_id) is not None and len(store.rows.instance_rows(running.bulk_id)) == 3
    assert index_row(ledger, "k-run") is not None
    assert BulkRetention(ledger, retention_days=30).run(clock.utcnow() + 10 * LATER).deleted == []


def test_recent_finished_op_stays(ledger):
    op = make_op(ledger, outcomes=2, key="k-new")
    assert BulkRetention(ledger, retention_days=30).run(clock.utcnow() + timedelta(days=29)).deleted == []
    assert bulk.BulkStore(ledger).get(op.bulk_id) is not None and index_row(ledger, "k-new") is not None


class Crash(Exception):
    pass


@pytest.mark.parametrize("nth", [1, 2, 3, 4, 5])
def test_crash_midway_is_finished_next_tick(ledger, nth):
    op = make_op(ledger, outcomes=150, key="k-crash")  # index + key row, 2 row batches, op row
    retention = BulkRetention(ledger, retention_days=30)
    calls = {"n": 0}
    table = retention.rows.table
    real_submit, real_delete = table.submit_transaction, table.delete_entity
    real_index_delete, real_key_delete = ledger._index.delete_entity, ledger._steps.delete_entity

    def counted(real):
        def call(*a, **kw):
            calls["n"] += 1
            if calls["n"] == nth:
                raise Crash(f"delete {nth}")
            return real(*a, **kw)

        return call

    table.submit_transaction = counted(real_submit)
    table.delete_entity = counted(real_delete)
    ledger._index.delete_entity = counted(real_index_delete)
    ledger._steps.delete_entity = counted(real_key_delete)
    now = clock.utcnow() + LATER
    first = retention.run(now)
    assert op.bulk_id in first.failed and first.deleted == []
    assert bulk.BulkStore(ledger).get(op.bulk_id) is not None  # the operation row goes last
    second = retention.run(now)
    assert second.deleted == [op.bulk_id]
    assert bulk.BulkStore(ledger).get(op.bulk_id) is None and rows(ledger, f"~bulk~{op.bulk_id}") == []
    assert rows(ledger, KEYS_PARTITION) == [] and index_row(ledger, "k-crash") is None


def test_requests_per_deleted_operation(azurite, unique_name):
    with RequestCounter() as counter:
        led = StepLedger.from_connection_string(azurite.connection_string, unique_name("s"), unique_name("i"))
        led.create_tables()
        for n in range(3):
            make_op(led, outcomes=40, key=f"k-{n}")
        with counter.measure() as made:
            report = BulkRetention(led, retention_days=30).run(clock.utcnow() + LATER)
        assert len(report.deleted) == 3
        ops = Counter(f"{r.service} {r.op}" for r in made)
        # per tick: the operations query and the keys query; per operation (<=100 outcomes, one key):
        # outcomes query, one transaction, the index row's read and delete, the key row, the op row
        assert ops == {"table query": 2 + 3, "table batch": 3, "table read": 3, "table delete": 3 * 3}
        assert (sum(ops.values()) - 2) / 3 == 6
        led.close()
