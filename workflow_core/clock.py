"""The one source of "now" outside orchestrators, so the durable test host can run the whole pattern
on a virtual clock. It is *this process's* clock: where a wrong one would move a deadline, the ledger
takes the storage service's time instead (docs/supervisor.md, "Clocks").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

OFFSET_ENV = "WORKFLOW_CLOCK_OFFSET_SECONDS"  # tests only: an agent whose machine clock is wrong

# How far the trusted clock may sit from the watchdog's: the service's Date header has whole seconds,
# plus latency and NTP skew. WATCHDOG_GRACE_SECONDS must be at least this (docs/supervisor.md).
SKEW_BOUND_SECONDS = 2.0


def _offset_from_env() -> timedelta:
    raw = os.environ.get(OFFSET_ENV, "").strip()
    try:
        return timedelta(seconds=float(raw or 0))
    except ValueError:
        raise ValueError(f"{OFFSET_ENV} must be a number of seconds, got {raw!r}") from None


_OFFSET = _offset_from_env()


def _wall() -> datetime:
    return datetime.now(UTC) + _OFFSET


_now: Callable[[], datetime] = _wall


def utcnow() -> datetime:
    return _now()


def is_virtual() -> bool:
    return _now is not _wall


@contextmanager
def use_clock(now: Callable[[], datetime]) -> Iterator[None]:
    global _now
    previous = _now
    _now = now
    try:
        yield
    finally:
        _now = previous
