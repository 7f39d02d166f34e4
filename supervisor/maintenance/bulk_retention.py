"""Retention of bulk operations: delete finished (``Done``) operations last updated more than
``RETENTION_DAYS`` ago, with everything they left in the ledger, so the ledger stays bounded.

Per operation, in this order (each delete tolerant of a row already gone, so a crash anywhere is
finished by the next tick, which finds the operation row again):

1. the idempotency keys whose stored answer names it: first the API-wide ``~idempotency`` index row
   (only while it still names :data:`~supervisor.maintenance.bulk_keys.KEYS_PARTITION`, ETag-guarded),
   then the key row in ``~bulk-keys``, so the key is free again;
2. its instances' rows (partition ``~bulk~<id>``), in entity-group transactions of at most 100;
3. last, the operation row itself (ETag-guarded: an operation changed meanwhile is left).

An unfinished operation (``Done`` false) is never touched. At most ``batch_size`` operations a tick.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from supervisor.maintenance.bulk_keys import KEYS_PARTITION
from workflow_core import clock
from workflow_core.ledger import StepLedger
from workflow_core.ledger.bulk_rows import BulkRows
from workflow_core.ledger.idempotency import IdempotencyKeys

log = logging.getLogger(__name__)


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
        self.rows = BulkRows.of(ledger)
        self.keys = IdempotencyKeys(ledger)
        self.retention_days = retention_days
        self.batch_size = batch_size

    def candidates(self, now: datetime) -> list[Any]:
        """Finished operation rows last written before the cutoff (at most ``batch_size``)."""
        return self.rows.finished_before(now - timedelta(days=self.retention_days), self.batch_size)

    def keys_by_operation(self) -> dict[str, list[str]]:
        """Idempotency key rows (``~idem~<key>``) by the operation their stored answer names."""
        keys: dict[str, list[str]] = {}
        for row_key, answer in self.keys.answers(KEYS_PARTITION):
            op_id = _named_operation(answer)
            if op_id:
                keys.setdefault(op_id, []).append(row_key)
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
                for row_key in keys.get(op_id, []):  # its keys before the operation they name
                    self.keys.forget(KEYS_PARTITION, row_key)
                self.rows.delete(row)
                report.deleted.append(op_id)
            except Exception as exc:
                log.warning("bulk retention of %s stopped: %s", op_id, exc)
                report.failed[op_id] = f"{type(exc).__name__}: {exc}"
        return report


def bulk_retention_tick(ledger: StepLedger, ops: Any, now: datetime | None = None) -> BulkPurgeReport:
    """Called from ``retention_tick``: one bounded pass (``RETENTION_DAYS``, ``RETENTION_BATCH_SIZE``)."""
    report = BulkRetention(ledger, retention_days=ops.days, batch_size=ops.batch_size).run(now)
    if report.deleted or report.failed:
        log.info("bulk retention: deleted %d, failed %d", len(report.deleted), len(report.failed))
    return report
