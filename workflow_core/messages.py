"""The work message of a step attempt, built from its ledger row by everyone who sends work, so a
re-send is the same message as the first send (same MessageId: it is deduplicated). Only a first
dispatch's message also carries the rows' versions (``ClaimableWork``), for a claim without a read.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from workflow_core import tracing
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

EXPIRY_GRACE_SECONDS = 30.0  # an attempt's work stays valid this long past its deadline (clock skew)


def expires_at(deadline: datetime) -> datetime:
    """When the work of an attempt due by ``deadline`` expires: its message's ``expires_at``."""
    return deadline.astimezone(UTC) + timedelta(seconds=EXPIRY_GRACE_SECONDS)


def is_expired(message: WorkMessage, now: datetime, allowance: float = 0.0) -> bool:
    """Whether ``message`` arrived after its attempt expired: an agent must then do nothing.
    ``allowance``: seconds the reader's clock may run fast (the app's worker tolerates a fast clock,
    as the ledger, not its clock, decides whether its attempt is current)."""
    if not message.expires_at:
        return False
    limit = datetime.fromisoformat(message.expires_at) + timedelta(seconds=allowance)
    return limit.astimezone(UTC) <= now.astimezone(UTC)


def reply_token(attempt_token: str | None) -> str | None:
    """What a message-only agent's heartbeats and reply carry (``contracts.Heartbeat``), proving they
    answer the attempt whose row holds ``attempt_token``: a hash, so the token itself, which proves an
    event came from a ledger read, never leaves the ledger, and a guessed reply token changes nothing."""
    if not attempt_token:
        return None
    return hashlib.sha256(f"reply:{attempt_token}".encode()).hexdigest()


def stored_input(record: StepRecord) -> dict[str, Any]:
    value = decode_json(record.input_ref)
    return value if isinstance(value, dict) else {} if value is None else {"value": value}


def work_message(
    record: StepRecord,
    kind: StepKind = "work",
    *,
    deadline: datetime | None = None,
    input: dict[str, Any] | None = None,
    body: WorkMessage | None = None,
) -> OutgoingMessage:
    """The message for the step's current attempt of ``kind`` (``body`` when already built); the
    trace context recorded on the row rides along, so a re-send continues the same trace."""
    body = body if body is not None else work_body(record, kind, deadline=deadline, input=input)
    return OutgoingMessage(
        body=body.model_dump(mode="json", exclude_none=True),
        message_id=message_id_for(record.instance_id, record.step_id, body.attempt, kind=kind),
        subject=body.agent,
        expires_at=datetime.fromisoformat(body.expires_at) if body.expires_at else None,
        application_properties={
            "kind": kind,
            "agent": body.agent,
            "instance_id": record.instance_id,
            "step_id": record.step_id,
            "attempt": body.attempt,
            **tracing.from_fields(record.trace_parent, record.trace_state),
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
    attempt = record.attempt if kind == "work" else record.compensation_attempt
    agent = record.agent if kind == "work" else (record.compensator or "")
    when = deadline or record.deadline
    if when is None:
        raise ValueError(f"step {record.step_id!r} has no deadline to put in its work message")
    token = reply_token(record.attempt_token)
    if token is None:  # every dispatch writes one (activities.scheduler.dispatch)
        raise ValueError(f"step {record.step_id!r} has no attempt token to put in its work message")
    return WorkMessage(
        kind=kind,
        instance_id=record.instance_id,
        orchestration_id=record.orchestration_id or record.instance_id,
        workflow=record.workflow_name,
        step_id=record.step_id,
        agent=agent,
        attempt=attempt,
        deadline=when.astimezone(UTC).isoformat(),
        expires_at=expires_at(when).isoformat(),
        input=stored_input(record) if input is None else input,
        ledger=versions,
        reply_token=token,
        idempotency_key=f"{record.instance_id}:{record.step_id}",  # StepContext.idempotency_key
    )


def claim_digest(message: WorkMessage) -> str:
    """SHA-256 of the message as sent, its ETags aside: the claim-key row's name (``WorkVersions``)."""
    return _digest_without_etags(message)


def reply_digest(reply: ResultMessage) -> str:
    """SHA-256 of a success reply as sent, its ETags aside: the basis row's name (``ReplyVersions``)."""
    return _digest_without_etags(reply)


def payload_digest(value: Any) -> str:
    return hashlib.sha256(_canonical(value)).hexdigest()


def _digest_without_etags(model: WorkMessage | ResultMessage) -> str:
    body = model.model_dump(mode="json", exclude_none=True)
    body.get("ledger", {}).pop("etags", None)
    return hashlib.sha256(_canonical(body)).hexdigest()


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class ClaimableWork:
    """The work message of a first dispatch and the claim-key row that lets the worker claim it unread:
    ``rows`` (the dispatch's ``with_rows``) builds the body from the rows as they will be written;
    ``message`` adds the ETags the write returned."""

    def __init__(self, watched: list[str] | None = None, keyed_reply: bool = False) -> None:
        self.body: WorkMessage | None = None
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
        versions = self.body.ledger if self.body is not None else None
        written = (step_fields(step), instance_fields(instance) if instance is not None else None)
        if versions is None or step.etag is None or (versions.step, versions.instance) != written:
            return work_message(step, "work")  # not built for this write (a lost race, claimed after a read)
        etags = {"step": step.etag, **({"instance": instance.etag} if instance and instance.etag else {})}
        body = self.body.model_copy(update={"ledger": versions.model_copy(update={"etags": etags})})
        return work_message(step, "work", body=body)


class KeyedReply:
    """A work success recorded with a *basis row*, and the reply that names it (``ReplyVersions``):
    ``rows`` (the record's ``with_rows``) puts the instance as it will be written in the reply and
    inserts the row named by its digest; ``reply`` adds the ETag the write returned."""

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
        """The plain reply (read by the result handler) when the write was not the one built for."""
        body = self.body
        if body is None or body.ledger is None or instance is None or not instance.etag:
            return self.plain
        written = {k: v for k, v in body.ledger.instance.items() if k != WATCHED_KEY}
        if written != instance_fields(instance):
            return self.plain
        versions = body.ledger.model_copy(update={"etags": {"instance": instance.etag}})
        return body.model_copy(update={"ledger": versions})
