"""The watchdog's liveness row in the step ledger: when it last ticked, so ``sas doctor`` can say so.

One row, partition :data:`PARTITION` (never an instance id: instance ids are validated and cannot
start with ``~``), beside the stored definition versions. Every write is ETag-guarded: a tick reads
the row and replaces it only if nobody wrote it meanwhile, or creates it if absent; a tick that loses
that race leaves the other tick's (equally recent) time in place. Recording never raises: liveness
must not fail a tick.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import (
    AzureError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)

from workflow_core import clock
from workflow_core.ledger.families import LIVENESS_PARTITION as PARTITION

log = logging.getLogger("sas.liveness")

WATCHDOG = "watchdog"


@dataclass(frozen=True)
class Tick:
    at: datetime
    ticks: int
    overdue: int
    errors: int

    def age_seconds(self, now: datetime | None = None) -> float:
        return ((now or clock.utcnow()) - self.at).total_seconds()


@dataclass(frozen=True)
class Liveness:
    """The liveness row in one ledger table (``Services.liveness``)."""

    table: Any

    def record_tick(self, *, now: datetime | None = None, overdue: int = 0, errors: int = 0) -> bool:
        """Record one watchdog tick; False if it could not."""
        now = now or clock.utcnow()
        row = {"PartitionKey": PARTITION, "RowKey": WATCHDOG, "At": now, "Overdue": overdue, "Errors": errors}
        try:
            try:
                current = self.table.get_entity(PARTITION, WATCHDOG)
            except ResourceNotFoundError:
                self.table.create_entity({**row, "Ticks": 1})
                return True
            self.table.update_entity(
                {**row, "Ticks": int(current.get("Ticks") or 0) + 1},
                etag=current.metadata["etag"],
                match_condition=MatchConditions.IfNotModified,
                mode="replace",
            )
            return True
        except (ResourceExistsError, ResourceModifiedError):
            return False  # another tick wrote it at the same moment: its time is as recent as ours
        except AzureError:
            log.warning("could not record the watchdog's tick", exc_info=True)
            return False

    def last_tick(self) -> Tick | None:
        """The last recorded tick, or None if the watchdog never recorded one."""
        try:
            row = self.table.get_entity(PARTITION, WATCHDOG)
        except ResourceNotFoundError:
            return None
        at = row["At"]
        if isinstance(at, str):
            at = datetime.fromisoformat(at.replace("Z", "+00:00"))
        counts = {k: int(row.get(k.title()) or 0) for k in ("ticks", "overdue", "errors")}
        return Tick(at=at, **counts)
