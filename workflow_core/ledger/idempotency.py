"""Operator requests' idempotency keys, kept in the instance's own ledger partition.

A row ``~idem~<key>`` is inserted (insert-only: the first request wins) before the action runs, and
the answer is merged into it afterwards, ETag-guarded. A repeat with the same key finds the row and
is answered from it without acting again; a key reused for another request is refused.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.data.tables import UpdateMode

from workflow_core import clock

IDEMPOTENCY_PREFIX = "~idem~"  # after "~": outside the step rows and the audit rows
KEY_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,100}")  # a key as the API and the CLI take it


def _row(ledger: Any, instance_id: str, key: str) -> tuple[Any, str]:
    return ledger._steps, IDEMPOTENCY_PREFIX + key


def _claim_key(ledger: Any, instance_id: str, key: str, request: str, actor: str) -> dict[str, Any] | None:
    """None when this request is the first with ``key`` (it then acts); else the stored row:
    ``{"request": ..., "status": int | None, "body": str | None}`` (status None: still acting)."""
    table, row_key = _row(ledger, instance_id, key)
    try:
        table.create_entity(
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
        entity = table.get_entity(instance_id, row_key)
        return {
            "request": entity.get("Request"),
            "status": entity.get("Status"),
            "body": entity.get("Answer"),
        }


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
    first request's stored answer when ``request`` repeats it. :class:`KeyReused` for a key claimed
    by another request, :class:`KeyInProgress` while the first one still acts. The API and ``sas``
    both go through here, each saying it its own way."""
    stored = _claim_key(ledger, instance_id, key, request, actor)
    if stored is None:
        return None
    if stored["request"] != request:
        raise KeyReused(stored["request"])
    if stored["status"] is None:
        raise KeyInProgress(key)
    return stored


def record_answer(ledger: Any, instance_id: str, key: str, status: int, body: Any) -> None:
    table, row_key = _row(ledger, instance_id, key)
    entity = table.get_entity(instance_id, row_key)
    entity["Status"] = status
    entity["Answer"] = body if isinstance(body, str) else json.dumps(body)
    table.update_entity(
        entity, mode=UpdateMode.MERGE, etag=entity.metadata["etag"], match_condition=_if_match()
    )


def release_key(ledger: Any, instance_id: str, key: str) -> None:
    """Forget a key whose request failed on our side (5xx): a retry with it may act."""
    table, row_key = _row(ledger, instance_id, key)
    with contextlib.suppress(ResourceNotFoundError):
        table.delete_entity(instance_id, row_key)


def _if_match() -> Any:
    from azure.core import MatchConditions

    return MatchConditions.IfNotModified
