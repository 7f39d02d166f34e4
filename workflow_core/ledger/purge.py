"""Purging an instance by the registry (``families.py``): mark it Purging when the instance state
allows, conditional on the record and steps as read, then delete every row of it, family by family,
idempotently (order and why: docs/operations.md, "Retention: purging finished instances").
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from azure.core.exceptions import ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import UpdateMode

from workflow_core import clock
from workflow_core.ledger import families as F
from workflow_core.ledger.entities import _from_entity, as_utc, delete_rows, if_match
from workflow_core.ledger.errors import ConcurrencyConflict, IllegalInstanceTransition
from workflow_core.ledger.idempotency import IdempotencyKeys
from workflow_core.ledger.instance import InstanceRecord, InstanceStatus
from workflow_core.ledger.instance_list import listing_entity
from workflow_core.ledger.instance_state import Action, refusal, unchanged
from workflow_core.ledger.instance_store import from_instance_entity

IN_FLIGHT_BOUND = timedelta(minutes=15)  # longer than any request is carried out
Purger = Callable[[Any, InstanceRecord, list[Any]], None]  # (ledger, record, its partition's rows)


def _index_rows(ledger: Any, record: InstanceRecord, rows: list[Any]) -> None:
    """The index rows the partition's rows name: its steps' and its record's (``IndexKey``)."""
    ledger._delete_index_rows([r["IndexKey"] for r in rows if r.get("IndexKey")])


def _key_index(ledger: Any, record: InstanceRecord, rows: list[Any]) -> None:
    IdempotencyKeys(ledger).forget_index_rows(record.instance_id, [r["RowKey"] for r in rows])


def _listing(ledger: Any, record: InstanceRecord, rows: list[Any]) -> None:
    if record.started_at is not None:
        listing = listing_entity(record)
        with contextlib.suppress(ResourceNotFoundError):
            ledger._index.delete_entity(listing["PartitionKey"], listing["RowKey"])


def _parked(ledger: Any, record: InstanceRecord, rows: list[Any]) -> None:
    found = ledger._index.query_entities(
        "PartitionKey eq @pk and InstanceId eq @id",
        parameters={"pk": F.PARKED_PARTITION, "id": record.instance_id},
        select=["PartitionKey", "RowKey"],
    )
    for row in list(found):
        with contextlib.suppress(ResourceNotFoundError):
            ledger._index.delete_entity(row["PartitionKey"], row["RowKey"])


def _limits(ledger: Any, record: InstanceRecord, rows: list[Any]) -> None:
    """Slots the instance still holds are freed, places it still waits in deleted (ETag-guarded: a
    row that moved on meanwhile is no longer the instance's)."""
    mine = record.instance_id + "|"
    found = ledger._steps.query_entities(
        "PartitionKey gt @lo and PartitionKey lt @hi and Holder ge @mine and Holder lt @next",
        parameters={"lo": F.LIMITS_PREFIX, "hi": F.LIMITS_PREFIX + "~", "mine": mine, "next": mine + "~"},
        select=["PartitionKey", "RowKey", "Holder"],
    )
    for row in list(found):
        condition = if_match(row.metadata["etag"])
        with contextlib.suppress(ResourceNotFoundError, ResourceModifiedError):
            if row["RowKey"].startswith("slot~"):
                freed = {**row, "Holder": "", "Deadline": ""}  # the row as selected: its keys, Holder
                ledger._steps.update_entity(freed, mode=UpdateMode.MERGE, **condition)
            else:
                ledger._steps.delete_entity(row["PartitionKey"], row["RowKey"], **condition)


def _bulk_rows(ledger: Any, record: InstanceRecord, rows: list[Any]) -> None:
    """Its row in each bulk operation recorded since it started (an older one never listed it)."""
    since = record.started_at
    clause = "PartitionKey eq @pk" + (" and CreatedAt ge @since" if since is not None else "")
    ops = ledger._steps.query_entities(
        clause, parameters={"pk": F.BULK_PARTITION, "since": since}, select=["RowKey"]
    )
    for op in list(ops):
        with contextlib.suppress(ResourceNotFoundError):
            ledger._steps.delete_entity(F.BULK_OUTCOMES_PREFIX + op["RowKey"], record.instance_id)


# Every family purge deletes outside the instance's partition, by its name in the registry.
PURGERS: dict[str, Purger] = {
    "deadline index": _index_rows,
    "attention index": _index_rows,
    "instance index": _index_rows,
    "key index": _key_index,
    "parked messages": _parked,
    "limits slots and waiters": _limits,
    "bulk snapshot and outcomes": _bulk_rows,
    "listing": _listing,
}
_LAST = "listing"  # after the record: a listing row without one is dropped by the next read


class PurgeMixin:
    def instance_rows(self, instance_id: str) -> list[Any]:
        """Every row of the instance's partition (record, steps, audit, keys), in one query."""
        return list(self._steps.query_entities("PartitionKey eq @pk", parameters={"pk": instance_id}))

    def mark_purging(
        self,
        instance_id: str,
        *,
        actor: str,
        reason: str,
        keep: Callable[[InstanceRecord], bool] = lambda _: True,
    ) -> InstanceRecord | None:
        """The instance moved to Purging (or already Purging), or None: gone, ``keep`` says no, the
        instance state refuses a purge (:func:`purge_refusal`), or it changed since it was read."""
        record, rows = self._purge_view(instance_id)
        if record is None:
            return None
        if record.status is InstanceStatus.PURGING:
            return record
        if not keep(record) or purge_refusal(record, rows) is not None:
            return None
        # conditional on the record and its steps as read: an action since voids it (a step action
        # on a finished instance also carries the record's ETag: beyond a transaction's rows, that)
        steps = [r for r in rows if not r["RowKey"].startswith("~")]
        guards = [unchanged(instance_id, r["RowKey"], r.metadata["etag"]) for r in steps]
        try:
            return self.transition_instance(
                record,
                InstanceStatus.PURGING,
                actor=actor,
                reason=reason,
                with_rows=guards if len(guards) <= F.MAX_BATCH - 2 else [],
            )
        except (ConcurrencyConflict, IllegalInstanceTransition):
            return None

    def may_purge(self, instance_id: str) -> bool:
        """Would :meth:`mark_purging` take it now (``sas purge --dry-run`` shows what the mark does)?"""
        record, rows = self._purge_view(instance_id)
        return record is not None and purge_refusal(record, rows) is None

    def _purge_view(self, instance_id: str) -> tuple[InstanceRecord | None, list[Any]]:
        rows = self.instance_rows(instance_id)
        entity = next((r for r in rows if r["RowKey"] == F.INSTANCE_ROW), None)
        return (from_instance_entity(entity) if entity is not None else None), rows

    def purge_instance(self, record: InstanceRecord, rows: list[Any]) -> None:
        """Delete every row of a Purging instance (``rows``: its partition as read), by the registry."""
        if record.status is not InstanceStatus.PURGING:
            raise ValueError(f"instance {record.instance_id!r} is {record.status.value}, not Purging")
        names = [f.name for f in F.FAMILIES if f.name in PURGERS and f.name != _LAST]
        for purger in dict.fromkeys(PURGERS[name] for name in names):  # one call each
            purger(self, record, rows)
        delete_rows(
            self._steps, record.instance_id, [r["RowKey"] for r in rows if r["RowKey"] != F.INSTANCE_ROW]
        )
        with contextlib.suppress(ResourceNotFoundError):
            self._steps.delete_entity(record.instance_id, F.INSTANCE_ROW, **if_match(record.etag))
        PURGERS[_LAST](self, record, rows)


def purge_refusal(record: InstanceRecord, rows: list[Any]) -> tuple[str, str] | None:
    """The instance state's word on purging the instance, from its partition's rows: its steps, and
    whether an operator action is in flight (an idempotency row without its answer)."""
    steps = [_from_entity(r) for r in rows if not r["RowKey"].startswith("~")]
    since = clock.utcnow() - IN_FLIGHT_BOUND  # a request that died unanswered holds no instance forever
    in_flight = any(
        r["RowKey"].startswith(F.IDEMPOTENCY_PREFIX)
        and r.get("Status") is None
        and isinstance(at := as_utc(r.get("At")), datetime)
        and at > since
        for r in rows
    )
    return refusal(Action.PURGE, record, steps, action_in_flight=in_flight)
