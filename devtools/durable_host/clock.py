"""Clocks for the durable test host: a virtual clock that the host moves forward, and the wall clock."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

#: Where a :class:`VirtualClock` starts unless told otherwise: fixed, for reproducible timelines.
DEFAULT_EPOCH = datetime(2025, 1, 1, tzinfo=UTC)


def _aware(when: datetime) -> datetime:
    if when.tzinfo is None:
        raise ValueError(f"naive datetime {when!r}: the durable host only deals in timezone-aware UTC")
    return when.astimezone(UTC)


class VirtualClock:
    """A timezone-aware UTC clock that only moves when told to (the host skips it to timers)."""

    is_virtual = True

    def __init__(self, start: datetime | None = None) -> None:
        self._now = _aware(start) if start is not None else DEFAULT_EPOCH
        self.start = self._now
        self._lock = threading.Lock()

    def _flow(self) -> None:
        """Called under the lock before every read or move: a virtual clock stands still."""

    def now(self) -> datetime:
        with self._lock:
            self._flow()
            return self._now

    def advance(self, delta: timedelta) -> datetime:
        if delta < timedelta(0):
            raise ValueError("a clock does not run backwards")
        with self._lock:
            self._flow()
            self._now = self._now + delta
            return self._now

    def advance_to(self, when: datetime) -> datetime:
        """Move to ``when``; a time already passed leaves the clock where it is."""
        when = _aware(when)
        with self._lock:
            self._flow()
            if when > self._now:
                self._now = when
            return self._now


class FlowingClock(VirtualClock):
    """A virtual clock that also moves with the wall clock between skips, so history timestamps
    progress as in Azure; not reproducible, so for recording (docs/durable-test-host.md, "Time")."""

    def __init__(self, start: datetime | None = None) -> None:
        super().__init__(start)
        self._since = time.monotonic()

    def _flow(self) -> None:
        now = time.monotonic()
        self._now += timedelta(seconds=now - self._since)
        self._since = now


class RealClock:
    """The wall clock (UTC). Timers fire when the wall clock reaches them; nothing is skipped."""

    is_virtual = False

    def __init__(self) -> None:
        self.start = datetime.now(UTC)

    def now(self) -> datetime:
        return datetime.now(UTC)
