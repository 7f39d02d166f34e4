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
from typing import Any

from workflow_core import telemetry_instruments


def report_stale_pools(summary: dict[str, Any], pools: Sequence[str]) -> dict[str, str | None]:
    """Count each stale canary pool of ``summary`` (:func:`supervisor.canary.latest_verdicts`) once in
    ``sas.canary.stale_pools``; ``{pool: last passed at}`` of those."""
    stale = {
        name: state["last_passed_at"]
        for name, state in summary["pools"].items()
        if name in pools and state["state"] == "stale"
    }
    counter = telemetry_instruments.current().canary_stale_pools
    for name in stale:
        counter.add(1, {"pool": name})
    return stale
