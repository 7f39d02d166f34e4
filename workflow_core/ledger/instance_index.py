"""Where an instance record's deadline-index row is, and where it must go after a change (pure).

An instance row lives in partitions ``i<YYYYMMDDHHMM>-<shard>`` (``i`` sorts after every digit, so
the steps' range query never reads it) and must fall due *no later* than the scheduler's promise and
every watched step's deadline; the hot path moves it only when it must fall due earlier.
"""

from __future__ import annotations

from datetime import UTC, datetime

from workflow_core.ledger.entities import _deadline_key
from workflow_core.ledger.index_keys import index_partition
from workflow_core.ledger.instance import SUPERVISED_INSTANCE_STATUSES, InstanceRecord

INSTANCE_INDEX_PREFIX = "i"


def index_row_time(index_key: str | None) -> datetime | None:
    """When an instance's deadline-index row falls due (None for no row)."""
    if not index_key or not index_key.startswith(INSTANCE_INDEX_PREFIX):
        return None
    row = index_key.partition("|")[2]
    return datetime.strptime(row.split("~", 1)[0], "%Y%m%dT%H%M%S.%fZ").replace(tzinfo=UTC)


def plan_instance_index(
    current: InstanceRecord, updated: InstanceRecord, nonce: str, due_by: datetime | None = None
) -> tuple[str, str] | None:
    """The new index row ``updated`` needs, or None when its current row (or none) will do; ``due_by``:
    the deadline of a step the same transaction hands the row to watch. An instance parked for an
    operator (supervised, promising nothing) has none: the operators find it by its listing row."""
    deadline = updated.scheduler_deadline
    if updated.status not in SUPERVISED_INSTANCE_STATUSES or deadline is None:
        return None
    if due_by is not None and due_by < deadline:
        deadline = due_by
    due = index_row_time(current.index_key)
    if due is not None and due <= deadline:
        return None  # the row falls due no later than the deadline: the watchdog moves it on
    partition = index_partition(deadline, updated.instance_id)
    return (f"{INSTANCE_INDEX_PREFIX}{partition}", f"{_deadline_key(deadline)}~{nonce}")


def instance_index_key_after(current: InstanceRecord, updated: InstanceRecord, new: tuple[str, str] | None):
    """What ``updated.index_key`` must say after the write (None: no row at all)."""
    if new is not None:
        return f"{new[0]}|{new[1]}"
    if updated.status in SUPERVISED_INSTANCE_STATUSES and updated.scheduler_deadline is not None:
        return current.index_key
    return None
