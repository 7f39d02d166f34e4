"""The work message of a step attempt, built from its ledger row.

One builder for everyone who sends work (the dispatch activities, the watchdog's re-send), so a
re-send is the same message as the first send: same work, same MessageId (Service Bus duplicate
detection and the worker's claim rules then dedupe it). Only a first dispatch's message also
carries the rows' versions (``ClaimableWork``), for a claim without a read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from workflow_core import tracing
from workflow_core.contracts import StepKind, WorkMessage, WorkVersions
from workflow_core.ledger import InstanceRecord, StepRecord, decode_json
from workflow_core.ledger.known_rows import claim_row_key, instance_fields, step_fields
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
    body = work_body(record, kind, deadline=deadline, input=input)
    return OutgoingMessage(
        body=body.model_dump(mode="json", exclude_none=True),
        message_id=message_id_for(record.instance_id, record.step_id, body.attempt, kind=kind),
        subject=body.agent,
        application_properties={
            "kind": kind,
            "agent": body.agent,
            "instance_id": record.instance_id,
            "step_id": record.step_id,
            "attempt": body.attempt,
            **tracing.message_properties(tracing.from_fields(record.trace_parent, record.trace_state)),
        },
    )


def work_body(
    record: StepRecord,
    kind: StepKind = "work",
    *,
    deadline: datetime | None = None,
    input: dict[str, Any] | None = None,
    versions: WorkVersions | None = None,
) -> WorkMessage:
    """The body of :func:`work_message` (with ``versions``: for a claim without a read)."""
    attempt = record.attempt if kind == "work" else record.compensation_attempt
    agent = record.agent if kind == "work" else (record.compensator or "")
    when = deadline or record.deadline
    if when is None:
        raise ValueError(f"step {record.step_id!r} has no deadline to put in its work message")
    return WorkMessage(
        kind=kind,
        instance_id=record.instance_id,
        orchestration_id=record.orchestration_id or record.instance_id,
        workflow=record.workflow_name,
        step_id=record.step_id,
        agent=agent,
        attempt=attempt,
        deadline=when.astimezone(UTC).isoformat(),
        input=stored_input(record) if input is None else input,
        ledger=versions,
    )


def claim_digest(message: WorkMessage) -> str:
    """SHA-256 of the message as sent, its ETags aside: the claim-key row's name
    (``contracts.WorkVersions``). Both sides compute it from the model, so the same message always
    gives the same digest, and any other content another."""
    body = message.model_dump(mode="json", exclude_none=True)
    body.get("ledger", {}).pop("etags", None)
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class ClaimableWork:
    """The work message of a first dispatch, built from the rows as the dispatch writes them, and
    the claim-key row that lets the worker claim it without reading the ledger.

    ``rows`` is the dispatch's ``with_rows`` (``StepLedger.transition``): it runs before the write,
    with the step and instance as they will be written, builds the body and returns the claim-key
    row's insert; ``message`` adds the ETags the write returned."""

    def __init__(self) -> None:
        self.body: WorkMessage | None = None

    def rows(self, step: StepRecord, instance: InstanceRecord | None) -> list[tuple]:
        versions = WorkVersions(
            step=step_fields(step), instance=instance_fields(instance) if instance is not None else None
        )
        self.body = work_body(step, "work", versions=versions)
        key = claim_row_key(step.step_id, claim_digest(self.body))
        return [("create", {"PartitionKey": step.instance_id, "RowKey": key})]

    def message(self, step: StepRecord, instance: InstanceRecord | None) -> OutgoingMessage:
        """The message to send after the write: ``step`` and ``instance`` as written (their ETags)."""
        sent = work_message(step, "work")
        versions = self.body.ledger if self.body is not None else None
        written_instance = instance_fields(instance) if instance is not None else None
        if versions is None or step.etag is None or versions.step != step_fields(step):
            return sent  # not built for this write (a lost race, another outcome): claimed after a read
        if versions.instance != written_instance:
            return sent
        etags = {"step": step.etag, **({"instance": instance.etag} if instance and instance.etag else {})}
        body = self.body.model_copy(update={"ledger": self.body.ledger.model_copy(update={"etags": etags})})
        return dataclasses.replace(sent, body=body.model_dump(mode="json", exclude_none=True))
