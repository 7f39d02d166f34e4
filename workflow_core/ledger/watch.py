"""Which deadline-index row watches an in-flight step: its own, or its instance's.

A row of its own costs a step two requests (``store.py``); but a step of a supervised instance
already has a row that falls due no later than its deadline: the instance's. Such a step is
*watched by its instance* (``index_key`` = :data:`WATCHED_BY_INSTANCE`): when the instance row falls
due, the watchdog reads the partition and takes every overdue watched step (``overdue_work``).

The invariant: **the instance's index row falls due no later than the deadline of any step it
watches.** It holds because

* a step becomes watched only in a write that carries the instance record (same entity-group
  transaction, instance ETag-guarded) whose index row, as written, is due by the step's deadline;
* a write without the instance keeps a step watched only if the deadline does not move earlier;
  otherwise the step gets its own row again;
* the watchdog moves an instance row forward only to the earliest of the scheduler's promise and
  the deadlines of the steps it watches, with the instance's ETag (a write meanwhile voids the move);
* an instance leaves supervision (its row goes) only after giving its watched in-flight steps rows
  of their own (``settle_instance``).
"""

from __future__ import annotations

from datetime import datetime

from workflow_core.ledger.index_keys import index_row_time
from workflow_core.ledger.instance import SUPERVISED_INSTANCE_STATUSES, InstanceRecord
from workflow_core.ledger.model import DEADLINE_STATUSES, StepRecord

WATCHED_BY_INSTANCE = "instance"  # a step's index_key when its instance's row watches it


def watched_by_instance(
    record: StepRecord, deadline: datetime, instance_after: InstanceRecord | None
) -> bool:
    """May the step, written with ``deadline``, be watched by its instance's index row
    (``instance_after``: the instance as the same transaction writes it, if it does)?"""
    if instance_after is not None:
        if instance_after.status not in SUPERVISED_INSTANCE_STATUSES:
            return False
        due = index_row_time(instance_after.index_key)
        return due is not None and due <= deadline
    return is_watched(record) and record.deadline is not None and deadline >= record.deadline


def is_watched(record: StepRecord) -> bool:
    return record.index_key == WATCHED_BY_INSTANCE and record.status in DEADLINE_STATUSES


def has_own_row(index_key: str | None) -> bool:
    return bool(index_key) and "|" in index_key
