"""Operator requests' idempotency keys (docs/api.md, "Idempotency keys"): a ``~idem~<key>`` row in the
instance's partition, insert-only (the first request wins), its answer merged in afterwards
(ETag-guarded); before it, the key is claimed API-wide by a row in the index table's
:data:`KEY_INDEX_PARTITION` (row key: the key's SHA-256), so one key cannot act on two instances.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from typing import Any

from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import UpdateMode

from workflow_core import clock
from workflow_core.ledger.entities import if_match
from workflow_core.ledger.families import IDEMPOTENCY_PREFIX, KEY_INDEX_PARTITION

KEY_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,100}")  # a key as the API and the CLI take it


class KeyReused(Exception):
    """The key was claimed for another request (named in ``request``): it may not act for this one."""

    def __init__(self, request: str) -> None:
        super().__init__(request)
        self.request = request


class KeyInProgress(Exception):
    """The first request with the key has not stored its answer yet."""


def key_index_row(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class IdempotencyKeys:
    """The keys of a partition (an instance's, or ``~bulk-keys``): ``Services.idempotency_keys``."""

    def __init__(self, ledger: Any) -> None:
        self._steps, self._index = ledger._steps, ledger._index

    def claim_or_replay(self, partition: str, key: str, request: str, actor: str) -> dict[str, Any] | None:
        """None when this request is the first with ``key`` (it then acts and records its answer); the
        first request's stored answer (``request``, ``status``, ``body``) when ``request`` repeats it.
        :class:`KeyReused` for a key claimed by another request, :class:`KeyInProgress` while the
        first one still acts."""
        self._claim_api_wide(partition, key, request, actor)
        claim = {"Request": request, "Actor": actor, "At": clock.utcnow()}
        try:
            self._steps.create_entity(
                {"PartitionKey": partition, "RowKey": IDEMPOTENCY_PREFIX + key, **claim}
            )
            return None
        except ResourceExistsError:
            entity = self._steps.get_entity(partition, IDEMPOTENCY_PREFIX + key)
        if entity.get("Request") != request:
            raise KeyReused(entity.get("Request"))
        if entity.get("Status") is None:
            raise KeyInProgress(key)
        return {
            "request": entity.get("Request"),
            "status": entity.get("Status"),
            "body": entity.get("Answer"),
        }

    def _claim_api_wide(self, partition: str, key: str, request: str, actor: str) -> None:
        """Insert the key's index row for ``partition`` (insert-only: the first one wins), or
        :class:`KeyReused` when it already names another."""
        row = key_index_row(key)
        claim = {"Instance": partition, "Request": request, "Actor": actor, "At": clock.utcnow()}
        try:
            self._index.create_entity({"PartitionKey": KEY_INDEX_PARTITION, "RowKey": row, **claim})
            return
        except ResourceExistsError:
            entity = self._index.get_entity(KEY_INDEX_PARTITION, row)
        if entity.get("Instance") != partition:
            raise KeyReused(str(entity.get("Request") or f"a request on instance {entity.get('Instance')!r}"))

    def record_answer(self, partition: str, key: str, status: int, body: Any) -> None:
        entity = self._steps.get_entity(partition, IDEMPOTENCY_PREFIX + key)
        entity["Status"] = status
        entity["Answer"] = body if isinstance(body, str) else json.dumps(body)
        self._steps.update_entity(entity, mode=UpdateMode.MERGE, **if_match(entity.metadata["etag"]))

    def release(self, partition: str, key: str) -> None:
        """Forget a key whose request failed on our side (5xx): a retry with it may act."""
        self.forget(partition, IDEMPOTENCY_PREFIX + key)

    def forget(self, partition: str, row_key: str) -> None:
        """A key's API-wide row (while it names ``partition``), then its own row: the key is free."""
        self.forget_index_rows(partition, [row_key])
        with contextlib.suppress(ResourceNotFoundError):
            self._steps.delete_entity(partition, row_key)

    def forget_index_rows(self, partition: str, row_keys: list[str]) -> None:
        """The API-wide rows of the keys (``~idem~`` rows, as read) that still name ``partition``,
        each ETag-guarded: a purged instance leaves no key row behind."""
        for row_key in (r for r in row_keys if r.startswith(IDEMPOTENCY_PREFIX)):
            with contextlib.suppress(ResourceNotFoundError, ResourceModifiedError):
                entity = self._index.get_entity(
                    KEY_INDEX_PARTITION, key_index_row(row_key[len(IDEMPOTENCY_PREFIX) :])
                )
                if entity.get("Instance") == partition:
                    self._index.delete_entity(entity, **if_match(entity.metadata["etag"]))

    def answers(self, partition: str) -> list[tuple[str, Any]]:
        """(row key, stored answer) of every key of ``partition``."""
        rows = self._steps.query_entities(
            "PartitionKey eq @pk", parameters={"pk": partition}, select=["RowKey", "Answer"]
        )
        return [(r["RowKey"], r.get("Answer")) for r in rows]
