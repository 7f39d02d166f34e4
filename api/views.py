"""JSON views of ledger rows, audit entries and Durable orchestration statuses.

The operator API's instance page shows dozens of step inputs and outputs, each up to the ledger's
32,000 characters: each is cut to :data:`PAYLOAD_CAP` characters and marked, and the full text stays
in the ledger (and in ``GET /api/workflows/{instance_id}``).
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from datetime import datetime
from typing import Any

from azure.durable_functions.models.DurableOrchestrationStatus import DurableOrchestrationStatus

from api.problems import iso
from workflow_core.ledger import AuditEntry, InstanceRecord, StepRecord

PAYLOAD_CAP = 4096
# Statuses that end a work attempt, and the compensation's own phases.
_ATTEMPT_ENDS = {"Succeeded", "Failed", "TimedOut", "Skipped", "Cancelled"}
_COMPENSATION_ENDS = {"Compensated", "CompensationFailed", "Skipped"}


def decode_maybe_json(value: Any) -> Any:
    """Values the Durable API may hand back as JSON text (e.g. an orchestration's input)."""
    if isinstance(value, str) and value.strip()[:1] in ("{", "[", '"'):
        with contextlib.suppress(ValueError):
            return json.loads(value)
    return value


def _ref(text: str | None) -> Any:
    """A step's stored input/result: JSON text, or (when large) a reference string kept as is."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


def _fields(obj: Any, names: str) -> dict[str, Any]:
    """``obj``'s attributes ``names`` under their camelCase names, times in ISO 8601, enums as values."""
    values = {camel(name): getattr(obj, name) for name in names.split()}
    return {k: iso(v) if isinstance(v, datetime) else getattr(v, "value", v) for k, v in values.items()}


def step_view(record: StepRecord) -> dict[str, Any]:
    return {
        "id": record.step_id,
        "name": record.step_name,
        **_fields(
            record, "sequence agent status attempt max_attempts owner deadline last_heartbeat last_error"
        ),
        "compensation": {
            "compensator": record.compensator,
            "status": record.compensation_status,
            "attempt": record.compensation_attempt,
        },
        "output": _ref(record.result_ref),
        **_fields(record, "created_at updated_at completed_at resent_at orchestration_id"),
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
        **_fields(status, "name instance_id"),
        "runtimeStatus": runtime_status_name(status),
        **_fields(status, "custom_status output created_time last_updated_time"),
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


def capped(text: str | None) -> dict[str, Any] | None:
    """``{"value": ..., "size": n, "truncated": bool}``: the JSON value when it fits, else a text preview."""
    if text is None:
        return None
    if len(text) > PAYLOAD_CAP:
        return {"value": None, "preview": text[:PAYLOAD_CAP], "size": len(text), "truncated": True}
    return {"value": _ref(text), "size": len(text), "truncated": False}


INSTANCE_FIELDS = (
    "instance_id workflow version status orchestration_id generation business_key started_at updated_at "
    "completed_at resume_count max_resumes scheduler_deadline needs_attention attention_reason last_error"
)


def instance_record_view(record: InstanceRecord) -> dict[str, Any]:
    return _fields(record, INSTANCE_FIELDS)


def attempts_view(audit: list[AuditEntry]) -> list[dict[str, Any]]:
    """Each step's attempts in ledger order, read off the audit trail (a step row holds only its latest):
    dispatched when, ended how and when. A compensation is one more, of kind ``compensate``."""
    attempts: list[dict[str, Any]] = []
    open_work: dict[str, dict[str, Any]] = {}
    open_undo: dict[str, dict[str, Any]] = {}

    def begin(entry: AuditEntry, kind: str, attempt: int | None, opened: dict[str, dict[str, Any]]) -> None:
        opened[entry.step_id] = {
            "step": entry.step_id,
            "kind": kind,
            "attempt": attempt,
            "startedAt": iso(entry.at),
            "endedAt": None,
            "outcome": None,
            "by": entry.actor,
        }
        attempts.append(opened[entry.step_id])

    for entry in audit:
        if entry.action != "transition":
            continue
        step, to = entry.step_id, entry.to_status
        if to == "Dispatched":
            begin(entry, "work", entry.attempt, open_work)
        elif to in _ATTEMPT_ENDS and step in open_work:
            open_work.pop(step).update(endedAt=iso(entry.at), outcome=to)
        elif to == "Compensating" and step not in open_undo:
            begin(entry, "compensate", None, open_undo)
        elif to in _COMPENSATION_ENDS and step in open_undo:
            open_undo.pop(step).update(endedAt=iso(entry.at), outcome=to)
    return attempts


def step_detail_view(record: StepRecord) -> dict[str, Any]:
    """A step as the instance page shows it: the status view plus its capped input and output."""
    view = step_view(record)
    view.pop("output", None)
    view["heartbeatTimeoutSeconds"] = record.heartbeat_timeout_seconds
    view["input"] = capped(record.input_ref)
    view["output"] = capped(record.result_ref)
    return view


def _as_of_current_attempt(view: dict[str, Any], step: StepRecord, audit: list[AuditEntry]) -> dict[str, Any]:
    """A step's ``lastError`` as of its current attempt: the row keeps the text of an earlier failed
    attempt while the next one is out, which would read as that attempt's failure. It moves to
    ``earlierError`` (with the attempt it belongs to) until the current attempt ends."""
    if not step.last_error or step.status.value not in ("Dispatched", "Running"):
        return view
    failed_in = [
        a.attempt
        for a in audit
        if a.step_id == step.step_id and a.action == "transition" and a.to_status in ("Failed", "TimedOut")
    ]
    if failed_in and failed_in[-1] is not None and failed_in[-1] < step.attempt:
        view["earlierError"] = {"attempt": failed_in[-1], "error": view.get("lastError")}
        view["lastError"] = None
    return view


def instance_detail_view(
    instance_id: str, record: Any, steps: list[StepRecord], audit: list[AuditEntry]
) -> dict[str, Any]:
    workflow = getattr(record, "workflow", None) or (steps[0].workflow_name if steps else None)
    return {
        "instanceId": instance_id,
        "workflow": workflow,
        "record": instance_record_view(record) if record is not None else None,
        "input": capped(getattr(record, "input_ref", None)),
        "outcome": capped(getattr(record, "outcome", None)),
        "steps": [_as_of_current_attempt(step_detail_view(s), s, audit) for s in steps],
        "attempts": attempts_view(audit),
        "audit": [audit_view(a) for a in audit],
        "payloadCap": PAYLOAD_CAP,
    }
