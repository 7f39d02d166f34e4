"""The watchdog's read of the instance rows in the deadline index: overdue instances, and the
overdue steps those rows watch.

An instance's index row falls due no later than its scheduler's promise and no later than the
deadline of any step it watches (``watch.py``). When it falls due, one partition query reads the
instance record and its watched steps: the instance is overdue if its promise passed, a watched step
if its deadline passed; when neither, the row moves forward to the earliest of them (so a scheduler
that keeps moving its promise, or steps that finish early, never cost a hot-path index write).
Mixed into :class:`workflow_core.ledger.StepLedger`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from azure.core import MatchConditions
from azure.data.tables import UpdateMode

from workflow_core.ledger.entities import _from_entity
from workflow_core.ledger.errors import InvalidLedgerInput, StepNotFound
from workflow_core.ledger.index_keys import index_partition, overdue_upper_partition
from workflow_core.ledger.instance import INSTANCE_ROW, InstanceRecord
from workflow_core.ledger.instance_index import INSTANCE_INDEX_PREFIX, _time_key
from workflow_core.ledger.instance_store import InstanceHandle, from_instance_entity
from workflow_core.ledger.model import StepRecord, require_aware, validate_instance_id, validate_step_id
from workflow_core.ledger.watch import WATCHED_BY_INSTANCE, is_watched


@dataclass
class DueWork:
    """What the instance rows due by ``now`` hold: instances whose scheduler broke its promise,
    and steps (watched by their instance's row) whose deadline passed. Earliest first."""

    instances: list[InstanceRecord] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)


class InstanceDeadlinesMixin:
    """``overdue_work`` and what it needs (see the module docstring)."""

    def overdue_work(self, now: datetime, limit: int = 100) -> DueWork:
        """Overdue instances and overdue watched steps, at most ``limit`` of them together.

        Reads only the instance index rows due by ``now``, and per row one partition query (the
        record and its watched steps). A row whose instance has nothing overdue is moved forward;
        stray rows are deleted.
        """
        now = require_aware(now, "now")
        if limit < 1:
            raise InvalidLedgerInput(f"limit must be >= 1, got {limit}")
        self.stats.queries += 1
        rows = self._index.query_entities(
            "PartitionKey ge @lo and PartitionKey le @hi and RowKey le @key",
            parameters={
                "lo": INSTANCE_INDEX_PREFIX,
                "hi": f"{INSTANCE_INDEX_PREFIX}{overdue_upper_partition(now)}",
                "key": _time_key(now) + "~~",
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
        """The overdue instances of :meth:`overdue_work` (tools and tests; the watchdog takes both)."""
        return self.overdue_work(now, limit).instances

    def instance_and_watched_steps(self, instance_id: str) -> tuple[InstanceRecord | None, list[StepRecord]]:
        """The instance record and the in-flight steps its index row watches, in one request."""
        instance, steps = self._instance_partition_rows(instance_id)
        record = from_instance_entity(instance) if instance is not None else None
        return record, [s for s in steps if is_watched(s)]

    def read_step_instance_and_watched(
        self, instance_id: str, step_id: str
    ) -> tuple[StepRecord, InstanceHandle | None, list[str]]:
        """A step, its instance record and the ids of the in-flight steps the instance's index row
        watches, in one request: the result handler's read, whose instance snapshot a settle may
        write against when it watches nothing."""
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
        """One query of an instance's partition: its record's entity and the step rows its index
        row watches (any status: the caller keeps the in-flight ones), plus ``step_id``'s row."""
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
        """Re-key a row that fell due before anything it watches did: to the earliest of the
        scheduler's promise and the watched steps' deadlines. With the instance's ETag, so a write
        meanwhile (which may have handed the row another step) voids the move."""
        if not record.supervised or record.scheduler_deadline is None:
            return
        due = min([record.scheduler_deadline, *(s.deadline for s in watched if s.deadline is not None)])
        partition = index_partition(due, record.instance_id)
        new = (f"{INSTANCE_INDEX_PREFIX}{partition}", f"{_time_key(due)}~{self._nonce()}")
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
