"""Retention: purge instances that finished more than their retention period ago, in two moves, so
no reader ever sees one half deleted as live (docs/operations.md, "Retention"):

1. *Mark*: a finished, unflagged record moves to ``Purging`` (ETag-guarded, audited).
2. *Finish* (idempotent: a crash is finished by the next tick): archive (``AUDIT_ARCHIVE_CONTAINER``:
   every row as one JSON-lines blob, read back before anything is deleted), its Durable histories,
   then every row of it (``ledger.purge_instance``).

Both moves ask the one instance state: an instance with a live step is not taken. Payload blobs are
content-addressed and shared, so the container's lifecycle rule expires them, not the purge.
:class:`BulkRetention` deletes finished bulk operations the same way.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError

from workflow_core import clock
from workflow_core.contracts import compensation_instance_id
from workflow_core.ledger import InstanceRecord, InstanceStatus, StepLedger
from workflow_core.ledger.bulk_rows import BulkRows
from workflow_core.ledger.families import BULK_KEYS_PARTITION
from workflow_core.ledger.idempotency import IdempotencyKeys
from workflow_core.ledger.instance import PURGEABLE_INSTANCE_STATUSES

log = logging.getLogger(__name__)
RETENTION_ACTOR = "retention"
END = "end"  # kind of an archive's last line: the archive is complete
PurgeHistory = Callable[[str], Awaitable[Any]]  # a Durable client's ``purge_instance_history``


@dataclass
class PurgeReport:
    dry_run: bool
    cutoff: datetime
    marked: list[str] = field(default_factory=list)  # moved to Purging by this run
    purged: list[str] = field(default_factory=list)  # deleted by this run
    would_purge: list[str] = field(default_factory=list)  # dry run: what a real run would take
    failed: dict[str, str] = field(default_factory=dict)  # instance -> why (finished by a later tick)

    def as_dict(self) -> dict[str, Any]:
        return {
            "dryRun": self.dry_run,
            "cutoff": self.cutoff.isoformat(),
            "marked": self.marked,
            "purged": self.purged,
            "wouldPurge": self.would_purge,
            "failed": self.failed,
        }


def purgeable(record: InstanceRecord, cutoff: datetime) -> bool:
    """Finished before ``cutoff``, not flagged, not already being purged."""
    return (
        record.status in PURGEABLE_INSTANCE_STATUSES
        and not record.needs_attention
        and record.completed_at is not None
        and record.completed_at < cutoff
    )


@dataclass
class Retention:
    """One ledger's retention. ``purge_history``: the Durable client's purge (None: the CLI, which only
    marks); ``archive``: a blob ``ContainerClient`` (None: no archive)."""

    ledger: StepLedger
    _: KW_ONLY
    retention_days: int = 30
    per_workflow: dict[str, int] = field(default_factory=dict)  # workflow -> its own retention days
    batch_size: int = 50
    purge_history: PurgeHistory | None = None
    archive: Any = None
    actor: str = RETENTION_ACTOR
    _archive_ready: bool = field(default=False, init=False)

    def cutoff(self, now: datetime, workflow: str | None = None, days: int | None = None) -> datetime:
        keep = days if days is not None else self.per_workflow.get(workflow or "", self.retention_days)
        return now - timedelta(days=keep)

    def candidates(
        self, now: datetime, *, workflow: str | None = None, older_than_days: int | None = None
    ) -> tuple[list[InstanceRecord], list[InstanceRecord]]:
        """(already Purging, purgeable now), together at most ``batch_size``. The purgeable scan goes
        first: reading a listing row back repairs one a crash left stale, which the Purging scan finds."""
        # nothing started after the latest cutoff can have finished before its own
        cutoffs = [self.cutoff(now, None, older_than_days)]
        if older_than_days is None:
            cutoffs += [self.cutoff(now, w) for w in self.per_workflow]
        fresh: list[InstanceRecord] = []
        for status in sorted(PURGEABLE_INSTANCE_STATUSES):
            fresh += self._scan(
                status,
                workflow,
                max(cutoffs),
                lambda r: purgeable(r, self.cutoff(now, r.workflow, older_than_days)),
                self.batch_size - len(fresh),
            )
            if len(fresh) >= self.batch_size:
                break
        purging = self._scan(InstanceStatus.PURGING, workflow, None, lambda r: True)[: self.batch_size]
        return purging, fresh[: self.batch_size - len(purging)]

    def _scan(self, status, workflow, started_to, keep, limit: int | None = None) -> list[InstanceRecord]:
        limit = self.batch_size if limit is None else limit
        found: list[InstanceRecord] = []
        token = None
        while len(found) < limit:
            page, token = self.ledger.list_instances(
                status=status,
                workflow=workflow,
                started_to=started_to,
                limit=min(limit, 1000),
                continuation=token,
            )
            found += [r for r in page if keep(r)]
            if token is None:
                break
        return found[:limit]

    async def run(
        self,
        now: datetime | None = None,
        *,
        workflow: str | None = None,
        older_than_days: int | None = None,
        dry_run: bool = False,
        finish: bool = True,
    ) -> PurgeReport:
        """One tick: finish what a crash left Purging, then mark and purge the next ones."""
        now = now or clock.utcnow()
        report = PurgeReport(dry_run, self.cutoff(now, workflow, older_than_days))
        purging, fresh = self.candidates(now, workflow=workflow, older_than_days=older_than_days)
        if dry_run:
            fresh = [r for r in fresh if self.ledger.may_purge(r.instance_id)]  # what the mark would take
            report.would_purge = [r.instance_id for r in purging + fresh]
            return report
        queue = list(purging)
        for record in fresh:
            cutoff = self.cutoff(now, record.workflow, older_than_days)
            # the instance state, re-read with its steps, decides (the listing is only an index)
            marked = self.ledger.mark_purging(
                record.instance_id,
                actor=self.actor,
                reason=f"retention: finished {record.completed_at.isoformat()}, before {cutoff.isoformat()}",
                keep=lambda current, cutoff=cutoff: purgeable(current, cutoff),
            )
            if marked is not None and marked.status is InstanceStatus.PURGING:
                report.marked.append(marked.instance_id)
                queue.append(marked)
        if not finish:
            return report
        for record in queue:
            try:
                if await self.finish(record.instance_id):
                    report.purged.append(record.instance_id)
            except Exception as exc:
                log.warning("purge of %s stopped: %s", record.instance_id, exc)
                report.failed[record.instance_id] = f"{type(exc).__name__}: {exc}"
        return report

    async def finish(self, instance_id: str) -> bool:
        """Delete a Purging instance (idempotent). False: it is not Purging (nothing deleted)."""
        record = self.ledger.find_instance(instance_id)
        if record is None or record.status is not InstanceStatus.PURGING:
            return False  # never delete anything else
        rows = self.ledger.instance_rows(instance_id)
        if self.archive is not None:
            self._archive(instance_id, rows)
        if self.purge_history is not None:
            for orchestration in (instance_id, compensation_instance_id(instance_id)):
                await self.purge_history(orchestration)
        self.ledger.purge_instance(record, rows)
        return True

    def _archive(self, instance_id: str, rows: list[Any]) -> None:
        """Every row to delete in ``<instance>.jsonl`` (merged with an interrupted purge's), read back."""
        name = f"{instance_id}.jsonl"
        blob = self.archive.get_blob_client(name)
        kept: dict[str, dict[str, Any]] = {}
        with contextlib.suppress(ResourceNotFoundError):
            for text in blob.download_blob().readall().decode().splitlines():
                line = json.loads(text)
                if line.get("kind") != END:
                    kept[line["RowKey"]] = line
        keyed = ({"PartitionKey": r["PartitionKey"], "RowKey": r["RowKey"], **dict(r)} for r in rows)
        current = {e["RowKey"]: json.loads(json.dumps(e, default=str)) for e in keyed}
        if kept and set(current) <= set(kept):
            return  # an interrupted purge archived all of it (and may have deleted some since)
        merged = {**kept, **current}
        lines = [json.dumps(merged[key], sort_keys=True) for key in sorted(merged)]
        lines.append(json.dumps({"kind": END, "rows": len(merged), "instanceId": instance_id}))
        data = ("\n".join(lines) + "\n").encode()
        if not self._archive_ready:  # once per process
            with contextlib.suppress(ResourceExistsError):
                self.archive.create_container()
            self._archive_ready = True
        blob.upload_blob(data, overwrite=True)
        if blob.download_blob().readall() != data:
            raise OSError(f"archive {name} reads back differently from what was written; nothing deleted")


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
    """Delete finished (``Done``) bulk operations last updated more than ``retention_days`` ago, at most
    ``batch_size`` a tick, with what they left: first the idempotency keys whose stored answer names one
    (the ``~idempotency`` index row while it names ``~bulk-keys``, ETag-guarded, then the key row),
    then its instances' rows, last the operation row (ETag-guarded). Every delete tolerates a row
    already gone, so the next tick finishes what a crash left."""

    def __init__(self, ledger: StepLedger, *, retention_days: int = 30, batch_size: int = 50) -> None:
        self.rows = BulkRows.of(ledger)
        self.keys = IdempotencyKeys(ledger)
        self.retention_days = retention_days
        self.batch_size = batch_size

    def run(self, now: datetime | None = None) -> BulkPurgeReport:
        report = BulkPurgeReport()
        cutoff = (now or clock.utcnow()) - timedelta(days=self.retention_days)
        candidates = self.rows.finished_before(cutoff, self.batch_size)
        if not candidates:
            return report
        keys: dict[str, list[str]] = {}  # key rows (``~idem~<key>``) by the operation they name
        for row_key, answer in self.keys.answers(BULK_KEYS_PARTITION):
            if op_id := _named_operation(answer):
                keys.setdefault(op_id, []).append(row_key)
        for row in candidates:
            op_id = row["RowKey"]
            try:
                for row_key in keys.get(op_id, []):  # its keys before the operation they name
                    self.keys.forget(BULK_KEYS_PARTITION, row_key)
                self.rows.delete(row)
                report.deleted.append(op_id)
            except Exception as exc:
                log.warning("bulk retention of %s stopped: %s", op_id, exc)
                report.failed[op_id] = f"{type(exc).__name__}: {exc}"
        if report.deleted or report.failed:
            log.info("bulk retention: deleted %d, failed %d", len(report.deleted), len(report.failed))
        return report
