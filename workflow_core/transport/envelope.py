"""The JSON envelope that carries message metadata over queues that have none (Azure Storage Queues).

A Storage Queue message is one string: the envelope gives it what a Service Bus message has
(MessageId, CorrelationId, Subject, application properties; dead-letter reason on the poison copy).
Foreign text is read leniently, so a consumer can dead-letter it instead of crashing its loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from workflow_core.transport import bounded_json
from workflow_core.transport.base import OutgoingMessage, ReceivedMessage

ENVELOPE_FORMAT = "workflow-message/1"


@dataclass(frozen=True)
class Envelope:
    body: dict[str, Any]
    message_id: str | None
    correlation_id: str | None = None
    subject: str | None = None
    application_properties: dict[str, Any] = field(default_factory=dict)
    dead_letter_reason: str | None = None
    dead_letter_description: str | None = None
    is_envelope: bool = True  # False: foreign text, wrapped as best we could


def write_envelope(
    message: OutgoingMessage | ReceivedMessage,
    *,
    dead_letter_reason: str | None = None,
    dead_letter_description: str | None = None,
) -> str:
    doc: dict[str, Any] = {
        "envelope": ENVELOPE_FORMAT,
        "message_id": message.message_id,
        "correlation_id": message.correlation_id,
        "subject": message.subject,
        "application_properties": dict(message.application_properties),
        "body": message.body,
    }
    if dead_letter_reason is not None:
        doc["dead_letter_reason"] = dead_letter_reason
        doc["dead_letter_description"] = dead_letter_description or ""
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


MALFORMED_KEY = "malformed"  # set on a body whose text is JSON this app will not read (bounded_json)
MAX_KEPT_TEXT = 4096  # of a malformed body, kept for the audit


_TEXT_FIELDS = ("message_id", "correlation_id", "subject", "dead_letter_reason", "dead_letter_description")


def read_envelope(text: str) -> Envelope:
    """Parse an envelope; anything else becomes a foreign one (``is_envelope=False``)."""
    try:
        doc = bounded_json.loads(text)
    except bounded_json.MalformedJson:
        doc = None
    if not isinstance(doc, dict) or doc.get("envelope") != ENVELOPE_FORMAT:
        return Envelope(body=body_from_text(text), message_id=None, is_envelope=False)
    props = doc.get("application_properties")
    texts = {key: None if doc.get(key) is None else str(doc[key]) for key in _TEXT_FIELDS}
    return Envelope(
        body=_as_body(doc.get("body")),
        application_properties=props if isinstance(props, dict) else {},
        **texts,
    )


# The body of the message `sas doctor` schedules on each queue and cancels (api/diagnostics_queues.py). Should
# a cancel not take, the probe is delivered an hour later: a reader that meets it drops it.
DOCTOR_PROBE = "sas-doctor-probe"


def is_doctor_probe(body: Any) -> bool:
    """Whether a received body (as :func:`body_from_text` made it) is a ``sas doctor`` probe."""
    return body == {"text": DOCTOR_PROBE}


def body_from_text(text: str) -> dict[str, Any]:
    """A message body as a dict, whatever was sent: a JSON object is itself, other JSON becomes
    ``{"value": ...}``, text that is not JSON ``{"text": ...}``, and text that looks like JSON but breaks
    a :mod:`bounded_json` rule ``{"malformed": <why>, "text": <its start>}``, which the reader parks."""
    try:
        doc = bounded_json.loads(text)
    except bounded_json.MalformedJson as exc:
        if text.lstrip()[:1] in ("{", "["):
            return {MALFORMED_KEY: str(exc), "text": text[:MAX_KEPT_TEXT]}
        return {"text": text[:MAX_KEPT_TEXT] if len(text) > bounded_json.MAX_CHARS else text}
    return _as_body(doc)


def _as_body(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {"value": value}
