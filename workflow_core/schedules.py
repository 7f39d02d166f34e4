"""NCRONTAB schedules (six fields: second minute hour day month weekday), read by the maintenance
timer: is a feature due in this tick's window, and what is a schedule's period.

Each field is ``*``, ``*/n``, ``a``, ``a-b``, ``a-b/n`` or a comma list of those (weekday 0-6, Sunday
0; no names): the forms the app's settings use. A schedule's period is defined when it repeats every
day at even gaps (``0 0 * * * *``: 3600 s); the canary rotates its scenarios by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from itertools import pairwise, product

# (lowest, highest) of second, minute, hour, day, month, weekday
_RANGES = ((0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
DAY = 86_400


def _field(text: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        span, _, step = item.partition("/")
        if span == "*":
            first, last = low, high
        else:
            first_text, _, last_text = span.partition("-")
            first = int(first_text)
            last = int(last_text) if last_text else (high if step else first)
        every = int(step) if step else 1
        if not (low <= first <= last <= high) or every < 1:
            raise ValueError(f"{item!r} is outside {low}-{high}")
        values.update(range(first, last + 1, every))
    return frozenset(values)


@dataclass(frozen=True)
class Schedule:
    text: str
    fields: tuple[frozenset[int], ...]

    @classmethod
    def parse(cls, text: str) -> Schedule:
        """Raise ValueError (one line) unless ``text`` is a six-field NCRONTAB of the forms above."""
        parts = text.split()
        if len(parts) != 6:
            raise ValueError(f"{text!r} is not a six-field NCRONTAB (second minute hour day month weekday)")
        try:
            fields = tuple(_field(p, low, high) for p, (low, high) in zip(parts, _RANGES, strict=True))
        except ValueError as exc:
            raise ValueError(
                f"{text!r}: {exc}".replace("invalid literal for int() with base 10: ", "")
            ) from None
        return cls(text, fields)

    def matches(self, at: datetime) -> bool:
        weekday = (at.weekday() + 1) % 7  # NCRONTAB: Sunday is 0
        values = (at.second, at.minute, at.hour, at.day, at.month, weekday)
        return all(value in field for value, field in zip(values, self.fields, strict=True))

    def due(self, start: datetime, end: datetime) -> bool:
        """Does an occurrence fall in ``(start, end]`` (whole seconds)?"""
        at = end.replace(microsecond=0)
        while at > start:
            if self.matches(at):
                return True
            at -= timedelta(seconds=1)
        return False

    def period(self) -> timedelta:
        """The even gap between occurrences of a schedule that repeats every day; ValueError otherwise."""
        if any(
            field != frozenset(range(low, high + 1))
            for field, (low, high) in zip(self.fields[3:], _RANGES[3:], strict=True)
        ):
            raise ValueError(f"{self.text!r} does not repeat every day (day, month and weekday must be *)")
        second, minute, hour = self.fields[:3]
        times = sorted(h * 3600 + m * 60 + s for h, m, s in product(hour, minute, second))
        gaps = {b - a for a, b in zip(times, [*times[1:], times[0] + DAY], strict=True)}
        if len(gaps) != 1:
            raise ValueError(f"{self.text!r} does not repeat at even gaps ({min(gaps)} s and {max(gaps)} s)")
        return timedelta(seconds=gaps.pop())

    def longest_gap(self) -> timedelta:
        """The longest gap between two occurrences, over two years from a leap year's first day (every
        day of month and week occurs); ValueError when it fires at most once in that span. Computed
        from the firing days and the times of a day, never by listing every occurrence (a schedule
        every 5 s fires 12.6 million times in two years)."""
        second, minute, hour, days, months, weekdays = self.fields
        times = sorted(h * 3600 + m * 60 + s for h, m, s in product(hour, minute, second))
        start = date(2024, 1, 1)
        firing = [
            n
            for n in range(2 * 366)
            if (d := start + timedelta(days=n)).day in days
            and d.month in months
            and d.isoweekday() % 7 in weekdays
        ]
        within_a_day = [b - a for a, b in pairwise(times)] if firing else []
        across_days = [(b - a) * DAY + times[0] - times[-1] for a, b in pairwise(firing)]
        gaps = within_a_day + across_days
        if not gaps:
            raise ValueError(f"{self.text!r} fires at most once in two years")
        return timedelta(seconds=max(gaps))
