"""Per-pool staleness of the recovery canary, as a metric an alert can split by pool.

A pool whose canary runs never start, or are never judged, leaves no ``sas.canary.runs`` row: the
failed-verdict alert cannot see it, and the "no pass for two periods" alert stays quiet as long as
any other pool passes. So each canary tick counts every canary pool that is ``stale`` in
:func:`supervisor.canary.latest_verdicts` (no pass within two periods, including a pool with no
verdict at all once the canary has run for two periods) in ``sas.canary.stale_pools``, dimension
``pool``; ``infra/modules/canary-alerts.bicep``'s ``canaryPoolStaleAlert`` fires per pool on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from opentelemetry import metrics

from supervisor.canary import latest_verdicts
from workflow_core import telemetry_instruments

STALE_METRIC = "sas.canary.stale_pools"


def _counter() -> Any:
    provider = telemetry_instruments._meter_provider or metrics.get_meter_provider()
    meter = provider.get_meter(telemetry_instruments.INSTRUMENTATION_NAME)
    return meter.create_counter(
        STALE_METRIC, unit="{pool}", description="Canary pools with no pass within two periods, per tick"
    )


def report_stale_pools(
    ledger: Any, pools: Sequence[str], *, now: datetime, period: timedelta
) -> dict[str, str | None]:
    """Count each stale canary pool once in :data:`STALE_METRIC`; ``{pool: last passed at}`` of those."""
    summary = latest_verdicts(ledger, now=now, period=period, pools=pools)
    stale = {
        name: state["last_passed_at"]
        for name, state in summary["pools"].items()
        if name in pools and state["state"] == "stale"
    }
    counter = _counter()
    for name in stale:
        counter.add(1, {"pool": name})
    return stale
