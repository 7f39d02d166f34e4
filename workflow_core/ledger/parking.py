"""Parked messages: messages no agent can ever process (the ledger cannot store their ids, not JSON,
fields missing), which fail the same way on every delivery: the handlers park and complete them. The
rows live in the index table's ``parked`` partition (never read by ``overdue()``), oldest first,
their texts escaped and cut to size.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from workflow_core import clock
from workflow_core.contracts import fit_text
from workflow_core.ledger.entities import _deadline_key, _nonce, entity_values
from workflow_core.ledger.families import PARKED_PARTITION
from workflow_core.ledger.model import camel_case
from workflow_core.ledger.store import StepLedger

MAX_PARKED_BODY = 16_000
MAX_PARKED_FIELD = 1_000


@dataclass(frozen=True)
class ParkedMessage:
    key: str
    at: datetime
    source: str
    reason: str
    message_id: str | None
    instance_id: str | None
    step_id: str | None
    attempt: str | None
    body: str


# ParkedMessage field -> entity property (the field's name in CamelCase); _TEXTS read back as "" when absent
_PROPERTIES = {f.name: camel_case(f.name) for f in fields(ParkedMessage)[1:]}
_TEXTS = {"source", "reason", "body"}


def _shown(value: Any, limit: int = MAX_PARKED_FIELD) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    escaped = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    return fit_text(escaped, limit)


def _body_text(body: Any) -> str:
    try:
        text = json.dumps(body, sort_keys=True, default=str, ensure_ascii=True)
    except (TypeError, ValueError):
        text = repr(body)
    return fit_text(text, MAX_PARKED_BODY)


def park_message(
    ledger: StepLedger,
    *,
    source: str,
    reason: str,
    body: Any,
    message_id: str | None = None,
) -> ParkedMessage:
    now = clock.utcnow()
    fields = body if isinstance(body, dict) else {}
    row = ParkedMessage(
        key=f"{_deadline_key(now)}~{_nonce()}",
        at=now,
        source=source,
        reason=_shown(reason, 4_000) or "",
        message_id=_shown(message_id),
        instance_id=_shown(fields.get("instance_id")),
        step_id=_shown(fields.get("step_id")),
        attempt=_shown(fields.get("attempt")),
        body=_body_text(body),
    )
    entity = {"PartitionKey": PARKED_PARTITION, "RowKey": row.key}
    entity.update({prop: getattr(row, f) for f, prop in _PROPERTIES.items() if getattr(row, f) is not None})
    ledger._index.create_entity(entity)
    return row


def parked_messages(ledger: StepLedger, limit: int = 100) -> list[ParkedMessage]:
    rows = ledger._index.query_entities(
        "PartitionKey eq @p", parameters={"p": PARKED_PARTITION}, results_per_page=min(limit, 1000)
    )
    found: list[ParkedMessage] = []
    for e in itertools.islice(rows, limit):
        values = {**dict.fromkeys(_PROPERTIES), **dict.fromkeys(_TEXTS, ""), **entity_values(e, _PROPERTIES)}
        del values["etag"]
        found.append(ParkedMessage(key=e["RowKey"], **values))
    return found
