"""How ledger rows are stored: the record <-> Table Storage entity mapping and the key formats, in
one place so every part of the ledger (and the benchmarks that seed rows) maps a row the same way."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

from workflow_core.ledger.errors import InvalidLedgerInput
from workflow_core.ledger.families import MAX_BATCH
from workflow_core.ledger.model import StepRecord, entity_properties

# StepRecord field -> entity property (the field's name in CamelCase)
_FIELDS = entity_properties(StepRecord, keys={"instance_id", "step_id"})
_FIXED = {"workflow_name", "workflow_version", "step_name", "sequence", "agent", "created_at", "status"}
_MUTABLE = set(_FIELDS) - _FIXED


def to_entity(record: Any, row_key: str, fields: dict[str, str]) -> dict[str, Any]:
    """``record`` as an entity of its instance's partition (``fields``: record field -> property)."""
    entity: dict[str, Any] = {"PartitionKey": record.instance_id, "RowKey": row_key}
    for field, prop in fields.items():
        value = getattr(record, field)
        if value is not None:  # absent property = None; Table Storage has no null
            entity[prop] = value.value if isinstance(value, Enum) else value
    return entity


def _to_entity(record: StepRecord) -> dict[str, Any]:
    return to_entity(record, record.step_id, _FIELDS)


def changed_fields(
    record: Any, status: Any, changes: dict[str, Any], now: datetime, mutable: set[str], what: tuple[str, str]
) -> dict[str, Any]:
    """``record``'s fields as a write of ``changes`` leaves them: only a record read with its ETag is
    written, and only its ``mutable`` fields change (``what``: the record, and whose it is)."""
    if record.etag is None:
        raise InvalidLedgerInput(f"{what[0]} has no ETag: read it from the ledger before updating it")
    unknown = set(changes) - mutable
    if unknown:
        raise InvalidLedgerInput(f"cannot change {sorted(unknown)} of {what[1]}")
    return {**record.model_dump(), **changes, "status": status, "updated_at": now}


def entity_values(entity: Any, fields: dict[str, str]) -> dict[str, Any]:
    """A record's fields from a table entity (``fields``: record field -> property): absent, null and
    empty-text properties left out, naive datetimes read as UTC, plus the entity's ETag. Steps and instance
    records are read through it."""
    values = {field: entity.get(prop) for field, prop in fields.items()}
    # an empty text is how a merge clears a property (known_rows.py): absent, like null
    data = {field: as_utc(value) for field, value in values.items() if value is not None and value != ""}
    data["etag"] = entity.metadata.get("etag") if hasattr(entity, "metadata") else None
    return data


def as_utc(value: Any) -> Any:
    """A datetime a table handed back without its zone as the UTC it is; any other value as it is."""
    return value.replace(tzinfo=UTC) if isinstance(value, datetime) and value.tzinfo is None else value


def _from_entity(entity: Any) -> StepRecord:
    keys = {"instance_id": entity["PartitionKey"], "step_id": entity["RowKey"]}
    return StepRecord.model_validate({**keys, **entity_values(entity, _FIELDS)})


def if_match(etag: str | None) -> dict[str, Any]:
    """A write's keywords that make it land only on the row version ``etag`` names."""
    return {"etag": etag, "match_condition": MatchConditions.IfNotModified}


def delete_rows(
    table: Any, partition: str, row_keys: Sequence[str], delete_one: Callable[[str], None] | None = None
) -> None:
    """Delete rows of one partition, a transaction per ``MAX_BATCH`` rows; a lone row, or a batch that
    failed (a row gone meanwhile), row by row with ``delete_one`` (default: a row already gone is fine)."""
    for start in range(0, len(row_keys), MAX_BATCH):
        chunk = row_keys[start : start + MAX_BATCH]
        if len(chunk) > 1:
            with contextlib.suppress(HttpResponseError):  # TableTransactionError is one
                table.submit_transaction(
                    [("delete", {"PartitionKey": partition, "RowKey": r}) for r in chunk]
                )
                continue
        for row in chunk:
            if delete_one is not None:
                delete_one(row)
            else:
                with contextlib.suppress(ResourceNotFoundError):
                    table.delete_entity(partition, row)


def _deadline_key(deadline: datetime) -> str:
    return deadline.astimezone(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def _nonce() -> str:
    return uuid.uuid4().hex[:12]


def decode_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def encode_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)
