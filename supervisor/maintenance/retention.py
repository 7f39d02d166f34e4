"""Retention: purge instances that finished more than their retention period ago.

An instance is purged in two moves, so that no reader ever sees it half deleted as live:

1. *Mark*: its record moves ``Succeeded|Compensated|Cancelled -> Purging`` (ETag-guarded, with its
   audit row): from then on it is listed and read as ``Purging``, never as live. Only a finished
   instance not flagged for an operator is marked (:data:`PURGEABLE_INSTANCE_STATUSES`).
2. *Finish* (idempotent, so a crash anywhere is finished by the next tick): archive (when
   ``AUDIT_ARCHIVE_CONTAINER`` is set: every row of its partition as one JSON-lines blob, written and
   read back before anything is deleted), its Durable histories (workflow and compensation
   orchestrations), then every row of it by the ledger's registry (``ledger.purge_instance``).

Both moves ask the one instance state (``workflow_core/ledger/instance_state.py``): an instance
with a live step (an operator compensating a step of one that finished long ago) is not taken.

Payload blobs are content-addressed (``workflow_core.payloads``): one blob can serve many instances,
so the purge does not delete them; the container's lifecycle rule expires them (docs/operations.md).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError

from workflow_core import clock
from workflow_core.contracts import compensation_instance_id
from workflow_core.ledger import InstanceRecord, InstanceStatus, StepLedger
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


def _line(entity: Any) -> dict[str, Any]:
    return {"PartitionKey": entity["PartitionKey"], "RowKey": entity["RowKey"], **dict(entity)}


class Retention:
    """One ledger's retention. ``purge_history``: the Durable client's purge (None: no task hub, e.g.
    the CLI, which only marks); ``archive``: a blob ``ContainerClient`` (None: no archive)."""

    def __init__(
        self,
        ledger: StepLedger,
        *,
        retention_days: int = 30,
        per_workflow: dict[str, int] | None = None,
        batch_size: int = 50,
        purge_history: PurgeHistory | None = None,
        archive: Any = None,
        actor: str = RETENTION_ACTOR,
    ) -> None:
        self.ledger = ledger
        self.retention_days = retention_days
        self.per_workflow = per_workflow or {}
        self.batch_size = batch_size
        self.purge_history = purge_history
        self.archive = archive
        self.actor = actor
        self._archive_ready = False

    def cutoff(self, now: datetime, workflow: str | None = None, days: int | None = None) -> datetime:
        keep = days if days is not None else self.per_workflow.get(workflow or "", self.retention_days)
        return now - timedelta(days=keep)

    def candidates(
        self, now: datetime, *, workflow: str | None = None, older_than_days: int | None = None
    ) -> tuple[list[InstanceRecord], list[InstanceRecord]]:
        """(already Purging, purgeable now), together at most ``batch_size``. The purgeable scan
        goes first: reading a listing row back repairs one a crash left saying Succeeded for a record
        already Purging, which the Purging scan then finds."""
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

    def mark(self, record: InstanceRecord, cutoff: datetime, reason: str) -> InstanceRecord | None:
        """Move ``record`` to Purging if the instance state still allows it (re-read with its steps:
        the listing is an index, and a finished instance may have a step an operator compensates)."""
        return self.ledger.mark_purging(
            record.instance_id,
            actor=self.actor,
            reason=f"retention: {reason}",
            keep=lambda current: purgeable(current, cutoff),
        )

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
            why = f"finished {record.completed_at.isoformat()}, before {cutoff.isoformat()}"
            marked = self.mark(record, cutoff, why)
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
        """Every row about to be deleted in ``<instance>.jsonl`` (merged with what an interrupted
        purge archived before), then read back and checked, before anything is deleted."""
        name = f"{instance_id}.jsonl"
        blob = self.archive.get_blob_client(name)
        kept: dict[str, dict[str, Any]] = {}
        try:
            for text in blob.download_blob().readall().decode().splitlines():
                line = json.loads(text)
                if line.get("kind") != END:
                    kept[line["RowKey"]] = line
        except ResourceNotFoundError:
            pass
        current = {r["RowKey"]: json.loads(json.dumps(_line(r), default=str)) for r in rows}
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
