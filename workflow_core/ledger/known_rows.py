"""Rows a writer knows by the ETag an earlier write returned, instead of reading them again
(docs/architecture.md, "Writing against a version, unread"). Safe because of the ETag: such a write
is a **merge of the properties that differ**, so a copy leaving out a large field cannot erase it; a
cleared property is written as the empty string, which every read takes as absent.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any

from azure.data.tables import UpdateMode
from pydantic import AfterValidator

from workflow_core.ledger.entities import if_match
from workflow_core.ledger.errors import InvalidLedgerInput
from workflow_core.ledger.families import BASIS_KEY_PREFIX, CLAIM_KEY_PREFIX
from workflow_core.ledger.instance import InstanceRecord
from workflow_core.ledger.model import StepRecord

# Instance fields a snapshot leaves out: large texts no dispatch reads, to keep histories small.
SNAPSHOT_OMITS = frozenset({"input_ref", "outcome", "last_error", "attention_reason"})
CLEARED = ""  # how a merge clears a property (read back as absent)


# The only ETag shape the Table service hands out. A carried ETag comes from a message or a history:
# a forged one ("0", "*") is a refused copy, never an If-Match the service answers with a batch-wide
# 400 (or, for "*", an unconditional write).
_TABLE_ETAG = re.compile(r"W/\"datetime'\d{4}-\d{2}-\d{2}T\d{2}%3A\d{2}%3A\d{2}(?:\.\d{1,7})?Z'\"", re.ASCII)


def carried_etag(value: Any) -> str:
    if not isinstance(value, str) or not _TABLE_ETAG.fullmatch(value):
        raise ValueError(f"not a Table service ETag: {str(value)[:80]!r}")
    return value


TableETag = Annotated[str, AfterValidator(carried_etag)]


class KnownStepRecord(StepRecord):
    """A step row known by an earlier write's ETag, not read: written by merge."""

    etag: TableETag


class KnownInstanceRecord(InstanceRecord):
    """An instance record as a snapshot carried it, not read: written by merge."""

    etag: TableETag


def instance_snapshot(record: InstanceRecord) -> dict[str, Any]:
    if record.etag is None:
        raise InvalidLedgerInput("an instance snapshot needs the record's ETag")
    return {**instance_fields(record), "etag": record.etag}


def created_snapshot(record: InstanceRecord) -> dict[str, Any]:
    """:func:`instance_snapshot` of a record just created with its steps, all Pending: its index row
    watches no step in flight (``WATCHED_KEY``)."""
    return {**instance_snapshot(record), WATCHED_KEY: []}


def instance_fields(record: InstanceRecord) -> dict[str, Any]:
    return record.model_dump(mode="json", exclude={*SNAPSHOT_OMITS, "etag"}, exclude_none=True)


# Step fields a snapshot leaves out: long texts the claim and the record do not read, and the
# attempt's token, which is in no message (contracts.ConfirmedResult).
STEP_SNAPSHOT_OMITS = frozenset({"input_ref", "result_ref", "last_error", "attempt_token", "etag"})


def step_fields(record: StepRecord) -> dict[str, Any]:
    return record.model_dump(mode="json", exclude=set(STEP_SNAPSHOT_OMITS), exclude_none=True)


def known_step(fields: dict[str, Any], etag: str) -> KnownStepRecord:
    if not etag:
        raise InvalidLedgerInput("a step snapshot needs the row's ETag")
    clean = {k: v for k, v in fields.items() if k not in STEP_SNAPSHOT_OMITS}
    return KnownStepRecord.model_validate({**clean, "etag": etag})


def claim_row_key(step_id: str, digest: str) -> str:
    return f"{CLAIM_KEY_PREFIX}{step_id}~{digest}"


def basis_row_key(step_id: str, digest: str) -> str:
    return f"{BASIS_KEY_PREFIX}{step_id}~{digest}"


def known_instance(snapshot: dict[str, Any]) -> KnownInstanceRecord:
    if not isinstance(snapshot, dict) or not snapshot.get("etag"):
        raise InvalidLedgerInput("an instance snapshot must be an object with an etag")
    fields = {k: v for k, v in snapshot.items() if k not in SNAPSHOT_OMITS and k != WATCHED_KEY}
    return KnownInstanceRecord.model_validate(fields)


# A snapshot read together with the steps its index row watches names them (in-flight steps only):
# settling against it unread is safe only when none is, since no step becomes watched without a
# write to the instance record, which would change its ETag.
WATCHED_KEY = "watched"


def watched_in(snapshot: dict[str, Any] | None) -> list[str] | None:
    watched = snapshot.get(WATCHED_KEY) if isinstance(snapshot, dict) else None
    return watched if isinstance(watched, list) else None


def if_match_write(record: Any, updated: Any, entity_of: Callable[[Any], dict[str, Any]]) -> tuple:
    """The transaction's If-Match update writing ``updated`` over the row ``record`` is: a merge of
    what differs when the row is known, not read; else a replace."""
    known = isinstance(record, KnownStepRecord | KnownInstanceRecord)
    entity = merged_properties(entity_of(record), entity_of(updated)) if known else entity_of(updated)
    mode = UpdateMode.MERGE if known else UpdateMode.REPLACE
    return ("update", entity, {"mode": mode, **if_match(record.etag)})


def merged_properties(known: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The entity to merge onto a row known as ``known`` so that it reads as ``new``: the keys, every
    property that differs, and an empty string for each property ``new`` clears."""
    cleared = sorted(k for k in known if k not in new)
    merged = {"PartitionKey": new["PartitionKey"], "RowKey": new["RowKey"]}
    merged.update({k: v for k, v in new.items() if known.get(k) != v})
    merged.update(dict.fromkeys(cleared, CLEARED))
    return merged
