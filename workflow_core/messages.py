"""The work message of a step attempt, built from its ledger row.

One builder for everyone who sends work (the dispatch activities, the watchdog's re-send), so a
re-send is the same message as the first send: same body shape, same MessageId (Service Bus
duplicate detection and the worker's claim rules then dedupe it).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from workflow_core import tracing
from workflow_core.contracts import StepKind, WorkMessage
from workflow_core.ledger import StepRecord, decode_json
from workflow_core.transport import OutgoingMessage, message_id_for


def stored_input(record: StepRecord) -> dict[str, Any]:
    """The step's input as the ledger stored it (an object; anything else is wrapped)."""
    value = decode_json(record.input_ref)
    return value if isinstance(value, dict) else {} if value is None else {"value": value}


def work_message(
    record: StepRecord,
    kind: StepKind = "work",
    *,
    deadline: datetime | None = None,
    input: dict[str, Any] | None = None,
) -> OutgoingMessage:
    """The message for the step's current attempt of ``kind`` (compensation attempt for ``compensate``).

    ``deadline`` defaults to the ledger's; ``input`` to the stored step input (compensators are sent
    the step's input and output by the compensation orchestrator instead). The trace context the
    dispatch recorded on the row rides along as the ``traceparent``/``tracestate`` properties, so a
    re-send continues the same trace.
    """
    attempt = record.attempt if kind == "work" else record.compensation_attempt
    agent = record.agent if kind == "work" else (record.compensator or "")
    when = deadline or record.deadline
    if when is None:
        raise ValueError(f"step {record.step_id!r} has no deadline to put in its work message")
    body = WorkMessage(
        kind=kind,
        instance_id=record.instance_id,
        orchestration_id=record.orchestration_id or record.instance_id,
        workflow=record.workflow_name,
        step_id=record.step_id,
        agent=agent,
        attempt=attempt,
        deadline=when.astimezone(UTC).isoformat(),
        input=stored_input(record) if input is None else input,
    )
    return OutgoingMessage(
        body=body.model_dump(mode="json"),
        message_id=message_id_for(record.instance_id, record.step_id, attempt, kind=kind),
        subject=agent,
        application_properties={
            "kind": kind,
            "agent": agent,
            "instance_id": record.instance_id,
            "step_id": record.step_id,
            "attempt": attempt,
            **tracing.message_properties(tracing.from_fields(record.trace_parent, record.trace_state)),
        },
    )
