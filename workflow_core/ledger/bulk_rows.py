"""The rows of bulk operations (``Services.bulk_operations``): the operation in ``~bulk``, and one
row per instance it covers in ``~bulk~<id>`` (families.py), written as its frozen snapshot before
the first action and then moved, ETag-guarded, from ``pending`` to ``claimed`` by one runner and to
its outcome by the same runner. Two runners never act on, or report, the same instance.
"""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta
from typing import Any

from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.data.tables import TableTransactionError, UpdateMode

from workflow_core import clock
from workflow_core.ledger.entities import delete_rows, if_match
from workflow_core.ledger.families import BULK_OUTCOMES_PREFIX, BULK_PARTITION, MAX_BATCH

PENDING, CLAIMED = "pending", "claimed"
CLAIM_LEASE = timedelta(minutes=5)  # a claim older than this was left by a runner that died


class BulkRows:
    def __init__(self, table: Any) -> None:
        self.table = table

    @classmethod
    def of(cls, ledger: Any) -> BulkRows:
        return cls(ledger.table_client())

    # ---- operations ------------------------------------------------------------------------------
    def create(self, row_key: str, properties: dict[str, Any]) -> str:
        meta = self.table.create_entity({"PartitionKey": BULK_PARTITION, "RowKey": row_key, **properties})
        return meta["etag"]

    def get(self, row_key: str) -> Any | None:
        try:
            return self.table.get_entity(BULK_PARTITION, row_key)
        except ResourceNotFoundError:
            return None

    def unfinished(self) -> list[Any]:
        return list(
            self.table.query_entities(
                "PartitionKey eq @pk and Done eq false", parameters={"pk": BULK_PARTITION}
            )
        )

    def finished_before(self, cutoff: datetime, limit: int) -> list[Any]:
        rows = self.table.query_entities(
            "PartitionKey eq @pk and Done eq true and Timestamp lt @cutoff",
            parameters={"pk": BULK_PARTITION, "cutoff": cutoff},
            results_per_page=min(limit, 1000),
        )
        return [row for _, row in zip(range(limit), rows, strict=False)]

    def replace(self, row_key: str, properties: dict[str, Any], etag: str | None) -> str:
        """ETag-guarded (two runners of one operation never both move its cursor)."""
        entity = {"PartitionKey": BULK_PARTITION, "RowKey": row_key, **properties}
        return self.table.update_entity(entity, mode=UpdateMode.REPLACE, **if_match(etag))["etag"]

    def delete(self, row: Any) -> None:
        """An operation and every row it left (its instances' rows first), each tolerant of a row
        already gone, the operation row last and ETag-guarded."""
        partition = BULK_OUTCOMES_PREFIX + row["RowKey"]
        rows = self.table.query_entities(
            "PartitionKey eq @pk", parameters={"pk": partition}, select=["RowKey"]
        )
        delete_rows(self.table, partition, [e["RowKey"] for e in rows])
        with contextlib.suppress(ResourceNotFoundError, ResourceModifiedError):
            self.table.delete_entity(row, **if_match(row.metadata["etag"]))

    # ---- its instances ----------------------------------------------------------------------------
    def freeze(self, bulk_id: str, instance_ids: list[str]) -> None:
        """Add instances to the operation's snapshot as ``pending`` (one already there is kept)."""
        partition = BULK_OUTCOMES_PREFIX + bulk_id
        now = clock.utcnow()
        rows = [{"PartitionKey": partition, "RowKey": i, "Result": PENDING, "At": now} for i in instance_ids]
        for start in range(0, len(rows), MAX_BATCH):
            chunk = rows[start : start + MAX_BATCH]
            try:
                self.table.submit_transaction([("create", r) for r in chunk])
            except (TableTransactionError, HttpResponseError):  # a page listed twice: one by one
                for r in chunk:
                    with contextlib.suppress(ResourceExistsError):
                        self.table.create_entity(r)

    def instance_rows(self, bulk_id: str, *, results: tuple[str, ...] = ()) -> list[Any]:
        clause = "PartitionKey eq @pk"
        params: dict[str, Any] = {"pk": BULK_OUTCOMES_PREFIX + bulk_id}
        if results:
            clause += " and ( " + " or ".join(f"Result eq @r{n}" for n in range(len(results))) + " )"
            params.update({f"r{n}": r for n, r in enumerate(results)})
        return list(self.table.query_entities(clause, parameters=params))

    def claim(self, row: Any, runner: str) -> Any | None:
        """The row claimed by ``runner`` (with its new ETag), or None: another runner moved it first."""
        keys = {"PartitionKey": row["PartitionKey"], "RowKey": row["RowKey"]}
        entity = {**keys, "Result": CLAIMED, "Runner": runner, "At": clock.utcnow()}
        etag = self._merge(entity, row.metadata["etag"])
        return None if etag is None else {**entity, "etag": etag}

    def settle(self, claimed: dict[str, Any], result: str, why: str = "") -> bool:
        """The claimed row's outcome, by the runner that claimed it (False: its claim was taken over)."""
        entity = {k: v for k, v in claimed.items() if k != "etag"}
        entity.update(Result=result, Why=why[:2000], At=clock.utcnow())
        return self._merge(entity, claimed["etag"]) is not None

    def _merge(self, entity: dict[str, Any], etag: str) -> str | None:
        """The row's new ETag, or None when it is no longer at ``etag`` (or gone)."""
        try:
            return self.table.update_entity(entity, mode=UpdateMode.MERGE, **if_match(etag))["etag"]
        except (ResourceModifiedError, ResourceNotFoundError):
            return None

    @staticmethod
    def stale(row: Any, now: datetime) -> bool:
        at = row.get("At")
        return row.get("Result") == CLAIMED and (not isinstance(at, datetime) or at < now - CLAIM_LEASE)
