"""Reads of step rows: one step, a step with its instance record, an instance's steps."""

from __future__ import annotations

from azure.core.exceptions import ResourceNotFoundError

from workflow_core.ledger.entities import _from_entity
from workflow_core.ledger.errors import StepNotFound
from workflow_core.ledger.instance import INSTANCE_ROW
from workflow_core.ledger.instance_store import InstanceHandle, from_instance_entity
from workflow_core.ledger.model import StepRecord, validate_instance_id, validate_step_id


class StepReadsMixin:
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
        """A step and its instance record in one partition query."""
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
        validate_instance_id(instance_id)
        self.stats.queries += 1
        entities = self._steps.query_entities(
            "PartitionKey eq @pk and RowKey lt @audit", parameters={"pk": instance_id, "audit": "~"}
        )
        records = [_from_entity(e) for e in entities]
        self.stats.step_entities_read += len(records)
        return sorted(records, key=lambda r: r.sequence)
