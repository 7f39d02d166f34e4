"""The operators' list of workflow instances: newest first, filtered, paged with a stable token.

Each instance has a *listing row* in the index table's ``list`` partition, keyed by inverted start
time, with the fields operators filter on, written when they change (never per step). It cannot join
the record's transaction, so it is only an index: every listed instance is read back from its record,
and a row that disagrees is dropped from the page and repaired (a page may hold fewer than
``limit``). The service's own continuation pages, so an instance started meanwhile never shifts one.
"""

from __future__ import annotations

import base64
import json
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.data.tables import UpdateMode

from workflow_core.ledger.errors import InvalidLedgerInput
from workflow_core.ledger.families import KEY_PARTITION, LIST_PARTITION
from workflow_core.ledger.instance import InstanceRecord, InstanceStatus
from workflow_core.ledger.model import parse_status, require_aware

LIST_TOKEN_KEY_ROW = "list-token"
MAX_LIST_LIMIT = 1000
_MAX_TICKS = 10**19  # beyond any datetime's microseconds since 0001-01-01
_TICK = timedelta(microseconds=1)


def _inverted(moment: datetime) -> str:
    ticks = (moment.astimezone(UTC) - datetime(1, 1, 1, tzinfo=UTC)) // _TICK  # exact, in integers
    return f"{_MAX_TICKS - ticks:020d}"


def listing_entity(record: InstanceRecord) -> dict[str, Any]:
    assert record.started_at is not None
    entity: dict[str, Any] = {
        "PartitionKey": LIST_PARTITION,
        "RowKey": f"{_inverted(record.started_at)}~{record.instance_id}",
        "InstanceId": record.instance_id,
        **_listed(record),
        "StartedAt": record.started_at,
        "BusinessKey": record.business_key,
    }
    return {k: v for k, v in entity.items() if v is not None}


def listing_changed(before: InstanceRecord, after: InstanceRecord) -> bool:
    return _listed(before) != _listed(after)


def encode_token(token: Any) -> str | None:
    if not token:
        return None
    return base64.urlsafe_b64encode(json.dumps(token, sort_keys=True).encode()).decode().rstrip("=")


def decode_token(text: str | None) -> Any:
    if not text:
        return None
    try:
        padded = text + "=" * (-len(text) % 4)
        token = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (ValueError, UnicodeDecodeError):
        raise InvalidLedgerInput("continuation token is not one this ledger issued") from None
    if not isinstance(token, dict) or not all(isinstance(v, str) for v in token.values()):
        raise InvalidLedgerInput("continuation token is not one this ledger issued")
    return token


def _listed(record: InstanceRecord) -> dict[str, Any]:
    """What a listing row's filtered properties must say of ``record``."""
    return {
        "ListStatus": record.status.value,
        "Workflow": record.workflow,
        "Version": record.version,
        "NeedsAttention": record.needs_attention,
    }


class InstanceListMixin:
    def listing_rows(self, *, workflow: str) -> list[dict[str, Any]]:
        """Index data only: a caller that decides anything on a row reads the record back."""
        rows = self._index.query_entities(
            "PartitionKey eq @pk and Workflow eq @workflow",
            parameters={"pk": LIST_PARTITION, "workflow": workflow},
            select=["InstanceId", "Version", "ListStatus"],
        )
        return [dict(row) for row in rows]

    def list_token_key(self) -> bytes:
        """A random key made once per ledger, so every process signs continuation tokens alike."""
        cached = getattr(self, "_list_token_key", None)
        if cached is not None:
            return cached
        try:
            key = self._index.get_entity(KEY_PARTITION, LIST_TOKEN_KEY_ROW)["Key"]
        except ResourceNotFoundError:
            key = base64.b64encode(secrets.token_bytes(32)).decode()
            try:
                self._index.create_entity(
                    {"PartitionKey": KEY_PARTITION, "RowKey": LIST_TOKEN_KEY_ROW, "Key": key}
                )
            except ResourceExistsError:  # another process made it first: read theirs
                key = self._index.get_entity(KEY_PARTITION, LIST_TOKEN_KEY_ROW)["Key"]
        self._list_token_key = base64.b64decode(key)
        return self._list_token_key

    def write_listing_row(self, record: InstanceRecord) -> None:
        self._index.upsert_entity(listing_entity(record), mode=UpdateMode.REPLACE)

    def list_instances(
        self,
        *,
        status: InstanceStatus | str | None = None,
        workflow: str | None = None,
        version: str | None = None,
        business_key_prefix: str | None = None,
        started_from: datetime | None = None,
        started_to: datetime | None = None,
        needs_attention: bool | None = None,
        limit: int = 50,
        continuation: str | None = None,
        exclude_workflow: str | tuple[str, ...] | None = None,
    ) -> tuple[list[InstanceRecord], str | None]:
        """One page of instances, newest first, and the token of the next page (None at the end);
        ``started_from`` is inclusive and ``started_to`` exclusive, so adjacent windows never overlap.
        """
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidLedgerInput(f"limit must be between 1 and {MAX_LIST_LIMIT}, got {limit}")
        wanted = parse_status(status, InstanceStatus, "instance").value if status is not None else None
        asked = dict(ListStatus=wanted, Workflow=workflow, Version=version, NeedsAttention=needs_attention)
        filters = {prop: value for prop, value in asked.items() if value is not None}
        clauses = ["PartitionKey eq @pk", *(f"{prop} eq @{prop}" for prop in filters)]
        params: dict[str, Any] = {"pk": LIST_PARTITION, **filters}
        # e.g. the recovery canary's runs, hidden from the operators' default list (one name or several)
        excluded = (exclude_workflow,) if isinstance(exclude_workflow, str) else tuple(exclude_workflow or ())
        for n, name in enumerate(excluded):
            clauses.append(f"Workflow ne @exclude_workflow{n}")
            params[f"exclude_workflow{n}"] = name
        if business_key_prefix:
            clauses.append("BusinessKey ge @bk_lo and BusinessKey lt @bk_hi")
            params.update(bk_lo=business_key_prefix, bk_hi=business_key_prefix + "\uffff")
        # newest first, a later start has a smaller RowKey: "started_to" (exclusive) bounds from below
        if started_to is not None:
            clauses.append("RowKey ge @rk_lo")
            params["rk_lo"] = _inverted(require_aware(started_to, "started_to") - _TICK)
        if started_from is not None:
            clauses.append("RowKey lt @rk_hi")
            params["rk_hi"] = _inverted(require_aware(started_from, "started_from") - _TICK)
        pages = self._index.query_entities(" and ".join(clauses), parameters=params, results_per_page=limit)
        page_iter = pages.by_page(continuation_token=decode_token(continuation))
        records: list[InstanceRecord] = []
        for row in list(next(page_iter, [])):
            record = self.find_instance(row["InstanceId"])
            if record is None:
                self._index.delete_entity(row["PartitionKey"], row["RowKey"])
                continue
            listed = _listed(record)
            if any(listed[prop] != row.get(prop) for prop in ("ListStatus", "NeedsAttention")):
                self.write_listing_row(record)  # repair a row a crash left behind
            # the filter, checked against the record itself (the listing row is only an index)
            if (
                all(listed[prop] == value for prop, value in filters.items())
                and (record.business_key or "").startswith(business_key_prefix or "")
                and record.workflow not in excluded
            ):
                records.append(record)
        return records, encode_token(page_iter.continuation_token)
