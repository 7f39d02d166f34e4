"""The one source of "now" outside orchestrators.

Orchestrators must use ``context.current_utc_datetime``; everything else (activities, agents, the
watchdog) asks this module, so the durable test host can run the whole pattern on a virtual clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

_now: Callable[[], datetime] = lambda: datetime.now(UTC)  # noqa: E731


def utcnow() -> datetime:
    return _now()


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
    _now = now if now is not None else (lambda: datetime.now(UTC))
