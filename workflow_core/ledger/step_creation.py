"""Creating a workflow instance's steps: every step row Pending, in as few transactions as possible."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from azure.data.tables import TableTransactionError

from workflow_core import clock
from workflow_core.ledger.entities import _to_entity
from workflow_core.ledger.errors import InstanceConflict, InvalidLedgerInput, StepsAlreadyExist
from workflow_core.ledger.families import MAX_BATCH, STEPS_MARKER_ROW
from workflow_core.ledger.instance_store import InstanceHandle, to_instance_entity
from workflow_core.ledger.known_rows import if_match_write
from workflow_core.ledger.model import NewStep, StepRecord, validate_instance_id


class StepCreationMixin:
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
        """Write every step of a new instance as Pending, atomically per 100-row batch (with
        ``instance``, its record changes in the first batch too).

        Idempotent, as an activity may run twice: the batch goes first, and only on a conflict are
        the stored rows read and returned when they are the same steps; other steps raise.
        """
        validate_instance_id(instance_id)
        now = clock.utcnow()
        records, operations = self.step_creation_operations(
            instance_id, workflow_name, steps, actor, orchestration_id, version, now
        )
        ids = [r.step_id for r in records]
        instance_updated = instance_index = None
        if instance is not None:
            if instance.record.instance_id != instance_id:
                raise InvalidLedgerInput("the instance handle belongs to another instance")
            instance_updated, instance_index = self.prepare_instance_change(
                instance.record, instance.record.status, dict(instance_changes or {}), now
            )
            operations.insert(0, if_match_write(instance.record, instance_updated, to_instance_entity))
            if instance_index is not None:
                self._create_instance_index_row(instance_index, instance_updated)
        results: list[Any] = []
        try:
            for start in range(0, len(operations), MAX_BATCH):
                results.extend(self._steps.submit_transaction(operations[start : start + MAX_BATCH]))
        except TableTransactionError as exc:
            if not results:
                self._delete_index_row(instance_index)
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
            self._instance_written_in_batch(instance, instance_updated, results.pop(0))
        results = results[1:]  # the marker row
        return [r.model_copy(update={"etag": res["etag"]}) for r, res in zip(records, results, strict=False)]

    def step_creation_operations(
        self,
        instance_id: str,
        workflow_name: str,
        steps: Sequence[NewStep],
        actor: str,
        orchestration_id: str | None,
        version: str | None,
        now: datetime,
    ) -> tuple[list[StepRecord], list[tuple]]:
        """The marker row (a second creation conflicts on it whatever its steps are), every step
        Pending, and one ``created`` audit row, as entity-group operations."""
        if not steps:
            raise InvalidLedgerInput("a workflow instance needs at least one step")
        ids = [s.step_id for s in steps]
        if len(set(ids)) != len(ids):
            raise InvalidLedgerInput(f"duplicate step ids in {ids}")
        records = [
            StepRecord(
                **s.model_dump(),  # a new step's fields are step-row fields of the same names
                instance_id=instance_id,
                workflow_name=workflow_name,
                workflow_version=version,
                sequence=i,
                orchestration_id=orchestration_id or instance_id,
                created_at=now,
                updated_at=now,
            )
            for i, s in enumerate(steps)
        ]
        marker = {"PartitionKey": instance_id, "RowKey": STEPS_MARKER_ROW, "Workflow": workflow_name}
        why = f"workflow {workflow_name} with {len(records)} steps"
        audit = self._audit_entity(instance_id, "*", actor, "created", None, "Pending", 0, why, now)
        return records, [("create", marker), *(("create", _to_entity(r)) for r in records), ("create", audit)]

    def _instance_written_in_batch(self, handle: InstanceHandle, updated: Any, result: Any) -> None:
        self.instance_written(handle.record, updated)
        handle.record = updated.model_copy(update={"etag": result["etag"]})
