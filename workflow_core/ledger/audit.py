"""The audit trail: one row per recorded move of a step, in the step's own partition, built the
same way by every write path, in the transaction of the change it describes."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

from workflow_core import clock
from workflow_core.ledger.entities import _deadline_key, _nonce
from workflow_core.ledger.model import AuditEntry, validate_instance_id

AUDIT_PREFIX = "~audit~"
_AUDIT_SEQUENCE = itertools.count()


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
