"""The step ledger on Azure Table Storage (layout: docs/architecture.md, "The step ledger").

Audit rows join the transaction of the change they describe, so the trail never misses or invents a
move. The deadline index is another table: the order of writes that keeps every watched step's row
(1, 2, 3 in ``_write``) is argued in docs/architecture.md, "The deadline index".
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.data.tables import TableClient, TableServiceClient, TableTransactionError

from workflow_core import clock
from workflow_core.ledger import errors
from workflow_core.ledger.deadline_index import ATTENTION_PARTITION, DeadlineIndexMixin
from workflow_core.ledger.entities import (
    _MUTABLE,
    _deadline_key,
    _from_entity,
    _nonce,
    _to_entity,
    changed_fields,
    entity_values,
    to_entity,
)
from workflow_core.ledger.families import AUDIT_PREFIX
from workflow_core.ledger.index_keys import index_partition
from workflow_core.ledger.instance import InstanceRecord
from workflow_core.ledger.instance_store import (
    InstanceHandle,
    InstanceLedgerMixin,
    from_instance_entity,
    to_instance_entity,
)
from workflow_core.ledger.known_rows import if_match_write
from workflow_core.ledger.model import (
    ALLOWED_TRANSITIONS,
    ATTENTION_STATUSES,
    DEADLINE_STATUSES,
    AuditEntry,
    StepRecord,
    StepStatus,
    entity_properties,
    parse_status,
    require_aware,
    validate_instance_id,
    validate_step_id,
)
from workflow_core.ledger.purge import PurgeMixin
from workflow_core.ledger.watch import WATCHED_BY_INSTANCE, has_own_row, watched_by_instance
from workflow_core.settings import StorageConnection
from workflow_core.storage_clients import table_service_client, transaction_table_client

# Operations on other rows of the step's partition, given the step and instance as they will be written.
RowsOf = Callable[[StepRecord, InstanceRecord | None], list[tuple]]
_AUDIT_SEQUENCE = itertools.count()
_AUDIT_FIELDS = entity_properties(AuditEntry, keys={"instance_id"})  # AuditEntry field -> entity property


@dataclass
class LedgerStats:
    """What the ledger read, so tests and benchmarks can show what a query cost."""

    queries: int = 0
    index_entities_read: int = 0
    step_entities_read: int = 0
    stale_index_rows_removed: int = 0

    def reset(self) -> None:
        vars(self).update(vars(LedgerStats()))


class StepLedger(
    DeadlineIndexMixin,
    InstanceLedgerMixin,
    PurgeMixin,
):
    """Conditional (ETag) reads and writes of step rows, their instance record, their deadline index
    and their audit trail: step reads and the write path are here, the rest is mixed in."""

    def __init__(
        self,
        service: TableServiceClient,
        ledger_table: str,
        index_table: str,
        *,
        sdk_transactions: bool = False,
    ) -> None:
        self._service = service
        self.ledger_table_name = ledger_table
        self.index_table_name = index_table
        # Transactions through our $batch codec (table_transactions.py: a third of the SDK's CPU), or
        # the SDK's own with LEDGER_TRANSACTION_CODEC=sdk.
        self._client_for = (
            service.get_table_client if sdk_transactions else partial(transaction_table_client, service)
        )
        self._steps: TableClient = self._client_for(ledger_table)
        self._index: TableClient = self._client_for(index_table)
        self.stats = LedgerStats()

    @classmethod
    def from_connection_string(
        cls, connection_string: str, ledger_table: str = "StepLedger", index_table: str = "StepDeadlines"
    ) -> StepLedger:
        service = table_service_client(StorageConnection(connection_string=connection_string))
        return cls(service, ledger_table, index_table)

    def create_tables(self) -> None:
        """Idempotent; infra creates them in Azure."""
        for name in (self.ledger_table_name, self.index_table_name):
            with contextlib.suppress(ResourceExistsError):
                self._service.create_table(name)

    def table_client(self) -> TableClient:
        """For rows that are not steps (stored definition versions)."""
        return self._client_for(self.ledger_table_name)

    def close(self) -> None:
        self._steps.close()
        self._index.close()

    def get(self, instance_id: str, step_id: str) -> StepRecord:
        validate_instance_id(instance_id)
        validate_step_id(step_id)
        try:
            entity = self._steps.get_entity(instance_id, step_id)
        except ResourceNotFoundError:
            raise errors.StepNotFound(instance_id, step_id) from None
        self.stats.step_entities_read += 1
        return _from_entity(entity)

    def read_step_and_instance(
        self, instance_id: str, step_id: str
    ) -> tuple[StepRecord, InstanceHandle | None]:
        """A step and its instance record in one partition query."""
        step, handle, _ = self._step_and_instance(instance_id, step_id, watched=False)
        return step, handle

    def list_for_instance(self, instance_id: str) -> list[StepRecord]:
        return sorted(self._instance_partition_rows(instance_id, all_steps=True)[1], key=lambda r: r.sequence)

    def read_instance_and_steps(self, instance_id: str) -> tuple[InstanceRecord | None, list[StepRecord]]:
        """The instance record (None: none) and its steps in sequence, in one partition query."""
        entity, steps = self._instance_partition_rows(instance_id, all_steps=True)
        record = from_instance_entity(entity) if entity is not None else None
        return record, sorted(steps, key=lambda r: r.sequence)

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
        entry = AuditEntry(**{**locals(), "reason": reason[:4000]})  # the parameters are its fields
        # time, then this process's write order (many moves can share a timestamp, e.g. on a virtual
        # clock), then a nonce so two processes never collide
        return to_entity(
            entry, f"{AUDIT_PREFIX}{_deadline_key(at)}~{next(_AUDIT_SEQUENCE):012d}~{_nonce()}", _AUDIT_FIELDS
        )

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
        """Record a decision that changes no step (e.g. a late result)."""
        validate_instance_id(instance_id)
        now = clock.utcnow()
        self._steps.create_entity(
            self._audit_entity(instance_id, step_id, actor, action, status, status, attempt, reason, now)
        )

    def audit_trail(self, instance_id: str) -> list[AuditEntry]:
        validate_instance_id(instance_id)
        entities = self._steps.query_entities(
            "PartitionKey eq @pk and RowKey gt @lo and RowKey lt @hi",
            parameters={"pk": instance_id, "lo": AUDIT_PREFIX, "hi": AUDIT_PREFIX + "~"},
        )
        rows = (
            AuditEntry.model_validate({"instance_id": e["PartitionKey"], **entity_values(e, _AUDIT_FIELDS)})
            for e in entities
        )
        return sorted(rows, key=lambda a: a.at)

    def transition(
        self, record: StepRecord, to: StepStatus | str, *, actor: str, reason: str = "", **kwargs: Any
    ) -> StepRecord:
        """Move a step to ``to`` if the state machine allows it and nobody changed it since it was read
        (the other keywords: the step's changes and :meth:`_write`'s).

        With ``instance``, the instance record changes (``instance_changes``) in the same entity-group
        transaction and the handle then holds it as written; ``with_rows(step, instance)`` adds operations
        on other rows of the partition, built from the rows as they will be written (a failing one is a
        lost race).
        """
        target = parse_status(to)
        if target not in ALLOWED_TRANSITIONS[record.status]:
            raise errors.IllegalTransition(record, target, ALLOWED_TRANSITIONS[record.status])
        if target in DEADLINE_STATUSES and kwargs.get("deadline", record.deadline) is None:
            raise errors.InvalidLedgerInput(f"status {target.value} needs a deadline")
        return self._write(record, actor=actor, reason=reason, status=target, action="transition", **kwargs)

    def update(self, record: StepRecord, *, actor: str, reason: str = "", **kwargs: Any) -> StepRecord:
        """Change fields other than the status (owner, deadline, resent_at...) under the same ETag guard,
        with ``instance`` and ``instance_changes`` as in :meth:`transition`."""
        if "status" in kwargs:
            raise errors.InvalidLedgerInput("use transition() to change a step's status")
        return self._write(
            record, actor=actor, reason=reason, status=record.status, action="update", **kwargs
        )

    def unwatch(self, record: StepRecord, *, actor: str, reason: str) -> StepRecord:
        """Give a watched step a row of its own before its instance leaves supervision (``watch.py``)."""
        return self.update(record, actor=actor, reason=reason, own_row=True)

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
        own_row: bool = False,
        with_rows: RowsOf | None = None,
        **changes: Any,
    ) -> StepRecord:
        now = clock.utcnow()
        ids = (record.instance_id, record.step_id)
        data = changed_fields(record, status, changes, now, _MUTABLE, ("record", "a step"))
        if status in (StepStatus.SUCCEEDED, StepStatus.COMPENSATED) and "completed_at" not in changes:
            data["completed_at"] = now
        deadline = require_aware(data["deadline"], "deadline") if status in DEADLINE_STATUSES else None
        # The instance part first: the index row it will have decides whether it watches the step.
        instance_op = instance_updated = instance_index = None
        if instance is not None:
            if instance.record.instance_id != record.instance_id:
                raise errors.InvalidLedgerInput("the instance handle belongs to another instance")
            changes_i = dict(instance_changes or {})
            if status is StepStatus.SUCCEEDED and record.status is not StepStatus.SUCCEEDED:
                # the completion sequence: written with the completion, from the instance's counter
                changes_i["completions"] = data["completion_seq"] = instance.record.completions + 1
            instance_updated, instance_index = self.prepare_instance_change(
                instance.record, instance.record.status, changes_i, now, due_by=deadline
            )
            instance_op = if_match_write(instance.record, instance_updated, to_instance_entity)
        new_index: str | None = None
        if deadline is not None:
            data["deadline"] = deadline
            old = record.index_key
            if not own_row and watched_by_instance(record, deadline, instance_updated):
                data["index_key"] = WATCHED_BY_INSTANCE  # no row of its own (watch.py)
            elif not has_own_row(old) or old.startswith(ATTENTION_PARTITION) or record.deadline != deadline:
                new_index = f"{index_partition(deadline, *ids)}|{_deadline_key(deadline)}~{_nonce()}"
        elif status in ATTENTION_STATUSES:
            if not (record.index_key or "").startswith(ATTENTION_PARTITION):
                new_index = f"{ATTENTION_PARTITION}|{record.instance_id}~{record.step_id}~{_nonce()}"
        else:
            data["index_key"] = None
        if new_index is not None:
            data["index_key"] = new_index
        updated = type(record).model_validate(data)  # a known row stays known: merged again next time
        # built, with the caller's rows, before any index row is written: a refusal leaves nothing behind
        audit = self._audit_entity(
            *ids, actor, action, record.status.value, status.value, updated.attempt, reason, now
        )
        operations = [if_match_write(record, updated, _to_entity), ("create", audit)]
        if instance_op is not None:
            operations.append(instance_op)
        own_operations = len(operations)
        operations += with_rows(updated, instance_updated) if with_rows is not None else []
        if instance_index is not None:
            self._create_instance_index_row(instance_index, instance_updated)

        # (1) new index row first, so the step never points at a missing one
        if new_index is not None:
            self._create_index_row(
                new_index, InstanceId=ids[0], StepId=ids[1], Deadline=deadline or now, Status=status.value
            )
        # (2) step row + audit row, atomically, only if nobody changed the step since it was read
        try:
            result = self._steps.submit_transaction(operations)
        except TableTransactionError as exc:
            self._delete_index_row(new_index)
            self._delete_index_row(instance_index)
            failed_at = getattr(exc, "index", None)
            if failed_at is not None and failed_at >= own_operations:  # a caller's row: the race lost
                raise errors.ConcurrencyConflict(*ids) from None
            if exc.status_code == 412 and instance is not None and failed_at == 2:
                raise errors.InstanceConflict(record.instance_id) from None
            if exc.status_code == 412:
                raise errors.ConcurrencyConflict(*ids) from None
            if exc.status_code == 404:
                raise errors.StepNotFound(*ids) from None
            raise
        # (3) the old index row is now stale: deleted now or where a caller deferred it, not left
        # for overdue() to find (the singleton watchdog would read it once more: docs/capacity.md)
        if has_own_row(record.index_key) and record.index_key != updated.index_key:
            self._retire_index_row(record.index_key)
        if instance is not None:
            self._instance_written_in_batch(instance, instance_updated, result[2])
        return updated.model_copy(update={"etag": result[0]["etag"]})
