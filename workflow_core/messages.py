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
from workflow_core.agent_messages import reply_token
from workflow_core.contracts import ReplyVersions, ResultMessage, StepKind, WorkMessage, WorkVersions
from workflow_core.ledger import InstanceRecord, StepRecord, decode_json
from workflow_core.ledger.known_rows import (
    WATCHED_KEY,
    basis_row_key,
    claim_row_key,
    instance_fields,
    step_fields,
)
from workflow_core.ledger.watch import is_watched
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
        reply_token=reply_token(record.attempt_token),
        idempotency_key=f"{record.instance_id}:{record.step_id}",  # StepContext.idempotency_key
    )


def claim_digest(message: WorkMessage) -> str:
    """SHA-256 of the message as sent, its ETags aside: the claim-key row's name
    (``contracts.WorkVersions``). Both sides compute it from the model, so the same message always
    gives the same digest, and any other content another."""
    return _digest_without_etags(message)


def reply_digest(reply: ResultMessage) -> str:
    """SHA-256 of a success reply as sent, its ETags aside: the basis row's name
    (``contracts.ReplyVersions``). The worker computes it before its record, the scheduler from the
    event it took; any other content gives another digest."""
    return _digest_without_etags(reply)


def payload_digest(value: Any) -> str:
    """SHA-256 of a JSON value in canonical form (``ResultBasis.output_digest``)."""
    return hashlib.sha256(_canonical(value)).hexdigest()


def _digest_without_etags(model: WorkMessage | ResultMessage) -> str:
    body = model.model_dump(mode="json", exclude_none=True)
    body.get("ledger", {}).pop("etags", None)
    return hashlib.sha256(_canonical(body)).hexdigest()


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class ClaimableWork:
    """The work message of a first dispatch, built from the rows as the dispatch writes them, and
    the claim-key row that lets the worker claim it without reading the ledger.

    ``rows`` is the dispatch's ``with_rows`` (``StepLedger.transition``): it runs before the write,
    with the step and instance as they will be written, builds the body and returns the claim-key
    row's insert; ``message`` adds the ETags the write returned."""

    def __init__(self, watched: list[str] | None = None, keyed_reply: bool = False) -> None:
        self.body: WorkMessage | None = None
        # the in-flight steps the instance's row watched as the scheduler's snapshot names them
        # (None: unknown), and whether the scheduler takes a success unread (``keyed_reply``)
        self.watched_before = watched
        self.keyed_reply = keyed_reply

    def rows(self, step: StepRecord, instance: InstanceRecord | None) -> list[tuple]:
        watched = None
        if self.watched_before is not None and instance is not None:
            # no step becomes watched without a write to the instance: this one is the only new one
            watched = sorted(set(self.watched_before) | ({step.step_id} if is_watched(step) else set()))
        versions = WorkVersions(
            step=step_fields(step),
            instance=instance_fields(instance) if instance is not None else None,
            watched=watched,
            keyed_reply=self.keyed_reply and instance is not None,
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


class KeyedReply:
    """A work success recorded with a *basis row*, and the reply that names it (``ReplyVersions``).

    ``rows`` is the record's ``with_rows``: it runs before the write, with the instance as it will be
    written, puts that snapshot in the reply (with the steps its row may still watch, when known) and
    returns the insert of the row named by the reply's digest; ``reply`` adds the ETag the write
    returned. The result handler raises such a reply unread, and the scheduler's next write deletes
    the row in its own transaction (``contracts.ResultBasis``)."""

    def __init__(self, reply: ResultMessage, watched: list[str] | None) -> None:
        self.plain = reply
        self.watched = watched
        self.body: ResultMessage | None = None

    def rows(self, step: StepRecord, instance: InstanceRecord | None) -> list[tuple]:
        if instance is None:
            return []
        fields = instance_fields(instance)
        if self.watched is not None:
            fields[WATCHED_KEY] = list(self.watched)
        self.body = self.plain.model_copy(update={"ledger": ReplyVersions(instance=fields)})
        key = basis_row_key(step.step_id, reply_digest(self.body))
        return [("create", {"PartitionKey": step.instance_id, "RowKey": key})]

    def reply(self, instance: InstanceRecord | None) -> ResultMessage:
        """The reply to send after the write: with the instance's ETag as written; the plain reply
        (read by the result handler) when the write was not the one the row was built for."""
        body = self.body
        if body is None or body.ledger is None or instance is None or not instance.etag:
            return self.plain
        written = {k: v for k, v in body.ledger.instance.items() if k != WATCHED_KEY}
        if written != instance_fields(instance):
            return self.plain
        versions = body.ledger.model_copy(update={"etags": {"instance": instance.etag}})
        return body.model_copy(update={"ledger": versions})
