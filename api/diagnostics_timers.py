"""The timers' rows of ``GET /api/diagnostics``: does every timer still tick on its schedule?

Each timer records its ticks in a liveness row with its NCRONTAB schedule (``workflow_core/liveness.py``);
a timer is late when its last tick is older than two of its periods plus a cold start's margin. The
watchdog's period comes from ``WATCHDOG_SCHEDULE`` (the setting its trigger reads), and a watchdog that
never ticked fails; every other timer is judged on the schedule it recorded, so the rows follow the
timers the app has. A schedule's period is the longest gap between two consecutive firings.
"""

from __future__ import annotations

import itertools
from datetime import date, timedelta
from typing import Any

from api.diagnostics_sections import Row, row
from workflow_core import liveness

COLD_START_MARGIN = timedelta(seconds=120)
_DAY = 86_400
_RANGES = ((0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 6))  # second, minute, hour, day, month, weekday


def _values(spec: str, low: int, high: int) -> set[int]:
    """One NCRONTAB field (``*``, ``n``, ``a-b``, ``*/n``, ``a-b/n``, lists of them) as its values."""
    values: set[int] = set()
    for part in spec.split(","):
        body, _, step = part.partition("/")
        if body == "*":
            start, end = low, high
        elif "-" in body:
            first, last = body.split("-", 1)
            start, end = int(first), int(last)
        else:
            start = int(body)
            end = high if step else start
        values.update(range(start, end + 1, int(step) if step else 1))
    if not values or min(values) < low or max(values) > high:
        raise ValueError(spec)
    return values


def schedule_period(schedule: str) -> timedelta | None:
    """The longest gap between two firings of a six-field NCRONTAB schedule (seconds first), or None
    when it is not one this reads (names of days or months, a TimeSpan)."""
    fields = schedule.split()
    if len(fields) != 6:
        return None
    try:
        seconds, minutes, hours, days, months, weekdays = (
            _values(spec, low, high) for spec, (low, high) in zip(fields, _RANGES, strict=True)
        )
    except ValueError:
        return None
    times = sorted(h * 3600 + m * 60 + s for h in hours for m in minutes for s in seconds)
    start = date(2024, 1, 1)  # a leap year, and the next: every day of month and week occurs
    firing_days = [
        n
        for n in range(2 * 366)
        if (d := start + timedelta(days=n)).day in days
        and d.month in months
        and (d.isoweekday() % 7) in weekdays
    ]
    if not firing_days:
        return None
    instants = [day * _DAY + t for day in firing_days for t in times]
    gaps = [later - earlier for earlier, later in itertools.pairwise(instants)]
    return timedelta(seconds=max(gaps) if gaps else 2 * 366 * _DAY)


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
    ticks = liveness.last_ticks(table_client(s.ledger_connection, s.ledger_table))
    rows = [_timer_row("watchdog", ticks.pop(liveness.WATCHDOG, None), s.watchdog_schedule)]
    return rows + [_timer_row(name, tick, tick.schedule) for name, tick in sorted(ticks.items())]
