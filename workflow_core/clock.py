"""The one source of "now" outside orchestrators.

Orchestrators must use ``context.current_utc_datetime``; everything else (activities, agents, the
watchdog) asks this module, so the durable test host can run the whole pattern on a virtual clock.

``utcnow()`` is *this process's* clock, as good or as bad as its machine's. Where a wrong clock would
move a deadline (heartbeats), the ledger does not use it: it takes the storage service's time
(``StepLedger.trusted_now``, see docs/supervisor.md, "Clocks"). Under a virtual clock (``use_clock`` /
``set_clock``: the tests, the durable test host, the demo) the virtual clock *is* the trusted clock.

``WORKFLOW_CLOCK_OFFSET_SECONDS`` (read when this module is imported; tests only) shifts this
process's wall clock by that many seconds, so a test can run an agent whose machine clock is wrong
in a separate OS process.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

OFFSET_ENV = "WORKFLOW_CLOCK_OFFSET_SECONDS"

# How far a deadline computed from the trusted clock may sit from the time the watchdog compares it
# with: the storage service's Date header has whole seconds (up to 1 s early), plus the request's
# latency and the NTP skew between the watchdog's host and the storage service (well under 1 s on
# Azure). WATCHDOG_GRACE_SECONDS must be at least this (docs/supervisor.md, "Clocks").
SKEW_BOUND_SECONDS = 2.0


def _offset_from_env() -> timedelta:
    raw = os.environ.get(OFFSET_ENV, "").strip()
    if not raw:
        return timedelta(0)
    try:
        return timedelta(seconds=float(raw))
    except ValueError:
        raise ValueError(f"{OFFSET_ENV} must be a number of seconds, got {raw!r}") from None


_OFFSET = _offset_from_env()


def _wall() -> datetime:
    return datetime.now(UTC) + _OFFSET


_now: Callable[[], datetime] = _wall


def utcnow() -> datetime:
    return _now()


def is_virtual() -> bool:
    """Is a clock other than this process's wall clock installed (a test's or the durable host's)?"""
    return _now is not _wall


def process_offset() -> timedelta:
    """The ``WORKFLOW_CLOCK_OFFSET_SECONDS`` skew of this process's wall clock (zero in production)."""
    return _OFFSET


@contextmanager
def use_clock(now: Callable[[], datetime]) -> Iterator[None]:
    """Swap the clock for the duration of a block (tests, the demo)."""
    global _now
    previous = _now
    _now = now
    try:
        yield
    finally:
        _now = previous


def set_clock(now: Callable[[], datetime] | None) -> None:
    """Install a clock for the process (``None`` restores the wall clock)."""
    global _now
    _now = now if now is not None else _wall
