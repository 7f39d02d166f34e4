"""The deadline index is sharded: one minute's deadlines spread over many partitions, and
``overdue(now)`` still reads only the overdue rows (counted entity by entity, on Azurite)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from azure.core import MatchConditions

from workflow_core.ledger import NewStep, StepLedger, StepStatus
from workflow_core.ledger.index_keys import INDEX_SHARDS, index_partition, minute_bucket

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
STEPS = 60


def _dispatch_all(ledger: StepLedger, instance: str, deadlines: dict[str, datetime]) -> None:
    ledger.create_steps(
        instance, "bulk", [NewStep(step_id=s, step_name=s, agent="x.do") for s in deadlines], actor="test"
    )
    for record in ledger.list_for_instance(instance):
        ledger.transition(
            record, StepStatus.DISPATCHED, actor="scheduler", deadline=deadlines[record.step_id], attempt=1
        )


def test_one_minutes_deadlines_spread_over_shards_and_overdue_reads_only_overdue_rows(ledger: StepLedger):
    # 60 steps due within one minute (one every second), plus 10 due in the next minute
    deadlines = {f"s{i:02d}": T0 + timedelta(seconds=i) for i in range(STEPS)}
    deadlines |= {f"n{i:02d}": T0 + timedelta(minutes=1, seconds=i) for i in range(10)}
    _dispatch_all(ledger, "wf-shards", deadlines)

    rows = ledger.index_rows()
    this_minute = [r for r in rows if r["PartitionKey"].startswith(minute_bucket(T0))]
    partitions = Counter(r["PartitionKey"] for r in this_minute)
    assert len(this_minute) == STEPS
    assert len(partitions) >= INDEX_SHARDS // 2, partitions  # not one hot partition per minute
    assert max(partitions.values()) <= STEPS // 4
    assert all(r["PartitionKey"] == index_partition(T0, "wf-shards", r["StepId"]) for r in this_minute)

    now = T0 + timedelta(seconds=29, microseconds=500_000)  # s00..s29 are due, s30..s59 are not
    ledger.stats.reset()
    found = ledger.overdue(now, limit=1000)
    assert [r.step_id for r in found] == [f"s{i:02d}" for i in range(30)]  # earliest first
    # every shard of the current minute is in range, yet only the due rows are read
    assert ledger.stats.queries == 1
    assert ledger.stats.index_entities_read == 30
    assert ledger.stats.step_entities_read == 30

    ledger.stats.reset()
    assert ledger.overdue(T0 - timedelta(microseconds=1)) == []
    assert ledger.stats.index_entities_read == 0


def test_rows_written_before_sharding_are_still_found(ledger: StepLedger):
    """A row in an unsharded bucket (``YYYYMMDDHHMM``) sorts before that bucket's shards: still read."""
    _dispatch_all(ledger, "wf-old", {"a": T0 + timedelta(hours=1)})
    record = ledger.get("wf-old", "a")
    old_key = (minute_bucket(T0), f"{T0:%Y%m%dT%H%M%S.%fZ}~legacy")
    ledger._index.create_entity(
        {"PartitionKey": old_key[0], "RowKey": old_key[1], "InstanceId": "wf-old", "StepId": "a"}
    )
    ledger._steps.update_entity(
        {"PartitionKey": "wf-old", "RowKey": "a", "IndexKey": f"{old_key[0]}|{old_key[1]}", "Deadline": T0},
        etag=record.etag,
        match_condition=MatchConditions.IfNotModified,
    )
    assert [r.step_id for r in ledger.overdue(T0)] == ["a"]


def _same_shard_steps(instance: str, count: int) -> list[str]:
    by_shard: dict[str, list[str]] = {}
    for n in range(1000):
        step = f"x{n:03d}"
        by_shard.setdefault(index_partition(T0, instance, step), []).append(step)
        if len(by_shard[index_partition(T0, instance, step)]) == count:
            return by_shard[index_partition(T0, instance, step)]
    raise AssertionError("no shard got enough steps")


class _CountingIndex:
    """The index table client, counting entity-group transactions and single deletes."""

    def __init__(self, inner):
        self.inner, self.batches, self.deletes = inner, [], 0

    def submit_transaction(self, operations, **kwargs):
        self.batches.append([op[0] for op in operations])
        return self.inner.submit_transaction(operations, **kwargs)

    def delete_entity(self, *args, **kwargs):
        self.deletes += 1
        return self.inner.delete_entity(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_retired_index_rows_are_deleted_in_one_batch_per_partition(ledger: StepLedger):
    steps = _same_shard_steps("wf-retire", 3)
    _dispatch_all(ledger, "wf-retire", dict.fromkeys(steps, T0))
    counting = _CountingIndex(ledger._index)
    ledger._index = counting
    with ledger.deferred_index_deletes() as pending:
        for record in ledger.list_for_instance("wf-retire"):
            ledger.transition(record, StepStatus.RUNNING, actor="w", deadline=T0 + timedelta(hours=1))
        assert len(pending) == 3 and counting.batches == [] and counting.deletes == 0  # not yet
    assert counting.batches == [["delete"] * 3] and counting.deletes == 0  # one request for three rows
    live = {r.index_key for r in ledger.list_for_instance("wf-retire")}
    assert {r["_key"] for r in ledger.index_rows()} == live


def test_a_batch_with_a_row_already_gone_falls_back_to_single_deletes(ledger: StepLedger):
    steps = _same_shard_steps("wf-gone", 2)
    _dispatch_all(ledger, "wf-gone", dict.fromkeys(steps, T0))
    keys = [r.index_key for r in ledger.list_for_instance("wf-gone")]
    ledger._delete_index_row(keys[0])  # someone (an overlapping tick) deleted it already
    ledger._delete_index_rows(keys)
    assert ledger.index_rows() == []
