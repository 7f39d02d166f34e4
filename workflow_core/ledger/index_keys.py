"""Deadline-index keys: minute buckets, sharded, in time order; and where an instance record's row
is and must go after a change.

An instance row (partitions ``i<YYYYMMDDHHMM>-<shard>``: ``i`` sorts after every digit) must fall due
no later than the scheduler's promise and every watched step's deadline: the hot path moves it only
when it must fall due earlier, the watchdog moves it forward (``deadline_index.py``).
"""

from __future__ import annotations

import zlib
from datetime import UTC, datetime

from workflow_core.ledger.entities import _deadline_key, _nonce
from workflow_core.ledger.instance import SUPERVISED_INSTANCE_STATUSES, InstanceRecord

INDEX_SHARDS = 16  # deadline-index partitions per minute bucket
SHARD_SEPARATOR = "-"


def minute_bucket(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y%m%d%H%M")


def index_partition(moment: datetime, *ids: str) -> str:
    """The minute bucket of ``moment`` plus a shard (a stable hash of the ids): one partition takes
    about 2,000 writes a second, the first limit a busy deployment would hit. ``-`` sorts before
    every digit, so ``<bucket>-<shard>`` keeps buckets in time order and ``<bucket(now)>-~`` bounds
    every shard up to now."""
    shard = zlib.crc32("|".join(ids).encode()) % INDEX_SHARDS
    return f"{minute_bucket(moment)}{SHARD_SEPARATOR}{shard:02d}"


def overdue_upper_partition(now: datetime) -> str:
    return f"{minute_bucket(now)}{SHARD_SEPARATOR}~"


INSTANCE_INDEX_PREFIX = "i"


def index_row_time(index_key: str | None) -> datetime | None:
    """When an instance's deadline-index row falls due (None for no row)."""
    if not index_key or not index_key.startswith(INSTANCE_INDEX_PREFIX):
        return None
    row = index_key.partition("|")[2]
    return datetime.fromisoformat(row.split("~", 1)[0])  # _deadline_key's UTC form, "Z" and all


def instance_index_key(due: datetime, instance_id: str) -> str:
    return f"{INSTANCE_INDEX_PREFIX}{index_partition(due, instance_id)}|{_deadline_key(due)}~{_nonce()}"


def plan_instance_index(
    current: InstanceRecord, updated: InstanceRecord, due_by: datetime | None = None
) -> tuple[str | None, str | None]:
    """The key of the new index row ``updated`` needs (None when its current row, or none, will do),
    and the key its record holds after the write (None: no row); ``due_by``: the deadline of a step the
    same transaction hands the row to watch. An instance parked for an operator (supervised, promising
    nothing) has none: operators find it by its listing."""
    deadline = updated.scheduler_deadline
    if updated.status not in SUPERVISED_INSTANCE_STATUSES or deadline is None:
        return None, None
    if due_by is not None and due_by < deadline:
        deadline = due_by
    due = index_row_time(current.index_key)
    if due is not None and due <= deadline:
        return None, current.index_key  # it falls due no later than the deadline: the watchdog moves it on
    new = instance_index_key(deadline, updated.instance_id)
    return new, new
