"""Operator requests' idempotency keys, kept in the instance's own ledger partition, and unique
across the API through one row per key in the index table.

A row ``~idem~<key>`` is inserted (insert-only: the first request wins) before the action runs, and
the answer is merged into it afterwards, ETag-guarded. A repeat with the same key finds the row and
is answered from it without acting again; a key reused for another request is refused. Before it,
the key is claimed API-wide: a row in the index table's :data:`KEY_INDEX_PARTITION` (row key: the
key's SHA-256, so any key is a valid row key) names the instance and the request that own it, so the
same key sent for another instance is refused too (docs/api.md, "Idempotency-Key").
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import UpdateMode

from workflow_core import clock
from workflow_core.ledger.families import IDEMPOTENCY_PREFIX, KEY_INDEX_PARTITION

KEY_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,100}")  # a key as the API and the CLI take it


class KeyReused(Exception):
    """The key was claimed for another request (named in ``request``): it may not act for this one."""

    def __init__(self, request: str) -> None:
        super().__init__(request)
        self.request = request


class KeyInProgress(Exception):
    """The first request with the key has not stored its answer yet."""


def claim_or_replay(
    ledger: Any, instance_id: str, key: str, request: str, actor: str
) -> dict[str, Any] | None:
    """None when this request is the first with ``key`` (it then acts and records its answer); the
    first request's stored answer (``request``, ``status``, ``body``) when ``request`` repeats it.
    :class:`KeyReused` for a key claimed by another request, :class:`KeyInProgress` while the first
    one still acts."""
    _claim_api_wide(ledger, instance_id, key, request, actor)
    row_key = IDEMPOTENCY_PREFIX + key
    try:
        ledger._steps.create_entity(
            {
                "PartitionKey": instance_id,
                "RowKey": row_key,
                "Request": request,
                "Actor": actor,
                "At": clock.utcnow(),
            }
        )
        return None
    except ResourceExistsError:
        entity = ledger._steps.get_entity(instance_id, row_key)
    if entity.get("Request") != request:
        raise KeyReused(entity.get("Request"))
    if entity.get("Status") is None:
        raise KeyInProgress(key)
    return {"request": entity.get("Request"), "status": entity.get("Status"), "body": entity.get("Answer")}


def key_index_row(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _claim_api_wide(ledger: Any, instance_id: str, key: str, request: str, actor: str) -> None:
    """Insert the key's index row for ``instance_id`` (insert-only: the first instance wins), or
    :class:`KeyReused` when it already names another instance."""
    row = key_index_row(key)
    try:
        ledger._index.create_entity(
            {
                "PartitionKey": KEY_INDEX_PARTITION,
                "RowKey": row,
                "Instance": instance_id,
                "Request": request,
                "Actor": actor,
                "At": clock.utcnow(),
            }
        )
        return
    except ResourceExistsError:
        entity = ledger._index.get_entity(KEY_INDEX_PARTITION, row)
    if entity.get("Instance") != instance_id:
        raise KeyReused(str(entity.get("Request") or f"a request on instance {entity.get('Instance')!r}"))


def record_answer(ledger: Any, instance_id: str, key: str, status: int, body: Any) -> None:
    entity = ledger._steps.get_entity(instance_id, IDEMPOTENCY_PREFIX + key)
    entity["Status"] = status
    entity["Answer"] = body if isinstance(body, str) else json.dumps(body)
    ledger._steps.update_entity(
        entity,
        mode=UpdateMode.MERGE,
        etag=entity.metadata["etag"],
        match_condition=MatchConditions.IfNotModified,
    )


def release_key(ledger: Any, instance_id: str, key: str) -> None:
    """Forget a key whose request failed on our side (5xx): a retry with it may act."""
    with contextlib.suppress(ResourceNotFoundError):
        ledger._steps.delete_entity(instance_id, IDEMPOTENCY_PREFIX + key)
    with contextlib.suppress(ResourceNotFoundError, ResourceModifiedError):
        entity = ledger._index.get_entity(KEY_INDEX_PARTITION, key_index_row(key))
        if entity.get("Instance") == instance_id:  # only this instance's claim, as read (ETag)
            ledger._index.delete_entity(
                entity, etag=entity.metadata["etag"], match_condition=MatchConditions.IfNotModified
            )


def forget_instance_keys(ledger: Any, instance_id: str, row_keys: list[str]) -> None:
    """Delete the API-wide index rows of the keys an instance claimed (its ``~idem~`` rows, as read
    by a purge before it deletes them): a purged instance leaves no key row behind. Only rows that
    still name this instance go, each ETag-guarded."""
    for row_key in row_keys:
        if not row_key.startswith(IDEMPOTENCY_PREFIX):
            continue
        with contextlib.suppress(ResourceNotFoundError, ResourceModifiedError):
            entity = ledger._index.get_entity(
                KEY_INDEX_PARTITION, key_index_row(row_key[len(IDEMPOTENCY_PREFIX) :])
            )
            if entity.get("Instance") == instance_id:
                ledger._index.delete_entity(
                    entity, etag=entity.metadata["etag"], match_condition=MatchConditions.IfNotModified
                )


class IdempotencyKeys:
    """The keys of one partition (an instance's, or ``~bulk-keys``): ``Services.idempotency_keys``."""

    def __init__(self, ledger: Any) -> None:
        self.ledger = ledger

    def claim_or_replay(self, partition: str, key: str, request: str, actor: str) -> dict[str, Any] | None:
        return claim_or_replay(self.ledger, partition, key, request, actor)

    def record_answer(self, partition: str, key: str, status: int, body: Any) -> None:
        record_answer(self.ledger, partition, key, status, body)

    def release(self, partition: str, key: str) -> None:
        release_key(self.ledger, partition, key)

    def answers(self, partition: str) -> list[tuple[str, Any]]:
        """(row key, stored answer) of every key of ``partition``."""
        rows = self.ledger._steps.query_entities(
            "PartitionKey eq @pk", parameters={"pk": partition}, select=["RowKey", "Answer"]
        )
        return [(r["RowKey"], r.get("Answer")) for r in rows]

    def forget(self, partition: str, row_key: str) -> None:
        """A key's API-wide row (while it names ``partition``), then its own row: the key is free."""
        forget_instance_keys(self.ledger, partition, [row_key])
        with contextlib.suppress(ResourceNotFoundError):
            self.ledger._steps.delete_entity(partition, row_key)
