"""What the observable gauges ``sas.work.in_flight`` and ``sas.instance.overdue`` read (what each
counts: docs/operations.md). A callback runs at every export on the exporter's thread, so it never
scans the ledger; the ledger is resolved at the first reading, so start-up needs no storage.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from workflow_core import telemetry_instruments

IN_FLIGHT_CAP = 5000  # index rows counted at most

_lock = threading.Lock()
_overdue: tuple[float, dict[str, int]] | None = None  # (monotonic time of the tick, counts per workflow)


def note_overdue_instances(per_workflow: Mapping[str, int], *, at: float | None = None) -> None:
    global _overdue
    with _lock:
        _overdue = (time.monotonic() if at is None else at, dict(per_workflow))


class LedgerGauges:
    """The two callbacks, over a ledger resolved lazily by ``ledger_source`` (None: none yet)."""

    def __init__(
        self,
        ledger_source: Callable[[], Any],
        *,
        ttl_seconds: float = 60.0,  # how long a count of in-flight work is reused
        stale_after_seconds: float = 600.0,  # an overdue count older than this is no reading
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ledger_source = ledger_source
        self._ttl = ttl_seconds
        self._stale_after = stale_after_seconds
        self._monotonic = monotonic
        self._in_flight: tuple[float, int] | None = None
        self._lock = threading.Lock()

    def in_flight(self) -> int | dict[str, int]:
        """{} (no reading) while there is no ledger to read (no storage configured yet)."""
        with self._lock:
            now = self._monotonic()
            if self._in_flight is None or now - self._in_flight[0] >= self._ttl:
                ledger = self._ledger_source()
                if ledger is None:
                    return {}
                self._in_flight = (now, ledger.count_in_flight(IN_FLIGHT_CAP))
            return self._in_flight[1]

    def overdue(self) -> int | dict[str, int]:
        """{} (no reading) when no tick ran here lately; 0 when the last tick found none."""
        with _lock:
            reading = _overdue
        if reading is None or self._monotonic() - reading[0] > self._stale_after:
            return {}
        return reading[1] or 0


def register(ledger_source: Callable[[], Any] | None = None) -> LedgerGauges:
    """Feed the gauges; ``ledger_source`` defaults to the app's services' ledger."""
    if ledger_source is None:

        def ledger_source() -> Any:
            from workflow_core.runtime import get_services
            from workflow_core.settings import SettingsError

            try:
                return get_services().ledger
            except SettingsError:  # not configured (yet): nothing to observe, not an error
                return None

    gauges = LedgerGauges(ledger_source)
    telemetry_instruments.register_ledger_gauges(in_flight=gauges.in_flight, overdue=gauges.overdue)
    return gauges
