"""JSON views of ledger rows, audit entries and Durable orchestration statuses."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from azure.durable_functions.models.DurableOrchestrationStatus import DurableOrchestrationStatus

from api.responses import iso
from workflow_core.ledger import AuditEntry, StepRecord


def decode_maybe_json(value: Any) -> Any:
    """Values the Durable API may hand back as JSON text (e.g. an orchestration's input)."""
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in ("{", "[", '"'):
            try:
                return json.loads(text)
            except ValueError:
                return value
    return value


def _ref(text: str | None) -> Any:
    """A step's stored input/result: JSON text, or (when large) a reference string kept as is."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def step_view(record: StepRecord) -> dict[str, Any]:
    return {
        "id": record.step_id,
        "name": record.step_name,
        "sequence": record.sequence,
        "agent": record.agent,
        "status": record.status.value,
        "attempt": record.attempt,
        "maxAttempts": record.max_attempts,
        "owner": record.owner,
        "deadline": iso(record.deadline),
        "lastHeartbeat": iso(record.last_heartbeat),
        "lastError": record.last_error,
        "compensation": {
            "compensator": record.compensator,
            "status": record.compensation_status,
            "attempt": record.compensation_attempt,
        },
        "output": _ref(record.result_ref),
        "createdAt": iso(record.created_at),
        "updatedAt": iso(record.updated_at),
        "completedAt": iso(record.completed_at),
        "resentAt": iso(record.resent_at),
        "orchestrationId": record.orchestration_id,
    }


def audit_view(entry: AuditEntry) -> dict[str, Any]:
    return {
        "at": iso(entry.at),
        "step": entry.step_id,
        "actor": entry.actor,
        "action": entry.action,
        "from": entry.from_status,
        "to": entry.to_status,
        "attempt": entry.attempt,
        "reason": entry.reason,
    }


def runtime_status_name(status: DurableOrchestrationStatus) -> str | None:
    runtime = status.runtime_status
    return None if runtime is None else runtime.value


def orchestration_view(status: DurableOrchestrationStatus | None) -> dict[str, Any] | None:
    """The orchestration's status, or ``None`` when the Durable API does not know the instance."""
    if not status:  # DurableOrchestrationStatus is falsy for "not found"
        return None
    return {
        "name": status.name,
        "instanceId": status.instance_id,
        "runtimeStatus": runtime_status_name(status),
        "customStatus": status.custom_status,
        "output": status.output,
        "createdTime": iso(status.created_time),
        "lastUpdatedTime": iso(status.last_updated_time),
    }


def workflow_name_of(status: DurableOrchestrationStatus | None, steps: list[StepRecord]) -> str | None:
    if steps:
        return steps[0].workflow_name
    if status:
        data = decode_maybe_json(status.input_)
        if isinstance(data, dict) and isinstance(data.get("workflow"), str):
            return data["workflow"]
    return None


def step_counts(steps: list[StepRecord]) -> dict[str, int]:
    return dict(sorted(Counter(s.status.value for s in steps).items()))
