"""The timers' liveness rows in the step ledger: when each last ticked, on which schedule, so ``sas doctor``
can say whether it still runs.

One row per timer (row key: the timer's name, :data:`WATCHDOG` for the watchdog), partition
:data:`PARTITION` (never an instance id: instance ids are validated and cannot start with ``~``),
beside the stored definition versions. A timer records its NCRONTAB schedule with each tick, so doctor
judges every timer that ever ticked against its own period, whatever timers the app has. Every write
is ETag-guarded: a tick reads the row and replaces it only if nobody wrote it meanwhile, or creates it
if absent; a tick that loses that race leaves the other tick's (equally recent) time in place.
Recording never raises: liveness must not fail a tick.
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
    timer: str = WATCHDOG
    schedule: str | None = None  # NCRONTAB, as the timer trigger reads it

    def age_seconds(self, now: datetime | None = None) -> float:
        return ((now or clock.utcnow()) - self.at).total_seconds()


@dataclass(frozen=True)
class Liveness:
    """The timers' liveness rows in one ledger table (``Services.liveness``): one row a timer."""

    table: Any

    def record_tick(
        self,
        *,
        now: datetime | None = None,
        overdue: int = 0,
        errors: int = 0,
        timer: str = WATCHDOG,
        schedule: str | None = None,
    ) -> bool:
        """Record one tick of ``timer`` (on ``schedule``); False if it could not."""
        now = now or clock.utcnow()
        extra = {"Overdue": overdue, "Errors": errors, **({"Schedule": schedule} if schedule else {})}
        row = {"PartitionKey": PARTITION, "RowKey": timer, "At": now, **extra}
        try:
            try:
                current = self.table.get_entity(PARTITION, timer)
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
            log.warning("could not record the %s timer's tick", timer, exc_info=True)
            return False

    def last_tick(self, timer: str = WATCHDOG) -> Tick | None:
        """The last recorded tick of ``timer``, or None if it never recorded one."""
        try:
            return _tick(self.table.get_entity(PARTITION, timer))
        except ResourceNotFoundError:
            return None

    def last_ticks(self) -> dict[str, Tick]:
        """Every timer's last recorded tick, by timer name."""
        rows = self.table.query_entities("PartitionKey eq @pk", parameters={"pk": PARTITION})
        return {tick.timer: tick for tick in map(_tick, rows)}


def _tick(row: Any) -> Tick:
    at = row["At"]
    if isinstance(at, str):
        at = datetime.fromisoformat(at.replace("Z", "+00:00"))
    return Tick(
        at=at,
        ticks=int(row.get("Ticks") or 0),
        overdue=int(row.get("Overdue") or 0),
        errors=int(row.get("Errors") or 0),
        timer=str(row["RowKey"]),
        schedule=row.get("Schedule") or None,
    )
