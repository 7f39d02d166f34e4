"""Simulated remote services for the example agents: one Azure Table row per remote effect.

PartitionKey = service, RowKey = the idempotency key: a retry gets the stored result back and changes
nothing. An undo with nothing to undo leaves a tombstone, so an attempt arriving *after* its
compensation is refused instead of taking effect.
"""

from __future__ import annotations

import contextlib
import json
import threading
from typing import TYPE_CHECKING, Any

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.data.tables import TableClient, UpdateMode

from workflow_core import clock
from workflow_core.storage_clients import table_client

if TYPE_CHECKING:
    from workflow_core.runtime import Services
    from workflow_core.settings import StorageConnection

REMOTE_EFFECTS_TABLE = "RemoteEffects"
APPLIED = "applied"
UNDONE = "undone"


class EffectCancelled(RuntimeError):
    """The remote service refuses a request whose effect was already undone (compensated)."""


class RemoteEffects:
    """Idempotent create/undo of simulated remote effects in an Azure Table."""

    _cache: dict[tuple[StorageConnection, str], RemoteEffects] = {}
    _cache_lock = threading.Lock()

    def __init__(self, table: TableClient) -> None:
        self._table = table

    @classmethod
    def for_services(cls, services: Services) -> RemoteEffects:
        """One client per storage account (created on first use, table created if missing)."""
        storage = services.settings.storage
        with cls._cache_lock:
            if (storage, REMOTE_EFFECTS_TABLE) not in cls._cache:
                table = table_client(storage, REMOTE_EFFECTS_TABLE)
                with contextlib.suppress(ResourceExistsError):
                    table.create_table()
                cls._cache[storage, REMOTE_EFFECTS_TABLE] = cls(table)
            return cls._cache[storage, REMOTE_EFFECTS_TABLE]

    def apply(self, service: str, key: str, result: dict[str, Any]) -> dict[str, Any]:
        """Make the effect (once) and return ``result`` itself; with the same key again, a copy of
        the first result (observers, the test harness, count effects by that identity)."""
        entity = {"PartitionKey": service, "RowKey": key, "State": APPLIED, "AppliedAt": clock.utcnow()}
        try:
            self._table.create_entity({**entity, "Result": json.dumps(result, sort_keys=True, default=str)})
            return result
        except ResourceExistsError:
            stored = self._table.get_entity(service, key)
        if stored.get("State") == UNDONE:
            raise EffectCancelled(f"{service}: request {key!r} was cancelled (its effect was undone)")
        return json.loads(stored["Result"])

    def undo(self, service: str, key: str) -> dict[str, Any]:
        """Undo the effect if it exists; ``{"undone": True}`` or ``{"undone": False, "reason": ...}``."""
        for _ in range(10):
            try:
                stored = self._table.get_entity(service, key)
            except ResourceNotFoundError:
                tombstone = {"PartitionKey": service, "RowKey": key, "State": UNDONE, "Result": "null"}
                try:
                    self._table.create_entity({**tombstone, "UndoneAt": clock.utcnow()})
                except ResourceExistsError:
                    continue  # it was just applied: read it again and undo that
                return {"undone": False, "reason": "nothing to undo"}
            if stored.get("State") == UNDONE:
                return {"undone": False, "reason": "already undone"}
            stored.update(State=UNDONE, UndoneAt=clock.utcnow())
            try:
                self._table.update_entity(
                    stored,
                    mode=UpdateMode.REPLACE,
                    etag=stored.metadata["etag"],
                    match_condition=MatchConditions.IfNotModified,
                )
            except HttpResponseError as exc:
                if exc.status_code in (404, 412):  # changed or removed since read: look again
                    continue
                raise
            return {"undone": True}
        raise RuntimeError(f"{service}: could not undo {key!r}: it kept changing")

    def get(self, service: str, key: str) -> dict[str, Any] | None:
        """The stored effect (``State``, ``Result``...) or None."""
        try:
            return dict(self._table.get_entity(service, key))
        except ResourceNotFoundError:
            return None

    def list(self, service: str) -> list[dict[str, Any]]:
        return [
            dict(e) for e in self._table.query_entities("PartitionKey eq @pk", parameters={"pk": service})
        ]
