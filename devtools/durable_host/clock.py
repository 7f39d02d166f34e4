"""Clocks for the durable test host: a virtual clock that the host moves forward, and the wall clock."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

#: Where a :class:`VirtualClock` starts unless told otherwise: fixed, so timelines and timestamps in
#: tests are reproducible.
DEFAULT_EPOCH = datetime(2025, 1, 1, tzinfo=UTC)


def _aware(when: datetime) -> datetime:
    if when.tzinfo is None:
        raise ValueError(f"naive datetime {when!r}: the durable host only deals in timezone-aware UTC")
    return when.astimezone(UTC)


class VirtualClock:
    """A timezone-aware UTC clock that only moves when told to.

    The host advances it to the earliest pending durable timer when nothing else can run, so a
    workflow that waits ten minutes three times finishes in milliseconds of real time.
    """

    is_virtual = True

    def __init__(self, start: datetime | None = None) -> None:
        self._now = _aware(start) if start is not None else DEFAULT_EPOCH
        self._start = self._now
        self._lock = threading.Lock()

    @property
    def start(self) -> datetime:
        return self._start

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> datetime:
        if delta < timedelta(0):
            raise ValueError("a clock does not run backwards")
        with self._lock:
            self._now = self._now + delta
            return self._now

    def advance_to(self, when: datetime) -> datetime:
        """Move to ``when``; a time already passed leaves the clock where it is."""
        when = _aware(when)
        with self._lock:
            if when > self._now:
                self._now = when
            return self._now

    def __repr__(self) -> str:
        return f"VirtualClock({self.now().isoformat()})"


class RealClock:
    """The wall clock (UTC). Timers fire when the wall clock reaches them; nothing is skipped."""

    is_virtual = False

    def __init__(self) -> None:
        self._start = datetime.now(UTC)

    @property
    def start(self) -> datetime:
        return self._start

    def now(self) -> datetime:
        return datetime.now(UTC)

    def advance(self, delta: timedelta) -> datetime:
        raise RuntimeError("the real clock cannot be advanced: use a VirtualClock to skip time")

    def advance_to(self, when: datetime) -> datetime:
        raise RuntimeError("the real clock cannot be advanced: use a VirtualClock to skip time")

    def __repr__(self) -> str:
        return "RealClock()"
