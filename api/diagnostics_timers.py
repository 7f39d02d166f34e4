"""The timers' rows of ``GET /api/diagnostics``: does every timer still tick on its schedule?

Each timer records its ticks in a liveness row with its NCRONTAB schedule (``workflow_core/liveness.py``);
a timer is late when its last tick is older than two of its periods plus a cold start's margin. The
watchdog's period comes from ``WATCHDOG_SCHEDULE`` (the setting its trigger reads), and a watchdog that
never ticked fails; every other timer is judged on the schedule it recorded, so the rows follow the
timers the app has. In Azure (``WEBSITE_SITE_NAME``) a maintenance timer that never ticked fails too:
``function_app.py`` registers it unconditionally (a local host may run the watchdog alone). A
schedule's period is the longest gap between two consecutive firings (``workflow_core/schedules.py``).
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from api.diagnostics_sections import Row, row
from workflow_core import liveness
from workflow_core.schedules import Schedule

COLD_START_MARGIN = timedelta(seconds=120)


def schedule_period(schedule: str) -> timedelta | None:
    """The longest gap between two firings of a six-field NCRONTAB schedule (seconds first), or None
    when it is not one this reads (names of days or months, a TimeSpan)."""
    try:
        return Schedule.parse(schedule).longest_gap()
    except ValueError:
        return None


def _timer_row(name: str, tick: liveness.Tick | None, schedule: str | None) -> Row:
    check = f"{name} last tick"
    where = (
        f"check that the {name} timer runs (its schedule setting; the function is not disabled), the "
        "app's state and its logs"
    )
    if tick is None:
        return row(check, False, f"the {name} timer has never recorded a tick", where)
    period = schedule_period(schedule or "")
    age = tick.age_seconds()
    seen = f"{name} last ran {int(age)} s ago ({tick.ticks} ticks recorded, {tick.errors} errors last)"
    if period is None:
        return row(check, None, f"{seen}; schedule {schedule!r} not read here, so not judged")
    limit = 2 * period + COLD_START_MARGIN
    return row(
        check,
        age <= limit.total_seconds(),
        f"{seen}; schedule {schedule} fires at least every {int(period.total_seconds())} s",
        f"it has not ticked for over {int(limit.total_seconds())} s (two periods and a cold start): {where}",
    )


def timers(services: Any) -> list[Row]:
    """A row per timer that records liveness; the watchdog's always, on ``WATCHDOG_SCHEDULE``."""
    from workflow_core.storage_clients import table_client

    s = services.settings
    ticks = liveness.Liveness(table_client(s.ledger_connection, s.ledger_table)).last_ticks()
    rows = [_timer_row("watchdog", ticks.pop(liveness.WATCHDOG, None), s.watchdog_schedule)]
    if os.environ.get("WEBSITE_SITE_NAME"):
        from supervisor.maintenance import TIMER

        ticks.setdefault(TIMER, None)
    return rows + [_timer_row(name, tick, tick and tick.schedule) for name, tick in sorted(ticks.items())]
