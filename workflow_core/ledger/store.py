"""The step ledger on Azure Table Storage.

Layout (see docs/architecture.md):

* Ledger table, one partition per workflow instance:
  - step rows, RowKey = step id;
  - audit rows, RowKey = ``~audit~<time>~<nonce>`` (``~`` sorts after every step id), written in
    the *same entity-group transaction* as the step change they describe, so the trail never
    misses or invents a move.
* Deadline-index table: one row per step that must move on by a deadline,
  PartitionKey = deadline minute bucket plus a shard (``YYYYMMDDHHMM-SS``, see
  :func:`index_partition`), RowKey = ``<deadline>~<nonce>``. ``overdue(now)`` reads only the
  buckets up to now and, in them, only rows due by now: only overdue rows.

The index lives in another table, so it cannot share the step's transaction. Order of writes on a
deadline change: (1) create the new index row, (2) conditionally update the step row pointing at it
(``IndexKey``), (3) delete the old index row. A crash after (1) or (2) leaves an index row that no
step points at; ``overdue`` verifies every index row against its step and deletes such strays. So
every step that needs watching always has its index row; extra rows are harmless and self-healing.
A caller may defer step (3) to a moment off its critical path, or batch it per partition
(:meth:`StepLedger.deferred_index_deletes`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import uuid
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from azure.data.tables import TableClient, TableServiceClient, TableTransactionError, UpdateMode

from workflow_core import clock
from workflow_core.ledger.errors import (
    ConcurrencyConflict,
    IllegalTransition,
    InstanceConflict,
    InvalidLedgerInput,
    LedgerError,
    StepNotFound,
    StepsAlreadyExist,
)
from workflow_core.ledger.index_keys import index_partition, overdue_upper_partition
from workflow_core.ledger.instance import INSTANCE_ROW
from workflow_core.ledger.instance_store import InstanceHandle, InstanceLedgerMixin, from_instance_entity
from workflow_core.ledger.model import (
    ALLOWED_TRANSITIONS,
    ATTENTION_STATUSES,
    DEADLINE_STATUSES,
    AuditEntry,
    NewStep,
    StepRecord,
    StepStatus,
    parse_status,
    require_aware,
    validate_instance_id,
    validate_step_id,
)

log = logging.getLogger(__name__)

AUDIT_PREFIX = "~audit~"
# Written with an instance's steps (see create_steps). '~' keeps it out of step listings, and 's'
# after 'a' and 'i' keeps it out of the audit range and off the instance record's key.
STEPS_MARKER_ROW = "~steps"
ATTENTION_PARTITION = "attention"  # sorts after every digit bucket, so overdue() never reads it
MAX_BATCH = 100  # Table Storage limit per entity-group transaction
_AUDIT_SEQUENCE = itertools.count()
# Index rows retired while ``StepLedger.deferred_index_deletes`` is active (None: delete at once).
_DEFERRED: ContextVar[list[str] | None] = ContextVar("deferred_index_deletes", default=None)

# StepRecord field -> entity property
_FIELDS = {
    "workflow_name": "WorkflowName",
    "workflow_version": "WorkflowVersion",
    "step_name": "StepName",
    "sequence": "Sequence",
    "agent": "Agent",
    "compensator": "Compensator",
    "status": "Status",
    "owner": "Owner",
    "attempt": "Attempt",
    "max_attempts": "MaxAttempts",
    "deadline": "Deadline",
    "heartbeat_timeout_seconds": "HeartbeatTimeoutSeconds",
    "last_heartbeat": "LastHeartbeat",
    "created_at": "CreatedAt",
    "updated_at": "UpdatedAt",
    "completed_at": "CompletedAt",
    "message_sent_at": "MessageSentAt",
    "last_error": "LastError",
    "non_retryable": "NonRetryable",
    "compensation_status": "CompensationStatus",
    "compensation_attempt": "CompensationAttempt",
    "input_ref": "InputRef",
    "result_ref": "ResultRef",
    "orchestration_id": "OrchestrationId",
    "index_key": "IndexKey",
    "completion_seq": "CompletionSeq",
    "trace_parent": "TraceParent",
    "trace_state": "TraceState",
}
_MUTABLE = set(_FIELDS) - {
    "workflow_name",
    "workflow_version",
    "step_name",
    "sequence",
    "agent",
    "created_at",
    "status",
}


@dataclass
class LedgerStats:
    """What the ledger read, so tests and benchmarks can show what a query cost."""

    queries: int = 0
    index_entities_read: int = 0
    step_entities_read: int = 0
    stale_index_rows_removed: int = 0

    def reset(self) -> None:
        self.queries = self.index_entities_read = self.step_entities_read = 0
        self.stale_index_rows_removed = 0


def _to_entity(record: StepRecord) -> dict[str, Any]:
    entity: dict[str, Any] = {"PartitionKey": record.instance_id, "RowKey": record.step_id}
    for field, prop in _FIELDS.items():
        value = getattr(record, field)
        if value is None:
            continue  # absent property = None; Table Storage has no null
        entity[prop] = value.value if isinstance(value, StepStatus) else value
    return entity


def _from_entity(entity: Any) -> StepRecord:
    data: dict[str, Any] = {"instance_id": entity["PartitionKey"], "step_id": entity["RowKey"]}
    for field, prop in _FIELDS.items():
        if prop in entity and entity[prop] is not None:
            value = entity[prop]
            if isinstance(value, datetime) and value.tzinfo is None:
                value = value.replace(tzinfo=UTC)
            data[field] = value
    data["etag"] = entity.metadata.get("etag") if hasattr(entity, "metadata") else None
    return StepRecord.model_validate(data)


def _bucket(deadline: datetime) -> str:
    return deadline.astimezone(UTC).strftime("%Y%m%d%H%M")


def _deadline_key(deadline: datetime) -> str:
    return deadline.astimezone(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def _nonce() -> str:
    return uuid.uuid4().hex[:12]


class StepLedger(InstanceLedgerMixin):
    """Conditional (ETag) reads and writes of step rows, their instance record, their deadline index
    and their audit trail."""

    _nonce = staticmethod(_nonce)

    def __init__(self, service: TableServiceClient, ledger_table: str, index_table: str) -> None:
        self._service = service
        self.ledger_table_name = ledger_table
        self.index_table_name = index_table
        self._steps: TableClient = service.get_table_client(ledger_table)
        self._index: TableClient = service.get_table_client(index_table)
        self.stats = LedgerStats()

    # ---- construction ----------------------------------------------------------------------------

    @classmethod
    def from_connection_string(
        cls, connection_string: str, ledger_table: str = "StepLedger", index_table: str = "StepDeadlines"
    ) -> StepLedger:
        return cls(TableServiceClient.from_connection_string(connection_string), ledger_table, index_table)

    def create_tables(self) -> None:
        """Create both tables if missing (idempotent; infra creates them in Azure)."""
        for name in (self.ledger_table_name, self.index_table_name):
            with contextlib.suppress(ResourceExistsError):
                self._service.create_table(name)

    def table_client(self) -> TableClient:
        """A client of the ledger table for rows that are not steps (stored definition versions)."""
        return self._service.get_table_client(self.ledger_table_name)

    def close(self) -> None:
        self._steps.close()
        self._index.close()

    # ---- writes ----------------------------------------------------------------------------------

    def create_steps(
        self,
        instance_id: str,
        workflow_name: str,
        steps: Sequence[NewStep],
        *,
        actor: str,
        orchestration_id: str | None = None,
        version: str | None = None,
        instance: InstanceHandle | None = None,
        instance_changes: dict[str, Any] | None = None,
    ) -> list[StepRecord]:
        """Write every step of a new instance as Pending, atomically per 100-row batch.

        ``version`` is the definition version the instance is pinned to: every step row carries it,
        so whoever holds a step (an agent, the watchdog, the compensation plan) finds its definition.
        One request for a workflow of up to 98 steps: the batch is written first and the instance's
        rows are read only when it conflicts. With ``instance`` (and ``instance_changes``), the
        instance record changes in the first batch too, and the handle then holds it as written.
        Idempotent: calling it again for the same instance and the same steps returns the stored
        rows (an activity may run twice), and leaves the instance record alone; different steps for
        an existing instance raise. Raises :class:`InstanceConflict` when only the instance record
        lost a race (nothing is written then).
        """
        validate_instance_id(instance_id)
        if not steps:
            raise InvalidLedgerInput("a workflow instance needs at least one step")
        ids = [s.step_id for s in steps]
        if len(set(ids)) != len(ids):
            raise InvalidLedgerInput(f"duplicate step ids in {ids}")
        now = clock.utcnow()
        records = [
            StepRecord(
                instance_id=instance_id,
                step_id=s.step_id,
                workflow_name=workflow_name,
                workflow_version=version,
                step_name=s.step_name,
                sequence=i,
                agent=s.agent,
                compensator=s.compensator,
                max_attempts=s.max_attempts,
                heartbeat_timeout_seconds=s.heartbeat_timeout_seconds,
                input_ref=s.input_ref,
                orchestration_id=orchestration_id or instance_id,
                created_at=now,
                updated_at=now,
            )
            for i, s in enumerate(steps)
        ]
        operations: list[tuple] = [("create", _to_entity(r)) for r in records]
        # One row per instance with a fixed key: a second create_steps conflicts on it whatever its
        # steps are, so the batch can go first and the stored steps are read only then.
        marker = {"PartitionKey": instance_id, "RowKey": STEPS_MARKER_ROW, "Workflow": workflow_name}
        operations.insert(0, ("create", marker))
        operations.append(
            (
                "create",
                self._audit_entity(
                    instance_id,
                    "*",
                    actor,
                    "created",
                    None,
                    "Pending",
                    0,
                    f"workflow {workflow_name} with {len(records)} steps",
                    now,
                ),
            )
        )
        instance_updated = instance_index = None
        if instance is not None:
            if instance.record.instance_id != instance_id:
                raise InvalidLedgerInput("the instance handle belongs to another instance")
            instance_updated, instance_index = self.prepare_instance_change(
                instance.record, instance.record.status, dict(instance_changes or {}), now
            )
            operations.insert(0, self.instance_operation(instance.record, instance_updated))
            if instance_index is not None:
                self._create_instance_index_row(instance_index, instance_updated)
        results: list[Any] = []
        try:
            for start in range(0, len(operations), MAX_BATCH):
                results.extend(self._steps.submit_transaction(operations[start : start + MAX_BATCH]))
        except TableTransactionError as exc:
            if instance_index is not None and not results:
                self._delete_index_row(f"{instance_index[0]}|{instance_index[1]}")
            if exc.status_code == 412 and not results:
                raise InstanceConflict(instance_id) from None
            if exc.status_code != 409:  # 409: a concurrent (or earlier) call created them first
                raise
            existing = self.list_for_instance(instance_id)
            if [r.step_id for r in existing] != ids or {r.workflow_name for r in existing} != {workflow_name}:
                raise StepsAlreadyExist(
                    f"instance {instance_id!r} already has steps {[r.step_id for r in existing]} "
                    f"of workflow {sorted({r.workflow_name for r in existing})}; refusing to mix in {ids}"
                ) from None
            if instance is not None and results:  # the first batch (with the instance) went through
                self._instance_written_in_batch(instance, instance_updated, results[0])
            return existing
        if instance is not None:
            self._instance_written_in_batch(instance, instance_updated, results[0])
            results = results[1:]
        results = results[1:]  # the marker row
        return [r.model_copy(update={"etag": res["etag"]}) for r, res in zip(records, results, strict=False)]

    def _instance_written_in_batch(self, handle: InstanceHandle, updated: Any, result: Any) -> None:
        self.instance_written(handle.record, updated)
        handle.record = updated.model_copy(update={"etag": result["etag"]})

    def transition(
        self,
        record: StepRecord,
        to: StepStatus | str,
        *,
        actor: str,
        reason: str = "",
        instance: InstanceHandle | None = None,
        instance_changes: dict[str, Any] | None = None,
        **changes: Any,
    ) -> StepRecord:
        """Move a step to ``to`` if the state machine allows it and nobody changed it since it was read.

        ``changes`` may set any mutable field (owner, attempt, deadline, last_error, result_ref...).
        With ``instance`` (and ``instance_changes``), the instance record changes in the same
        entity-group transaction, and the handle then holds it as written.
        Raises :class:`IllegalTransition`, :class:`ConcurrencyConflict` (:class:`InstanceConflict`
        when the instance record lost the race) or :class:`StepNotFound`.
        """
        target = parse_status(to)
        if target not in ALLOWED_TRANSITIONS[record.status]:
            raise IllegalTransition(
                record.instance_id,
                record.step_id,
                record.status.value,
                target.value,
                sorted(s.value for s in ALLOWED_TRANSITIONS[record.status]),
            )
        if target in DEADLINE_STATUSES and changes.get("deadline", record.deadline) is None:
            raise InvalidLedgerInput(f"status {target.value} needs a deadline")
        return self._write(
            record,
            actor=actor,
            reason=reason,
            status=target,
            action="transition",
            instance=instance,
            instance_changes=instance_changes,
            **changes,
        )

    def update(
        self,
        record: StepRecord,
        *,
        actor: str,
        reason: str = "",
        instance: InstanceHandle | None = None,
        instance_changes: dict[str, Any] | None = None,
        **changes: Any,
    ) -> StepRecord:
        """Change fields other than the status (owner, message_sent_at...) under the same ETag guard."""
        if "status" in changes:
            raise InvalidLedgerInput("use transition() to change a step's status")
        return self._write(
            record,
            actor=actor,
            reason=reason,
            status=record.status,
            action="update",
            instance=instance,
            instance_changes=instance_changes,
            **changes,
        )

    def extend_deadline(
        self,
        record: StepRecord,
        seconds: float,
        *,
        actor: str,
        reason: str = "heartbeat",
        allow_earlier: bool = False,
        now: datetime | None = None,
    ) -> StepRecord:
        """Heartbeat: the deadline becomes *trusted now* + ``seconds`` (see :meth:`trusted_now`), so a
        step that is still making progress is not overdue, whatever the heartbeating machine's clock says.
        A deadline already later than that is kept (nothing written) unless ``allow_earlier``.

        ``now``: the service's time of the read that returned ``record``
        (:meth:`get_with_service_time`), which spares :meth:`trusted_now` its own read.
        Raises :class:`ConcurrencyConflict` if the step changed since ``record`` was read.
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
            return record
        return self._write(
            record,
            actor=actor,
            reason=reason,
            status=record.status,
            action="heartbeat",
            deadline=target,
            last_heartbeat=now,
        )

    def trusted_now(self, record: StepRecord) -> datetime:
        """The time deadlines are computed from: the storage service's clock, never a writer's.

        Read from the service's answer to a point read of ``record``'s row: the later of its ``Date``
        header (whole seconds) and the row's service-written ``Timestamp``. Both are at or before the
        service's true time, by at most a second plus the request's latency. Under a virtual clock
        (tests, the durable test host) the virtual clock stands in for the service's. Raises
        :class:`ConcurrencyConflict` if the row no longer has ``record``'s ETag.
        """
        if clock.is_virtual():
            return clock.utcnow()
        current, now = self.get_with_service_time(record.instance_id, record.step_id)
        if record.etag is not None and current.etag != record.etag:
            raise ConcurrencyConflict(record.instance_id, record.step_id)
        return now

    def get_with_service_time(self, instance_id: str, step_id: str) -> tuple[StepRecord, datetime]:
        """A point read of the step, and the storage service's time of its answer (see
        :meth:`trusted_now`; the virtual clock's time under a virtual clock)."""
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

    def note(
        self,
        instance_id: str,
        step_id: str,
        *,
        actor: str,
        action: str,
        reason: str,
        attempt: int | None = None,
        status: str | None = None,
    ) -> None:
        """Append an audit row that records a decision without changing the step (e.g. a late result)."""
        validate_instance_id(instance_id)
        self._steps.create_entity(
            self._audit_entity(
                instance_id, step_id, actor, action, status, status, attempt, reason, clock.utcnow()
            )
        )

    def _write(
        self,
        record: StepRecord,
        *,
        actor: str,
        reason: str,
        status: StepStatus,
        action: str,
        instance: InstanceHandle | None = None,
        instance_changes: dict[str, Any] | None = None,
        **changes: Any,
    ) -> StepRecord:
        if record.etag is None:
            raise InvalidLedgerInput("record has no ETag: read it from the ledger before updating it")
        unknown = set(changes) - _MUTABLE
        if unknown:
            raise InvalidLedgerInput(f"cannot change {sorted(unknown)} of a step")
        now = clock.utcnow()
        data = record.model_dump()
        data.update(changes)
        data["status"] = status
        data["updated_at"] = now
        if status in (StepStatus.SUCCEEDED, StepStatus.COMPENSATED) and "completed_at" not in changes:
            data["completed_at"] = now
        new_index: tuple[str, str] | None = None
        if status in DEADLINE_STATUSES:
            deadline = require_aware(data["deadline"], "deadline")
            data["deadline"] = deadline
            old = record.index_key
            old_deadline = record.deadline
            if old is None or old.startswith(ATTENTION_PARTITION) or old_deadline != deadline:
                new_index = (
                    index_partition(deadline, record.instance_id, record.step_id),
                    f"{_deadline_key(deadline)}~{_nonce()}",
                )
        elif status in ATTENTION_STATUSES:
            if record.index_key is None or not record.index_key.startswith(ATTENTION_PARTITION):
                new_index = (ATTENTION_PARTITION, f"{record.instance_id}~{record.step_id}~{_nonce()}")
        else:
            data["index_key"] = None
        if new_index is not None:
            data["index_key"] = f"{new_index[0]}|{new_index[1]}"
        updated = StepRecord.model_validate(data)
        instance_op = instance_updated = instance_index = None
        if instance is not None:
            if instance.record.instance_id != record.instance_id:
                raise InvalidLedgerInput("the instance handle belongs to another instance")
            changes_i = dict(instance_changes or {})
            if status is StepStatus.SUCCEEDED and record.status is not StepStatus.SUCCEEDED:
                # the completion sequence: written with the completion, from the instance's counter
                changes_i["completions"] = instance.record.completions + 1
                updated = updated.model_copy(update={"completion_seq": instance.record.completions + 1})
            instance_updated, instance_index = self.prepare_instance_change(
                instance.record, instance.record.status, changes_i, now
            )
            instance_op = self.instance_operation(instance.record, instance_updated)
            if instance_index is not None:
                self._create_instance_index_row(instance_index, instance_updated)

        # (1) new index row first, so the step never points at a missing one
        if new_index is not None:
            self._index.create_entity(
                {
                    "PartitionKey": new_index[0],
                    "RowKey": new_index[1],
                    "InstanceId": record.instance_id,
                    "StepId": record.step_id,
                    "Deadline": updated.deadline if status in DEADLINE_STATUSES else now,
                    "Status": status.value,
                }
            )
        # (2) step row + audit row, atomically, only if nobody changed the step since it was read
        audit = self._audit_entity(
            record.instance_id,
            record.step_id,
            actor,
            action,
            record.status.value,
            status.value,
            updated.attempt,
            reason,
            now,
        )
        operations: list[tuple] = [
            (
                "update",
                _to_entity(updated),
                {
                    "mode": UpdateMode.REPLACE,
                    "etag": record.etag,
                    "match_condition": MatchConditions.IfNotModified,
                },
            ),
            ("create", audit),
        ]
        if instance_op is not None:
            operations.append(instance_op)
        try:
            result = self._steps.submit_transaction(operations)
        except TableTransactionError as exc:
            if new_index is not None:
                self._delete_index_row(f"{new_index[0]}|{new_index[1]}")
            if instance_index is not None:
                self._delete_index_row(f"{instance_index[0]}|{instance_index[1]}")
            if exc.status_code == 412:
                if instance is not None and getattr(exc, "index", None) == 2:
                    raise InstanceConflict(record.instance_id) from None
                raise ConcurrencyConflict(record.instance_id, record.step_id) from None
            if exc.status_code == 404:
                raise StepNotFound(record.instance_id, record.step_id) from None
            raise
        # (3) the old index row is now stale: deleted now, or where a caller deferred it (see
        # deferred_index_deletes). Not left for overdue() to find: the singleton watchdog would then
        # read every completed step's row once more (docs/capacity.md).
        if record.index_key and record.index_key != updated.index_key:
            self._retire_index_row(record.index_key)
        if instance is not None and instance_updated is not None:
            self.instance_written(instance.record, instance_updated)
            instance.record = instance_updated.model_copy(update={"etag": result[2]["etag"]})
        return updated.model_copy(update={"etag": result[0]["etag"]})

    @contextlib.contextmanager
    def deferred_index_deletes(self):
        """Collect the index rows retired inside, and delete them on the way out in one batch per
        index partition (the watchdog: one request per partition per tick instead of one per step;
        the worker: after its reply is sent, off the step's critical path).
        Follows ``asyncio.to_thread`` (a context variable). A crash before the flush leaves stray
        rows, which ``overdue`` removes when they fall due."""
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

    def _delete_index_rows(self, keys: Sequence[str]) -> None:
        """Delete index rows, batched per partition; rows already gone are fine."""
        by_partition: dict[str, list[str]] = {}
        for key in dict.fromkeys(k for k in keys if k):
            partition, _, row = key.partition("|")
            by_partition.setdefault(partition, []).append(row)
        for partition, rows in by_partition.items():
            for start in range(0, len(rows), MAX_BATCH):
                chunk = rows[start : start + MAX_BATCH]
                if len(chunk) == 1:
                    self._delete_index_row(f"{partition}|{chunk[0]}")
                    continue
                try:
                    self._index.submit_transaction(
                        [("delete", {"PartitionKey": partition, "RowKey": r}) for r in chunk]
                    )
                except (TableTransactionError, HttpResponseError):  # one already gone: one by one
                    for r in chunk:
                        self._delete_index_row(f"{partition}|{r}")

    def _delete_index_row(self, index_key: str | None) -> None:
        if not index_key:
            return
        partition, _, row = index_key.partition("|")
        try:
            self._index.delete_entity(partition, row)
        except ResourceNotFoundError:
            pass
        except HttpResponseError as exc:  # stays as a stray row; overdue() removes it later
            log.warning("could not delete deadline-index row %s: %s", index_key, exc)

    @staticmethod
    def _audit_entity(
        instance_id: str,
        step_id: str,
        actor: str,
        action: str,
        from_status: str | None,
        to_status: str | None,
        attempt: int | None,
        reason: str,
        at: datetime,
    ) -> dict[str, Any]:
        entity: dict[str, Any] = {
            "PartitionKey": instance_id,
            # time, then this process's write order (many moves can share a timestamp, e.g. on a
            # virtual clock), then a nonce so two processes never collide
            "RowKey": f"{AUDIT_PREFIX}{_deadline_key(at)}~{next(_AUDIT_SEQUENCE):012d}~{_nonce()}",
            "StepId": step_id,
            "At": at,
            "Actor": actor,
            "Action": action,
            "Reason": reason[:4000],
        }
        if from_status is not None:
            entity["FromStatus"] = from_status
        if to_status is not None:
            entity["ToStatus"] = to_status
        if attempt is not None:
            entity["Attempt"] = attempt
        return entity

    # ---- reads -----------------------------------------------------------------------------------

    def get(self, instance_id: str, step_id: str) -> StepRecord:
        validate_instance_id(instance_id)
        validate_step_id(step_id)
        try:
            entity = self._steps.get_entity(instance_id, step_id)
        except ResourceNotFoundError:
            raise StepNotFound(instance_id, step_id) from None
        self.stats.step_entities_read += 1
        return _from_entity(entity)

    def read_step_and_instance(
        self, instance_id: str, step_id: str
    ) -> tuple[StepRecord, InstanceHandle | None]:
        """A step and its instance record in one request (one partition query for both rows).

        The handle is None for steps written without an instance record (tests, older rows).
        """
        validate_instance_id(instance_id)
        validate_step_id(step_id)
        self.stats.queries += 1
        entities = list(
            self._steps.query_entities(
                "PartitionKey eq @pk and ( RowKey eq @step or RowKey eq @instance )",
                parameters={"pk": instance_id, "step": step_id, "instance": INSTANCE_ROW},
            )
        )
        step = next((e for e in entities if e["RowKey"] == step_id), None)
        if step is None:
            raise StepNotFound(instance_id, step_id)
        self.stats.step_entities_read += 1
        instance = next((e for e in entities if e["RowKey"] == INSTANCE_ROW), None)
        return _from_entity(step), (InstanceHandle(from_instance_entity(instance)) if instance else None)

    def list_for_instance(self, instance_id: str) -> list[StepRecord]:
        """The instance's steps in workflow order (empty if the instance is unknown)."""
        validate_instance_id(instance_id)
        self.stats.queries += 1
        entities = self._steps.query_entities(
            "PartitionKey eq @pk and RowKey lt @audit", parameters={"pk": instance_id, "audit": "~"}
        )
        records = [_from_entity(e) for e in entities]
        self.stats.step_entities_read += len(records)
        return sorted(records, key=lambda r: r.sequence)

    def audit_trail(self, instance_id: str) -> list[AuditEntry]:
        """Every recorded move of the instance's steps, oldest first."""
        validate_instance_id(instance_id)
        entities = self._steps.query_entities(
            "PartitionKey eq @pk and RowKey gt @lo and RowKey lt @hi",
            parameters={"pk": instance_id, "lo": AUDIT_PREFIX, "hi": AUDIT_PREFIX + "~"},
        )
        entries = [
            AuditEntry(
                instance_id=e["PartitionKey"],
                step_id=e["StepId"],
                at=e["At"] if e["At"].tzinfo else e["At"].replace(tzinfo=UTC),
                actor=e["Actor"],
                action=e["Action"],
                from_status=e.get("FromStatus"),
                to_status=e.get("ToStatus"),
                attempt=e.get("Attempt"),
                reason=e.get("Reason", ""),
            )
            for e in entities
        ]
        return sorted(entries, key=lambda a: a.at)

    def overdue(self, now: datetime, limit: int = 100) -> list[StepRecord]:
        """Steps whose deadline is at or before ``now``, earliest first, at most ``limit`` (with a
        limit, whole earlier minutes come first; within one minute the shards are read in turn).

        Reads only index rows in buckets up to ``now`` (never the step table at large), then one point
        read per candidate to verify it; stray index rows found on the way are deleted.
        """
        now = require_aware(now, "now")
        if limit < 1:
            raise InvalidLedgerInput(f"limit must be >= 1, got {limit}")
        found: list[StepRecord] = []
        stale: list[str] = []
        self.stats.queries += 1
        pages = self._index.query_entities(
            "PartitionKey le @bucket and RowKey le @key",
            parameters={"bucket": overdue_upper_partition(now), "key": _deadline_key(now) + "~~"},
            results_per_page=min(max(limit, 10), 1000),
        )
        for row in pages:
            self.stats.index_entities_read += 1
            key = f"{row['PartitionKey']}|{row['RowKey']}"
            try:
                record = self.get(row["InstanceId"], row["StepId"])
            except StepNotFound:
                record = None
            if record is None or record.index_key != key:
                stale.append(key)
                self.stats.stale_index_rows_removed += 1
                continue
            if record.is_overdue(now):
                found.append(record)
                if len(found) >= limit:
                    break
        self._delete_index_rows(stale)
        # Rows come minute by minute, and within a minute shard by shard: sort what was found.
        return sorted(found, key=lambda r: r.deadline or now)

    def needing_attention(self, limit: int = 100) -> list[StepRecord]:
        """Steps no automation will move on from (CompensationFailed): the operator's inbox."""
        self.stats.queries += 1
        result: list[StepRecord] = []
        for row in self._index.query_entities(
            "PartitionKey eq @p", parameters={"p": ATTENTION_PARTITION}, results_per_page=limit
        ):
            key = f"{row['PartitionKey']}|{row['RowKey']}"
            try:
                record = self.get(row["InstanceId"], row["StepId"])
            except StepNotFound:
                self._delete_index_row(key)
                continue
            if record.index_key != key:
                self._delete_index_row(key)
                continue
            result.append(record)
            if len(result) >= limit:
                break
        return result

    def count_in_flight(self, cap: int = 5000) -> int:
        """Steps Dispatched or Running, counted from the deadline index (index rows only, one column,
        at most ``cap``): what the ``sas.step.in_flight`` gauge reads; it grows with live work, not
        with history, and is never used for a decision."""
        self.stats.queries += 1
        rows = self._index.query_entities(
            "PartitionKey lt @letters and ( Status eq @dispatched or Status eq @running )",
            parameters={"letters": "a", "dispatched": "Dispatched", "running": "Running"},
            select=["Status"],
            results_per_page=1000,
        )
        return sum(1 for _ in itertools.islice(rows, cap))

    def index_rows(self) -> list[dict[str, Any]]:
        """Every deadline-index row (for consistency checks in tests and the operator CLI; a full scan)."""
        return [dict(e, _key=f"{e['PartitionKey']}|{e['RowKey']}") for e in self._index.list_entities()]


def _http_date(text: str | None) -> datetime | None:
    """An HTTP ``Date`` header as an aware UTC datetime (``None`` if absent or unreadable)."""
    if not text:
        return None
    try:
        return parsedate_to_datetime(text).astimezone(UTC)
    except (TypeError, ValueError):
        return None


def decode_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def encode_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)
