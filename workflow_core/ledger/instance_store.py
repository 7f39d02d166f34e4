"""Reads and writes of the instance record (where its index row goes: ``index_keys.py``), and the
creation of its steps: every step row Pending, in as few transactions as possible."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from azure.core.exceptions import ResourceNotFoundError
from azure.data.tables import TableTransactionError

from workflow_core import clock
from workflow_core.ledger import errors
from workflow_core.ledger.entities import _to_entity, changed_fields, entity_values, to_entity
from workflow_core.ledger.families import INSTANCE_ROW, MAX_BATCH, STEPS_MARKER_ROW
from workflow_core.ledger.index_keys import plan_instance_index
from workflow_core.ledger.instance import (
    INSTANCE_FIELDS,
    INSTANCE_MUTABLE,
    INSTANCE_TRANSITIONS,
    SUPERVISED_INSTANCE_STATUSES,
    InstanceRecord,
    InstanceStatus,
    SchedulerLostPolicy,
)
from workflow_core.ledger.instance_list import InstanceListMixin, listing_changed
from workflow_core.ledger.known_rows import if_match_write
from workflow_core.ledger.model import NewStep, StepRecord, parse_status, require_aware, validate_instance_id

INSTANCE_AUDIT_STEP = "*"  # the audit rows of instance changes name no step
# Steps that fit the instance record's creating transaction: the record, its audit row, the steps'
# marker and their audit row take four of the transaction's 100 operations.
MAX_STEPS_WITH_INSTANCE = MAX_BATCH - 4


@dataclass
class InstanceHandle:
    """The instance record a scheduler activity holds while it writes steps: after a write that
    carried it, it holds the instance as written, so a second write in the same decision builds on it."""

    record: InstanceRecord


def to_instance_entity(record: InstanceRecord) -> dict[str, Any]:
    return to_entity(record, INSTANCE_ROW, INSTANCE_FIELDS)


def from_instance_entity(entity: Any) -> InstanceRecord:
    return InstanceRecord.model_validate(
        {"instance_id": entity["PartitionKey"], **entity_values(entity, INSTANCE_FIELDS)}
    )


class InstanceLedgerMixin(InstanceListMixin):
    def create_instance(self, instance_id: str, workflow: str, **kwargs: Any) -> InstanceRecord:
        """Write the record of a new instance (see :meth:`create_instance_with_steps`)."""
        return self.create_instance_with_steps(instance_id, workflow, **kwargs)[0]

    def create_instance_with_steps(
        self,
        instance_id: str,
        workflow: str,
        *,
        actor: str,
        input_json: str,
        scheduler_deadline: datetime,
        business_key: str | None = None,
        max_resumes: int = 3,
        on_scheduler_lost: SchedulerLostPolicy = "resume",
        version: str,
        trace_parent: str | None = None,
        trace_state: str | None = None,
        steps_due_after_seconds: float | None = None,
        steps: Sequence[NewStep] | None = None,
    ) -> tuple[InstanceRecord, dict[str, str]]:
        """Write the record of a new instance, Running, *before* its orchestration starts (one that
        never starts is found like one that died), with its ``steps`` in the same transaction; return
        it and each step's ETag, which a first dispatch may write against unread (``known_rows.py``).

        ``steps_due_after_seconds`` (the shortest step deadline): the index row falls due by then
        too, early enough to watch every step without a move at dispatch.
        """
        validate_instance_id(instance_id)
        if steps and len(steps) > MAX_STEPS_WITH_INSTANCE:
            raise errors.InvalidLedgerInput(
                f"{len(steps)} steps do not fit the instance record's transaction "
                f"(at most {MAX_STEPS_WITH_INSTANCE}): let the orchestration create them"
            )
        now = clock.utcnow()
        step_rows: list[tuple] = []  # built (and so checked) before anything is written
        if steps:
            step_rows = self.step_creation_operations(
                instance_id, workflow, steps, actor, None, version, now
            )[1]
        record = InstanceRecord(
            instance_id=instance_id,
            workflow=workflow,
            version=version,
            status=InstanceStatus.RUNNING,
            orchestration_id=instance_id,
            owner="scheduler",
            started_at=now,
            updated_at=now,
            business_key=business_key,
            max_resumes=max_resumes,
            on_scheduler_lost=on_scheduler_lost,
            scheduler_deadline=require_aware(scheduler_deadline, "scheduler_deadline"),
            input_ref=input_json,
            trace_parent=trace_parent,
            trace_state=trace_state,
        )
        steps_due = now + timedelta(seconds=steps_due_after_seconds) if steps_due_after_seconds else None
        new_index = plan_instance_index(record, record, steps_due)[0]  # it has none yet
        record = record.model_copy(update={"index_key": new_index})
        self._create_instance_index_row(new_index, record)
        why = f"workflow {workflow} ({version}) accepted; scheduler due by {scheduler_deadline.isoformat()}"
        moved = (None, record.status.value, None)  # from nothing to Running, no attempt
        audit = self._audit_entity(
            instance_id, INSTANCE_AUDIT_STEP, actor, "instance-created", *moved, why, now
        )
        operations = [("create", to_instance_entity(record)), ("create", audit), *step_rows]
        try:
            result = self._steps.submit_transaction(operations)
        except TableTransactionError as exc:
            self._delete_index_row(record.index_key)
            if exc.status_code == 409:
                existing = self.find_instance(instance_id)
                raise errors.InstanceAlreadyExists(
                    instance_id, existing.workflow if existing else "?"
                ) from None
            raise
        self.write_listing_row(record)
        # the steps' results follow the record and its audit row (and skip the marker and audit rows)
        step_keys = (op[1]["RowKey"] for op in step_rows)
        step_etags = {k: r["etag"] for k, r in zip(step_keys, result[2:], strict=False) if k[0] != "~"}
        return record.model_copy(update={"etag": result[0]["etag"]}), step_etags

    def transition_instance(
        self,
        record: InstanceRecord,
        to: InstanceStatus | str,
        *,
        actor: str,
        reason: str = "",
        with_rows: list[tuple] | None = None,
        **changes: Any,
    ) -> InstanceRecord:
        """Move an instance along :data:`INSTANCE_TRANSITIONS`, ETag-guarded, with its audit row (and
        ``with_rows``: a failing one is a lost race)."""
        target = parse_status(to, InstanceStatus, "instance")
        if target not in INSTANCE_TRANSITIONS[record.status]:
            raise errors.IllegalInstanceTransition(record, target, INSTANCE_TRANSITIONS[record.status])
        return self._write_instance(record, target, actor, reason, changes, with_rows)

    def update_instance(
        self, record: InstanceRecord, *, actor: str, reason: str = "", **changes: Any
    ) -> InstanceRecord:
        if "status" in changes:
            raise errors.InvalidLedgerInput("use transition_instance() to change an instance's status")
        return self._write_instance(record, record.status, actor, reason, changes)

    def _write_instance(
        self,
        record: InstanceRecord,
        status: InstanceStatus,
        actor: str,
        reason: str,
        changes: dict[str, Any],
        with_rows: list[tuple] | None = None,
    ) -> InstanceRecord:
        now = clock.utcnow()
        updated, new_index = self.prepare_instance_change(record, status, changes, now)
        operation = if_match_write(record, updated, to_instance_entity)  # refused (a merge) before any write
        if new_index is not None:
            self._create_instance_index_row(new_index, updated)
        action = "instance-transition" if status != record.status else "instance-update"
        moved = (record.status.value, status.value, updated.resume_count)
        audit = self._audit_entity(
            record.instance_id, INSTANCE_AUDIT_STEP, actor, action, *moved, reason, now
        )
        try:
            result = self._steps.submit_transaction([operation, ("create", audit), *(with_rows or [])])
        except TableTransactionError as exc:
            self._delete_index_row(new_index)
            failed_at = getattr(exc, "index", None)
            if exc.status_code == 412 or (failed_at is not None and failed_at >= 2):
                raise errors.InstanceConflict(record.instance_id) from None
            if exc.status_code == 404:
                raise errors.InstanceNotFound(record.instance_id) from None
            raise
        self.instance_written(record, updated)
        if listing_changed(record, updated):
            self.write_listing_row(updated)
        return updated.model_copy(update={"etag": result[0]["etag"]})

    def prepare_instance_change(
        self,
        record: InstanceRecord,
        status: InstanceStatus,
        changes: dict[str, Any],
        now: datetime,
        *,
        due_by: datetime | None = None,
    ) -> tuple[InstanceRecord, str | None]:
        """The instance as it will be written, and the index row to create first (if any)."""
        data = changed_fields(
            record, status, changes, now, INSTANCE_MUTABLE, ("instance record", "a workflow instance")
        )
        if status not in SUPERVISED_INSTANCE_STATUSES and "scheduler_deadline" not in changes:
            data["scheduler_deadline"] = None
        if status in (InstanceStatus.SUCCEEDED, InstanceStatus.COMPENSATED, InstanceStatus.CANCELLED):
            data["completed_at"] = data["completed_at"] or now
        draft = type(record).model_validate(data)  # a snapshot stays one: merged, never replaced
        # only one flagged for an operator may promise nothing (parked: no index row)
        promises = draft.scheduler_deadline is not None or draft.needs_attention
        if draft.status in SUPERVISED_INSTANCE_STATUSES and not promises:
            raise errors.InvalidLedgerInput(
                f"instance status {draft.status.value} needs a scheduler deadline"
            )
        new_index, index_key = plan_instance_index(record, draft, due_by)
        return draft.model_copy(update={"index_key": index_key}), new_index

    def instance_written(self, record: InstanceRecord, updated: InstanceRecord) -> None:
        if record.index_key and record.index_key != updated.index_key:
            self._delete_index_row(record.index_key)

    def _create_instance_index_row(self, key: str, record: InstanceRecord) -> None:
        self._create_index_row(
            key, InstanceId=record.instance_id, Kind="instance", Status=record.status.value
        )

    def find_instance(self, instance_id: str) -> InstanceRecord | None:
        validate_instance_id(instance_id)
        try:
            entity = self._steps.get_entity(instance_id, INSTANCE_ROW)
        except ResourceNotFoundError:
            return None
        return from_instance_entity(entity)

    def get_instance(self, instance_id: str) -> InstanceRecord:
        record = self.find_instance(instance_id)
        if record is None:
            raise errors.InstanceNotFound(instance_id)
        return record

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
                raise errors.InvalidLedgerInput("the instance handle belongs to another instance")
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
                raise errors.InstanceConflict(instance_id) from None
            if exc.status_code != 409:  # 409: a concurrent (or earlier) call created them first
                raise
            existing = self.list_for_instance(instance_id)
            if [r.step_id for r in existing] != ids or {r.workflow_name for r in existing} != {workflow_name}:
                raise errors.StepsAlreadyExist(
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
            raise errors.InvalidLedgerInput("a workflow instance needs at least one step")
        ids = [s.step_id for s in steps]
        if len(set(ids)) != len(ids):
            raise errors.InvalidLedgerInput(f"duplicate step ids in {ids}")
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


def outcome_json(status: str, *, failed_step: str | None = None, error: str | None = None) -> str:
    """The instance's ``outcome``: small on purpose (outputs stay on the step rows)."""
    return json.dumps(
        {"status": status, "failed_step": failed_step, "error": error[:2000] if error else None}
    )
