"""The deadline index: the steps' and the instances' rows in the index table, the watchdog's only way
to find them. A due instance row is read with its watched steps in one partition query (``watch.py``)
and, when nothing is overdue yet, moved forward to the earliest of their deadlines. Heartbeats move a
step's deadline on from the storage service's clock, never a writer's."""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.data.tables import UpdateMode

from workflow_core import clock
from workflow_core.ledger.entities import _deadline_key, _from_entity, delete_rows, if_match
from workflow_core.ledger.errors import ConcurrencyConflict, InvalidLedgerInput, LedgerError, StepNotFound
from workflow_core.ledger.families import ATTENTION_PARTITION, INSTANCE_ROW
from workflow_core.ledger.index_keys import INSTANCE_INDEX_PREFIX, instance_index_key, overdue_upper_partition
from workflow_core.ledger.instance import InstanceRecord
from workflow_core.ledger.instance_store import InstanceHandle, from_instance_entity
from workflow_core.ledger.model import (
    DEADLINE_STATUSES,
    StepRecord,
    require_aware,
    validate_instance_id,
    validate_step_id,
)
from workflow_core.ledger.watch import WATCHED_BY_INSTANCE, has_own_row, is_watched

log = logging.getLogger("workflow_core.ledger.store")

# Index rows retired while ``StepLedger.deferred_index_deletes`` is active (None: delete at once).
_DEFERRED: ContextVar[list[str] | None] = ContextVar("deferred_index_deletes", default=None)


@dataclass
class DueWork:
    """Overdue instances and overdue watched steps, earliest first."""

    instances: list[InstanceRecord] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)


class DeadlineIndexMixin:
    @contextlib.contextmanager
    def deferred_index_deletes(self):
        """Delete the index rows retired inside on the way out, one batch per partition (off the
        critical path; one request per partition, not per step). A crash before the flush leaves
        stray rows, which ``overdue`` removes when they fall due."""
        pending: list[str] = []
        token = _DEFERRED.set(pending)
        try:
            yield pending
        finally:
            _DEFERRED.reset(token)
            self._delete_index_rows(pending)

    def _retire_index_row(self, index_key: str) -> None:
        pending = _DEFERRED.get()
        if pending is not None:
            pending.append(index_key)
        else:
            self._delete_index_row(index_key)

    def _create_index_row(self, key: str, **properties: Any) -> None:
        partition, _, row = key.partition("|")
        self._index.create_entity({"PartitionKey": partition, "RowKey": row, **properties})

    def _delete_index_rows(self, keys: Sequence[str]) -> None:
        by_partition: dict[str, list[str]] = {}
        for key in dict.fromkeys(k for k in keys if has_own_row(k)):
            partition, _, row = key.partition("|")
            by_partition.setdefault(partition, []).append(row)
        for partition, rows in by_partition.items():
            delete_rows(
                self._index, partition, rows, lambda r, p=partition: self._delete_index_row(f"{p}|{r}")
            )

    def _delete_index_row(self, index_key: str | None) -> None:
        if not has_own_row(index_key):  # none, or watched through the instance's row
            return
        partition, _, row = index_key.partition("|")
        try:
            with contextlib.suppress(ResourceNotFoundError):
                self._index.delete_entity(partition, row)
        except HttpResponseError as exc:  # stays as a stray row; overdue() removes it later
            log.warning("could not delete deadline-index row %s: %s", index_key, exc)

    def _due_index_rows(self, now: datetime, limit: int, prefix: str = "") -> Iterator[tuple[str, Any]]:
        """Each index row due by ``now`` in the minute buckets behind ``prefix`` (the steps' have
        none, the instances' ``i``), with its key."""
        if limit < 1:
            raise InvalidLedgerInput(f"limit must be >= 1, got {limit}")
        self.stats.queries += 1
        lower = "PartitionKey ge @lo and " if prefix else ""
        bounds = {"lo": prefix, "hi": prefix + overdue_upper_partition(now), "key": _deadline_key(now) + "~~"}
        rows = self._index.query_entities(
            f"{lower}PartitionKey le @hi and RowKey le @key",
            parameters=bounds,
            results_per_page=min(max(limit, 10), 1000),
        )
        for row in rows:
            self.stats.index_entities_read += 1
            yield f"{row['PartitionKey']}|{row['RowKey']}", row

    def _indexed_steps(
        self, rows: Iterator[tuple[str, Any]], limit: int, wanted: Callable[[StepRecord], bool]
    ) -> list[StepRecord]:
        """At most ``limit`` of the ``wanted`` steps the index rows name; a row its step no longer
        names (a stray row) is deleted."""
        found: list[StepRecord] = []
        stale: list[str] = []
        for key, row in rows:
            record = None
            with contextlib.suppress(StepNotFound):
                record = self.get(row["InstanceId"], row["StepId"])
            if record is None or record.index_key != key:
                stale.append(key)
            elif wanted(record):
                found.append(record)
                if len(found) >= limit:
                    break
        self._delete_index_rows(stale)
        self.stats.stale_index_rows_removed += len(stale)
        return found

    def overdue(self, now: datetime, limit: int = 100) -> list[StepRecord]:
        """Steps due by ``now``, earliest first, at most ``limit``: reads only index rows in buckets up
        to ``now``, then verifies each against its step."""
        now = require_aware(now, "now")
        found = self._indexed_steps(self._due_index_rows(now, limit), limit, lambda r: r.is_overdue(now))
        # Rows come minute by minute, and within a minute shard by shard (here and in overdue_work).
        return sorted(found, key=lambda r: r.deadline or now)

    def needing_attention(self, limit: int = 100) -> list[StepRecord]:
        """Steps no automation will move on from (CompensationFailed): the operator's inbox."""
        self.stats.queries += 1
        rows = self._index.query_entities(
            "PartitionKey eq @p", parameters={"p": ATTENTION_PARTITION}, results_per_page=limit
        )
        return self._indexed_steps(((f"{r['PartitionKey']}|{r['RowKey']}", r) for r in rows), limit, bool)

    def count_in_flight(self, cap: int = 5000) -> int:
        """Work in flight the watchdog watches (the ``sas.work.in_flight`` gauge; never decided on):
        steps Dispatched or Running with a row of their own, plus supervised instances (their row
        watches their steps), from index rows only, at most ``cap``."""
        # Two range queries, not one with "or": an "or" across partition ranges makes the service
        # scan the whole table, the operators' listing partition (one row per instance ever) included.
        parameters = dict(letters="a", dispatched="Dispatched", running="Running", instance="instance")
        parameters.update(lo=INSTANCE_INDEX_PREFIX, hi=f"{INSTANCE_INDEX_PREFIX}~")
        counted = 0
        for query in (
            "PartitionKey lt @letters and ( Status eq @dispatched or Status eq @running )",
            "PartitionKey ge @lo and PartitionKey lt @hi and Kind eq @instance",
        ):
            self.stats.queries += 1
            rows = self._index.query_entities(
                query, parameters=parameters, select=["Status"], results_per_page=1000
            )
            counted += sum(1 for _ in itertools.islice(rows, cap - counted))
        return counted

    def index_rows(self) -> list[dict[str, Any]]:
        """Every deadline-index row (consistency checks; a full scan)."""
        return [dict(e, _key=f"{e['PartitionKey']}|{e['RowKey']}") for e in self._index.list_entities()]

    def overdue_work(self, now: datetime, limit: int = 100) -> DueWork:
        """At most ``limit`` together; stray rows are deleted."""
        now = require_aware(now, "now")
        due = DueWork()
        for key, row in self._due_index_rows(now, limit, INSTANCE_INDEX_PREFIX):
            record, watched = self.instance_and_watched_steps(row["InstanceId"])
            if record is None or record.index_key != key:
                self._delete_index_row(key)
                self.stats.stale_index_rows_removed += 1
                continue
            late_steps = [s for s in watched if s.is_overdue(now)]
            due.steps += late_steps
            if record.is_overdue(now):
                due.instances.append(record)
            elif not late_steps:
                self._move_instance_row_forward(record, watched)
            if len(due.instances) + len(due.steps) >= limit:
                break
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
        step, handle, steps = self._step_and_instance(instance_id, step_id)
        return step, handle, sorted(s.step_id for s in steps if is_watched(s))

    def _step_and_instance(
        self, instance_id: str, step_id: str, *, watched: bool = True
    ) -> tuple[StepRecord, InstanceHandle | None, list[StepRecord]]:
        validate_step_id(step_id)
        instance, steps = self._instance_partition_rows(instance_id, step_id, watched=watched)
        step = next((s for s in steps if s.step_id == step_id), None)
        if step is None:
            raise StepNotFound(instance_id, step_id)
        return step, InstanceHandle(from_instance_entity(instance)) if instance is not None else None, steps

    def _instance_partition_rows(
        self, instance_id: str, step_id: str | None = None, *, watched: bool = True, all_steps: bool = False
    ) -> tuple[Any, list[StepRecord]]:
        """One query: the instance's entity, ``step_id``'s and (``watched``) the step rows its index
        row watches, or (``all_steps``) every step row."""
        validate_instance_id(instance_id)
        self.stats.queries += 1
        steps = ["RowKey lt @audit"] if all_steps else ["( RowKey lt @audit and IndexKey eq @watched )"]
        clauses = [
            *(["RowKey eq @step"] if step_id is not None else []),
            "RowKey eq @instance",
            *(steps if watched or all_steps else []),
        ]
        parameters = dict(
            pk=instance_id, step=step_id, instance=INSTANCE_ROW, audit="~", watched=WATCHED_BY_INSTANCE
        )
        query = f"PartitionKey eq @pk and ( {' or '.join(clauses)} )"
        entities = list(self._steps.query_entities(query, parameters=parameters))
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
        new = instance_index_key(due, record.instance_id)
        self._create_instance_index_row(new, record)
        entity = {"PartitionKey": record.instance_id, "RowKey": INSTANCE_ROW, "IndexKey": new}
        try:
            self._steps.update_entity(entity, mode=UpdateMode.MERGE, **if_match(record.etag))
        except Exception:  # someone wrote the instance meanwhile: their write decides; drop our row
            self._delete_index_row(new)
            return
        self._delete_index_row(record.index_key)

    def extend_deadline(
        self,
        record: StepRecord,
        seconds: float,
        *,
        actor: str,
        reason: str = "heartbeat",
        allow_earlier: bool = False,
        now: datetime | None = None,
        record_kept: bool = False,
    ) -> StepRecord:
        """The deadline becomes *trusted now* + ``seconds``, whatever the heartbeating machine's clock
        says; a later deadline is kept unless ``allow_earlier``, with no write unless ``record_kept``
        (then the beat is recorded all the same, in ``last_heartbeat`` and the audit trail). ``now``:
        the service's time of the read that returned ``record`` (:meth:`get_with_service_time`),
        sparing :meth:`trusted_now` a read.
        """
        if not isinstance(seconds, int | float) or seconds != seconds or abs(seconds) > 10 * 365 * 86400:
            raise InvalidLedgerInput(f"extend by {seconds!r}: expected a finite number of seconds")
        if record.status not in DEADLINE_STATUSES:
            raise InvalidLedgerInput(
                f"step {record.step_id!r} is {record.status.value}; only steps in "
                f"{sorted(s.value for s in DEADLINE_STATUSES)} have a deadline to extend"
            )
        now = self.trusted_now(record) if now is None else require_aware(now, "now")
        target = now + timedelta(seconds=seconds)
        if not allow_earlier and record.deadline is not None and record.deadline >= target:
            if not record_kept:
                return record
            # A message-only agent's beat (one write, like any heartbeat that moves the deadline): an
            # agent that beats on without replying is told apart from one that went silent.
            deadline, reason = record.deadline, f"{reason} (deadline kept)"
        else:
            deadline = target
        return self._write(
            record,
            actor=actor,
            reason=reason,
            status=record.status,
            action="heartbeat",
            deadline=deadline,
            last_heartbeat=now,
        )

    def trusted_now(self, record: StepRecord) -> datetime:
        """The storage service's time: the later of a point read's ``Date`` header (whole seconds) and
        the row's service-written ``Timestamp``, both at most a second plus latency behind the truth.
        A virtual clock stands in for it. Raises :class:`ConcurrencyConflict` if the row changed.
        """
        if clock.is_virtual():
            return clock.utcnow()
        current, now = self.get_with_service_time(record.instance_id, record.step_id)
        if record.etag is not None and current.etag != record.etag:
            raise ConcurrencyConflict(record.instance_id, record.step_id)
        return now

    def get_with_service_time(self, instance_id: str, step_id: str) -> tuple[StepRecord, datetime]:
        """A point read of the step, and the storage service's time of its answer."""
        validate_instance_id(instance_id)
        validate_step_id(step_id)
        headers: dict[str, str] = {}

        def keep_date(response: Any) -> None:
            headers["date"] = response.http_response.headers.get("Date", "")

        try:
            entity = self._steps.get_entity(instance_id, step_id, raw_response_hook=keep_date)
        except ResourceNotFoundError:
            raise StepNotFound(instance_id, step_id) from None
        self.stats.step_entities_read += 1
        if clock.is_virtual():
            return _from_entity(entity), clock.utcnow()
        candidates = [t for t in (_http_date(headers.get("date")), entity.metadata.get("timestamp")) if t]
        if not candidates:
            raise LedgerError("the storage service sent neither a Date header nor a row Timestamp")
        now = max(datetime(*t.timetuple()[:6], t.microsecond, tzinfo=UTC) for t in candidates)
        return _from_entity(entity), now


def _http_date(text: str | None) -> datetime | None:
    with contextlib.suppress(TypeError, ValueError):  # none, or not an HTTP date
        return parsedate_to_datetime(text).astimezone(UTC)
    return None
