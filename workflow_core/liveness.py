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


def record_tick(table: Any, *, now: datetime | None = None, overdue: int = 0, errors: int = 0) -> bool:
    """Record one watchdog tick in ``table`` (the ledger's TableClient); False if it could not."""
    now = now or clock.utcnow()
    try:
        try:
            current = table.get_entity(PARTITION, WATCHDOG)
        except ResourceNotFoundError:
            row = {"PartitionKey": PARTITION, "RowKey": WATCHDOG, "At": now, "Ticks": 1}
            table.create_entity({**row, "Overdue": overdue, "Errors": errors})
            return True
        row = {
            "PartitionKey": PARTITION,
            "RowKey": WATCHDOG,
            "At": now,
            "Ticks": int(current.get("Ticks") or 0) + 1,
            "Overdue": overdue,
            "Errors": errors,
        }
        table.update_entity(
            row, etag=current.metadata["etag"], match_condition=MatchConditions.IfNotModified, mode="replace"
        )
        return True
    except (ResourceExistsError, ResourceModifiedError):
        return False  # another tick wrote it at the same moment: its time is as recent as ours
    except AzureError:
        log.warning("could not record the watchdog's tick", exc_info=True)
        return False


def last_tick(table: Any) -> Tick | None:
    """The last recorded tick, or None if the watchdog never recorded one."""
    try:
        row = table.get_entity(PARTITION, WATCHDOG)
    except ResourceNotFoundError:
        return None
    at = row["At"]
    if isinstance(at, str):
        at = datetime.fromisoformat(at.replace("Z", "+00:00"))
    return Tick(
        at=at,
        ticks=int(row.get("Ticks") or 0),
        overdue=int(row.get("Overdue") or 0),
        errors=int(row.get("Errors") or 0),
    )


@dataclass(frozen=True)
class Liveness:
    """The liveness row in one ledger table (``Services.liveness``)."""

    table: Any

    def record_tick(self, **kwargs: Any) -> bool:
        return record_tick(self.table, **kwargs)

    def last_tick(self) -> Tick | None:
        return last_tick(self.table)
