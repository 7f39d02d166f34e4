"""Retention of bulk operations: delete finished (``Done``) operations last updated more than
``RETENTION_DAYS`` ago, with everything they left in the ledger, so the ledger stays bounded.

Per operation, in this order (each delete tolerant of a row already gone, so a crash anywhere is
finished by the next tick, which finds the operation row again):

1. its outcome rows (partition ``~bulk~<id>``), in entity-group transactions of at most 100;
2. the idempotency keys whose stored answer names it: first the API-wide ``~idempotency`` index row
   (only while it still names :data:`~supervisor.bulk_keys.KEYS_PARTITION`, ETag-guarded), then the
   key row in ``~bulk-keys``, so the key is free again;
3. last, the operation row itself (ETag-guarded: an operation changed meanwhile is left).

An unfinished operation (``Done`` false) is never touched. At most ``batch_size`` operations a tick.
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceModifiedError, ResourceNotFoundError

from supervisor.bulk import BULK_PARTITION, BulkStore
from supervisor.bulk_keys import KEYS_PARTITION
from workflow_core import clock
from workflow_core.ledger import StepLedger
from workflow_core.ledger.idempotency import forget_instance_keys

log = logging.getLogger(__name__)
MAX_BATCH = 100  # Table Storage's entity-group transaction limit


@dataclass
class BulkPurgeReport:
    deleted: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # operation -> why (the next tick again)


def _named_operation(answer: Any) -> str | None:
    try:
        body = json.loads(answer) if isinstance(answer, str) else None
    except ValueError:
        return None
    return body.get("id") if isinstance(body, dict) and isinstance(body.get("id"), str) else None


class BulkRetention:
    def __init__(self, ledger: StepLedger, *, retention_days: int = 30, batch_size: int = 50) -> None:
        self.ledger = ledger
        self.table = BulkStore(ledger).table
        self.retention_days = retention_days
        self.batch_size = batch_size

    def candidates(self, now: datetime) -> list[Any]:
        """Finished operation rows last written before the cutoff (at most ``batch_size``)."""
        cutoff = now - timedelta(days=self.retention_days)
        rows = self.table.query_entities(
            "PartitionKey eq @pk and Done eq true and Timestamp lt @cutoff",
            parameters={"pk": BULK_PARTITION, "cutoff": cutoff},
            results_per_page=min(self.batch_size, 1000),
        )
        found = []
        for row in rows:
            if len(found) >= self.batch_size:
                break
            found.append(row)
        return found

    def keys_by_operation(self) -> dict[str, list[str]]:
        """Idempotency key rows (``~idem~<key>``) by the operation their stored answer names."""
        rows = self.table.query_entities(
            "PartitionKey eq @pk", parameters={"pk": KEYS_PARTITION}, select=["RowKey", "Answer"]
        )
        keys: dict[str, list[str]] = {}
        for row in rows:
            op_id = _named_operation(row.get("Answer"))
            if op_id:
                keys.setdefault(op_id, []).append(row["RowKey"])
        return keys

    def run(self, now: datetime | None = None) -> BulkPurgeReport:
        report = BulkPurgeReport()
        candidates = self.candidates(now or clock.utcnow())
        if not candidates:
            return report
        keys = self.keys_by_operation()
        for row in candidates:
            op_id = row["RowKey"]
            try:
                self.delete(row, keys.get(op_id, []))
                report.deleted.append(op_id)
            except Exception as exc:
                log.warning("bulk retention of %s stopped: %s", op_id, exc)
                report.failed[op_id] = f"{type(exc).__name__}: {exc}"
        return report

    def delete(self, row: Any, key_rows: list[str]) -> None:
        op_id = row["RowKey"]
        partition = f"{BULK_PARTITION}~{op_id}"
        outcomes = [
            e["RowKey"]
            for e in self.table.query_entities(
                "PartitionKey eq @pk", parameters={"pk": partition}, select=["RowKey"]
            )
        ]
        for start in range(0, len(outcomes), MAX_BATCH):
            chunk = outcomes[start : start + MAX_BATCH]
            try:
                self.table.submit_transaction(
                    [("delete", {"PartitionKey": partition, "RowKey": r}) for r in chunk]
                )
            except HttpResponseError:  # one row gone meanwhile fails the batch: one by one
                for r in chunk:
                    with contextlib.suppress(ResourceNotFoundError):
                        self.table.delete_entity(partition, r)
        for row_key in key_rows:
            forget_instance_keys(self.ledger, KEYS_PARTITION, [row_key])  # before its pointer goes
            with contextlib.suppress(ResourceNotFoundError):
                self.table.delete_entity(KEYS_PARTITION, row_key)
        with contextlib.suppress(ResourceNotFoundError, ResourceModifiedError):
            self.table.delete_entity(
                row, etag=row.metadata["etag"], match_condition=MatchConditions.IfNotModified
            )


def bulk_retention_tick(ledger: StepLedger, ops: Any, now: datetime | None = None) -> BulkPurgeReport:
    """Called from ``retention_tick``: one bounded pass (``RETENTION_DAYS``, ``RETENTION_BATCH_SIZE``)."""
    report = BulkRetention(ledger, retention_days=ops.days, batch_size=ops.batch_size).run(now)
    if report.deleted or report.failed:
        log.info("bulk retention: deleted %d, failed %d", len(report.deleted), len(report.failed))
    return report
