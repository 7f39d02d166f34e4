"""The audit trail: one row per recorded move of a step, in the step's own partition, built the
same way by every write path, in the transaction of the change it describes."""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import Any

from workflow_core import clock
from workflow_core.ledger.entities import _deadline_key, _nonce, entity_values, to_entity
from workflow_core.ledger.families import AUDIT_PREFIX
from workflow_core.ledger.model import AuditEntry, entity_properties, validate_instance_id

_AUDIT_SEQUENCE = itertools.count()
_FIELDS = entity_properties(AuditEntry, keys={"instance_id"})  # AuditEntry field -> entity property


class AuditTrailMixin:
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
            entry, f"{AUDIT_PREFIX}{_deadline_key(at)}~{next(_AUDIT_SEQUENCE):012d}~{_nonce()}", _FIELDS
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
        self._steps.create_entity(
            self._audit_entity(
                instance_id, step_id, actor, action, status, status, attempt, reason, clock.utcnow()
            )
        )

    def audit_trail(self, instance_id: str) -> list[AuditEntry]:
        validate_instance_id(instance_id)
        entities = self._steps.query_entities(
            "PartitionKey eq @pk and RowKey gt @lo and RowKey lt @hi",
            parameters={"pk": instance_id, "lo": AUDIT_PREFIX, "hi": AUDIT_PREFIX + "~"},
        )
        rows = (
            AuditEntry.model_validate({"instance_id": e["PartitionKey"], **entity_values(e, _FIELDS)})
            for e in entities
        )
        return sorted(rows, key=lambda a: a.at)
