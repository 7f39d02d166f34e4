"""The watchdog's read of the instance rows in the deadline index: overdue instances, and the
overdue steps those rows watch.

When a row falls due, one partition query reads the instance and its watched steps; when nothing is
overdue yet, the row moves forward to the earliest of their deadlines, so a scheduler that keeps
moving its promise never costs a hot-path index write.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from azure.core import MatchConditions
from azure.data.tables import UpdateMode

from workflow_core.ledger.entities import _deadline_key, _from_entity
from workflow_core.ledger.errors import InvalidLedgerInput, StepNotFound
from workflow_core.ledger.index_keys import index_partition, overdue_upper_partition
from workflow_core.ledger.instance import INSTANCE_ROW, InstanceRecord
from workflow_core.ledger.instance_index import INSTANCE_INDEX_PREFIX
from workflow_core.ledger.instance_store import InstanceHandle, from_instance_entity
from workflow_core.ledger.model import StepRecord, require_aware, validate_instance_id, validate_step_id
from workflow_core.ledger.watch import WATCHED_BY_INSTANCE, is_watched


@dataclass
class DueWork:
    """Overdue instances and overdue watched steps, earliest first."""

    instances: list[InstanceRecord] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)


class InstanceDeadlinesMixin:
    def overdue_work(self, now: datetime, limit: int = 100) -> DueWork:
        """At most ``limit`` together; stray rows are deleted."""
        now = require_aware(now, "now")
        if limit < 1:
            raise InvalidLedgerInput(f"limit must be >= 1, got {limit}")
        self.stats.queries += 1
        rows = self._index.query_entities(
            "PartitionKey ge @lo and PartitionKey le @hi and RowKey le @key",
            parameters={
                "lo": INSTANCE_INDEX_PREFIX,
                "hi": f"{INSTANCE_INDEX_PREFIX}{overdue_upper_partition(now)}",
                "key": _deadline_key(now) + "~~",
            },
            results_per_page=min(max(limit, 10), 1000),
        )
        due = DueWork()
        for row in rows:
            self.stats.index_entities_read += 1
            key = f"{row['PartitionKey']}|{row['RowKey']}"
            record, watched = self.instance_and_watched_steps(row["InstanceId"])
            if record is None or record.index_key != key:
                self._delete_index_row(key)
                self.stats.stale_index_rows_removed += 1
                continue
            late_steps = [s for s in watched if s.is_overdue(now)]
            overdue = record.is_overdue(now)
            if overdue:
                due.instances.append(record)
            due.steps.extend(late_steps)
            if not overdue and not late_steps:
                self._move_instance_row_forward(record, watched)
            if len(due.instances) + len(due.steps) >= limit:
                break
        # rows come minute by minute, and within a minute shard by shard
        due.instances.sort(key=lambda r: r.scheduler_deadline or now)
        due.steps.sort(key=lambda r: r.deadline or now)
        return due

    def overdue_instances(self, now: datetime, limit: int = 100) -> list[InstanceRecord]:
        return self.overdue_work(now, limit).instances

    def instance_and_watched_steps(self, instance_id: str) -> tuple[InstanceRecord | None, list[StepRecord]]:
        """The instance record and the in-flight steps its index row watches, in one request."""
        instance, steps = self._instance_partition_rows(instance_id)
        record = from_instance_entity(instance) if instance is not None else None
        return record, [s for s in steps if is_watched(s)]

    def read_step_instance_and_watched(
        self, instance_id: str, step_id: str
    ) -> tuple[StepRecord, InstanceHandle | None, list[str]]:
        """A step, its instance record and the ids of the steps the instance's row watches, in one
        request: a settle may write against the snapshot unread when it watches nothing."""
        validate_step_id(step_id)
        instance, steps = self._instance_partition_rows(instance_id, step_id)
        step = next((s for s in steps if s.step_id == step_id), None)
        if step is None:
            raise StepNotFound(instance_id, step_id)
        handle = InstanceHandle(from_instance_entity(instance)) if instance is not None else None
        return step, handle, sorted(s.step_id for s in steps if is_watched(s))

    def _instance_partition_rows(
        self, instance_id: str, step_id: str | None = None
    ) -> tuple[Any, list[StepRecord]]:
        """One query: the instance's entity, the step rows its index row watches, and ``step_id``'s."""
        validate_instance_id(instance_id)
        self.stats.queries += 1
        step_clause = "RowKey eq @step or " if step_id is not None else ""
        entities = list(
            self._steps.query_entities(
                f"PartitionKey eq @pk and ( {step_clause}RowKey eq @instance or "
                "( RowKey lt @audit and IndexKey eq @watched ) )",
                parameters={
                    "pk": instance_id,
                    "instance": INSTANCE_ROW,
                    "audit": "~",
                    "watched": WATCHED_BY_INSTANCE,
                    **({"step": step_id} if step_id is not None else {}),
                },
            )
        )
        instance = next((e for e in entities if e["RowKey"] == INSTANCE_ROW), None)
        steps = [_from_entity(e) for e in entities if e["RowKey"] != INSTANCE_ROW]
        self.stats.step_entities_read += len(steps)
        return instance, steps

    def _move_instance_row_forward(self, record: InstanceRecord, watched: list[StepRecord]) -> None:
        """Re-key a row that fell due early to the earliest of what it watches, with the instance's
        ETag: a write meanwhile (which may have handed the row another step) voids the move."""
        if not record.supervised or record.scheduler_deadline is None:
            return
        due = min([record.scheduler_deadline, *(s.deadline for s in watched if s.deadline is not None)])
        partition = index_partition(due, record.instance_id)
        new = (f"{INSTANCE_INDEX_PREFIX}{partition}", f"{_deadline_key(due)}~{self._nonce()}")
        self._create_instance_index_row(new, record)
        try:
            self._steps.update_entity(
                {
                    "PartitionKey": record.instance_id,
                    "RowKey": INSTANCE_ROW,
                    "IndexKey": f"{new[0]}|{new[1]}",
                },
                mode=UpdateMode.MERGE,
                etag=record.etag,
                match_condition=MatchConditions.IfNotModified,
            )
        except Exception:  # someone wrote the instance meanwhile: their write decides; drop our row
            self._delete_index_row(f"{new[0]}|{new[1]}")
            return
        self._delete_index_row(record.index_key)
