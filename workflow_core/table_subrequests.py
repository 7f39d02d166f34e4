"""A transaction's sub-requests built straight from the operations: the SDK's requests, without its
generated request builders (a third of their client CPU; docs/capacity.md).

It uses the SDK's own entity serializer, key escaping and match conditions for the shapes the app
sends; an operation with keyword arguments beyond ``mode``, ``etag`` and ``match_condition``, keys
that are not plain strings, an entity read from the table given a condition without its ETag, or a
Cosmos endpoint goes through the SDK's builders. ``tests/storage/test_table_subrequests.py`` holds
every shape and random operations to the SDK's requests and fails if the SDK sources it mirrors change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from azure.core import MatchConditions
from azure.core.rest import HttpRequest
from azure.data.tables import TableEntity, UpdateMode
from azure.data.tables._generated._vendor import prep_if_match
from azure.data.tables._serialize import _add_entity_properties, _get_match_condition, _prepare_key
from azure.data.tables._table_batch import TableBatchOperations

_FULL = "application/json;odata=minimalmetadata"  # the Accept of an insert and of a delete
_KNOWN = frozenset({"mode", "etag", "match_condition"})
_MODES = (UpdateMode.MERGE, UpdateMode.REPLACE)


class SubRequests(TableBatchOperations):
    """``TableBatchOperations`` building the SDK's sub-requests directly (shapes above)."""

    def _plain(self, entity: Any, kwargs: dict[str, Any]) -> bool:
        return (
            isinstance(entity, Mapping)
            and not self._is_cosmos_endpoint
            and kwargs.keys() <= _KNOWN
            and isinstance(kwargs.get("etag"), str | None)
            and type(entity.get("PartitionKey")) is str
            and type(entity.get("RowKey")) is str
            # the SDK takes the ETag of an entity it read when given a condition without one
            and not (
                kwargs.get("match_condition") and not kwargs.get("etag") and isinstance(entity, TableEntity)
            )
        )

    def _append(
        self, method: str, entity: Any, *, body: bool, accept: str = "application/json", guard: Any = None
    ) -> None:
        """The SDK's sub-request, its checks in the SDK's order: the partition, the body, then (with
        ``guard``, the operation's keywords) the match condition. An insert (POST) names the table."""
        self._verify_partition_key(entity)
        json = _add_entity_properties(entity) if body else None
        headers = {"x-ms-version": self._config.version, "DataServiceVersion": "3.0", "Accept": accept}
        if guard is not None:
            etag, condition = guard.get("etag"), guard.get("match_condition")
            condition = _get_match_condition(
                etag=etag, match_condition=condition or MatchConditions.Unconditionally
            )
            headers["If-Match"] = prep_if_match(etag, condition)  # IfNotModified or IfPresent: never None
        url = f"{self._base_url}/{quote(self.table_name, safe='')}"
        if method != "POST":
            pk = quote(_prepare_key(entity["PartitionKey"]), safe="")
            url += f"(PartitionKey='{pk}',RowKey='{quote(_prepare_key(entity['RowKey']), safe='')}')"
        self.requests.append(HttpRequest(method, url, headers=headers, json=json))

    def create(self, entity: Any, **kwargs: Any) -> None:
        if not self._plain(entity, kwargs) or kwargs:
            return super().create(entity, **kwargs)
        return self._append("POST", entity, body=True, accept=_FULL)

    def update(self, entity: Any, mode: Any = UpdateMode.MERGE, **kwargs: Any) -> None:
        if not self._plain(entity, kwargs) or mode not in _MODES:
            return super().update(entity, mode, **kwargs)
        return self._append("PUT" if mode == UpdateMode.REPLACE else "PATCH", entity, body=True, guard=kwargs)

    def upsert(self, entity: Any, mode: Any = UpdateMode.MERGE, **kwargs: Any) -> None:
        if not self._plain(entity, kwargs) or kwargs or mode not in _MODES:
            return super().upsert(entity, mode, **kwargs)
        return self._append("PUT" if mode == UpdateMode.REPLACE else "PATCH", entity, body=True)

    def delete(self, entity: Any, **kwargs: Any) -> None:
        if not self._plain(entity, kwargs) or "mode" in kwargs:
            return super().delete(entity, **kwargs)
        return self._append("DELETE", entity, body=False, accept=_FULL, guard=kwargs)
