"""The timers' liveness rows in the step ledger: when each last ticked and on which NCRONTAB schedule,
so ``sas doctor`` judges every timer that ever ticked against its own period.

One row per timer (row key: its name), in partition :data:`PARTITION` (instance ids cannot start with
``~``, so no instance shares it). Every write is ETag-guarded: a tick that loses the race leaves the
other's equally recent time. Recording never raises: liveness must not fail a tick.
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
        return self.last_ticks().get(timer)

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
