"""Rows a writer knows by the ETag an earlier write returned, instead of reading them again.

A scheduler activity normally reads a step and its instance record (one partition query) before it
moves them. On the happy path that read tells it nothing new: the HTTP starter wrote the step,
Pending, and returned its ETag; the result handler read the instance record just before raising the
previous step's result. Those versions travel to the next dispatch through the orchestration
(``contracts.ExpectedRows``), and the dispatch writes against them with If-Match, unread.

What makes that safe is the ETag, not the carried fields: the write succeeds only if the row is
still exactly that version, and a version is only ever carried together with the fields it had
when it was read or written. Two rules keep a stale or incomplete copy from writing anything wrong:

* the row is written as a **merge of the properties the change sets** (the ones that differ from the
  known version), never a full replace: a copy that leaves out a large field (the workflow input,
  kept only in the instance record) cannot erase it, and properties the change does not touch keep
  whatever the row holds;
* a merge cannot remove a property, so a change that **clears** one writes it as the empty string,
  which every read takes as absent (``entities.entity_values``; no field of a step or an instance
  record holds an empty text otherwise). Table Storage types each property of each entity on its
  own, so a cleared time becomes an empty text too, and no filter on times matches it.

The caller treats a 412 (someone wrote the row since) like any other lost race and falls back to
reading the row; it also acts only on a write, never on a decision taken from a copy alone (a copy
may be stale: only the conditional write proves it is not).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator

from workflow_core.ledger.errors import InvalidLedgerInput
from workflow_core.ledger.instance import InstanceRecord
from workflow_core.ledger.model import StepRecord

# Instance fields a snapshot leaves out: text of up to 32,000 characters each (the workflow input
# above all) that no dispatch reads or changes. A snapshot without them stays small in histories.
SNAPSHOT_OMITS = frozenset({"input_ref", "outcome", "last_error", "attention_reason"})
CLEARED = ""  # how a merge clears a property (read back as absent)


# The only ETag shape the Table service (and Azurite) hands out: a weak tag over the row's
# timestamp. A carried ETag comes from a message or an orchestration's history, so it is checked
# here, where a copy becomes a row to write against: a forged one ("0", "*", any text) is a refused
# copy like any other, never an If-Match the service answers with a batch-wide 400 (or, for "*",
# an unconditional write).
_TABLE_ETAG = re.compile(r"W/\"datetime'\d{4}-\d{2}-\d{2}T\d{2}%3A\d{2}%3A\d{2}(?:\.\d{1,7})?Z'\"", re.ASCII)


def carried_etag(value: Any) -> str:
    """``value`` if it is shaped like a Table service ETag; ValueError otherwise."""
    if not isinstance(value, str) or not _TABLE_ETAG.fullmatch(value):
        raise ValueError(f"not a Table service ETag: {str(value)[:80]!r}")
    return value


TableETag = Annotated[str, AfterValidator(carried_etag)]


class KnownStepRecord(StepRecord):
    """A step row as a writer knows it from an earlier write's ETag (not read): written by merge."""

    etag: TableETag


class KnownInstanceRecord(InstanceRecord):
    """An instance record as a snapshot carried it (not read): written by merge, large fields left out."""

    etag: TableETag


def instance_snapshot(record: InstanceRecord) -> dict[str, Any]:
    """JSON-ready fields of ``record`` and its ETag, without :data:`SNAPSHOT_OMITS`."""
    if record.etag is None:
        raise InvalidLedgerInput("an instance snapshot needs the record's ETag")
    return {**instance_fields(record), "etag": record.etag}


def created_snapshot(record: InstanceRecord) -> dict[str, Any]:
    """:func:`instance_snapshot` of a record just created with its steps, all Pending: its index row
    watches no step in flight (``WATCHED_KEY``)."""
    return {**instance_snapshot(record), WATCHED_KEY: []}


def instance_fields(record: InstanceRecord) -> dict[str, Any]:
    """:func:`instance_snapshot` without the ETag (a version about to be written)."""
    return record.model_dump(mode="json", exclude={*SNAPSHOT_OMITS, "etag"}, exclude_none=True)


# Step fields a snapshot leaves out: long texts the claim and the record do not read, and the
# attempt's token, which is in no message (contracts.ConfirmedResult).
STEP_SNAPSHOT_OMITS = frozenset({"input_ref", "result_ref", "last_error", "attempt_token", "etag"})


def step_fields(record: StepRecord) -> dict[str, Any]:
    """JSON-ready fields of a step row as written, without :data:`STEP_SNAPSHOT_OMITS`."""
    return record.model_dump(mode="json", exclude=set(STEP_SNAPSHOT_OMITS), exclude_none=True)


def known_step(fields: dict[str, Any], etag: str) -> KnownStepRecord:
    """The step row of a snapshot, to write against ``etag`` (raises on a malformed one)."""
    if not etag:
        raise InvalidLedgerInput("a step snapshot needs the row's ETag")
    clean = {k: v for k, v in fields.items() if k not in STEP_SNAPSHOT_OMITS}
    return KnownStepRecord.model_validate({**clean, "etag": etag})


CLAIM_KEY_PREFIX = "~claim~"  # sorts between the audit rows (~audit~) and the instance (~instance)


def claim_row_key(step_id: str, digest: str) -> str:
    """RowKey of the claim-key row of a work message with ``digest`` (``contracts.WorkVersions``)."""
    return f"{CLAIM_KEY_PREFIX}{step_id}~{digest}"


BASIS_KEY_PREFIX = "~basis~"  # sorts between the audit rows (~audit~) and the claim-key rows


def basis_row_key(step_id: str, digest: str) -> str:
    """RowKey of the basis row of a success reply with ``digest`` (``contracts.ResultBasis``)."""
    return f"{BASIS_KEY_PREFIX}{step_id}~{digest}"


def known_instance(snapshot: dict[str, Any]) -> KnownInstanceRecord:
    """The instance record of a snapshot, to write against its ETag (raises on a malformed one)."""
    if not isinstance(snapshot, dict) or not snapshot.get("etag"):
        raise InvalidLedgerInput("an instance snapshot must be an object with an etag")
    fields = {k: v for k, v in snapshot.items() if k not in SNAPSHOT_OMITS and k != WATCHED_KEY}
    return KnownInstanceRecord.model_validate(fields)


# A snapshot read together with the steps its index row watches names them (in-flight steps only):
# settling against it unread is safe only when none is, since no step becomes watched without a
# write to the instance record, which would change its ETag.
WATCHED_KEY = "watched"


def watched_in(snapshot: dict[str, Any] | None) -> list[str] | None:
    """The in-flight steps a snapshot says its index row watches; None when it does not say."""
    watched = snapshot.get(WATCHED_KEY) if isinstance(snapshot, dict) else None
    return watched if isinstance(watched, list) else None


def merged_properties(known: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The entity to merge onto a row known as ``known`` so that it reads as ``new``: the keys, every
    property that differs, and an empty string for each property ``new`` clears."""
    cleared = sorted(k for k in known if k not in new)
    merged = {"PartitionKey": new["PartitionKey"], "RowKey": new["RowKey"]}
    merged.update({k: v for k, v in new.items() if known.get(k) != v})
    merged.update(dict.fromkeys(cleared, CLEARED))
    return merged
