"""Doctor's timer rows (api/diagnostics.py) against Azurite: every timer that records liveness is
judged on its own schedule, the watchdog on WATCHDOG_SCHEDULE."""

from __future__ import annotations

from datetime import timedelta

import pytest

from api import diagnostics
from api.diagnostics import schedule_period
from tests.api.test_diagnostics import _clean_env, _failed, _rows  # noqa: F401 - the autouse fixture
from workflow_core import clock, liveness
from workflow_core.runtime import Services
from workflow_core.settings import load_settings

FIVE_MINUTES = "0 */5 * * * *"  # the dev schedule docs/deploy.md suggests


@pytest.mark.parametrize(
    ("schedule", "period"),
    [
        ("*/30 * * * * *", timedelta(seconds=30)),
        (FIVE_MINUTES, timedelta(minutes=5)),
        ("0 0 * * * *", timedelta(hours=1)),
        ("0 30 2 * * *", timedelta(days=1)),
        ("0 0 3 * * 0", timedelta(days=7)),
        ("0 0 9-17 * * 1-5", timedelta(hours=64)),  # Friday 17:00 to Monday 09:00
        ("5 4 * * *", None),  # five fields: not the timer trigger's NCRONTAB
        ("0 0 25 * * *", None),
    ],
)
def test_a_schedules_period_is_its_longest_gap(schedule, period):
    assert schedule_period(schedule) == period


def test_the_watchdog_row_follows_watchdog_schedule(services, app_env):
    """Seven minutes without a tick is a stopped watchdog on the 30-second schedule, and normal on the
    documented five-minute one (two periods and a cold start: 12 minutes)."""
    services.liveness.record_tick(now=clock.utcnow() - timedelta(minutes=7))
    assert "watchdog last tick" in _failed(diagnostics.collect(services))

    slow = Services(load_settings({**app_env, "WATCHDOG_SCHEDULE": FIVE_MINUTES}))
    assert _failed(diagnostics.collect(slow)) == {}
    slow.liveness.record_tick(now=clock.utcnow() - timedelta(minutes=13))
    failed = _failed(diagnostics.collect(slow))
    assert set(failed) == {"watchdog last tick"} and "every 300 s" in failed["watchdog last tick"]["detail"]


def test_every_timer_that_records_liveness_is_judged_on_its_own_schedule(services):
    table = services.ledger.table_client()
    liveness.Liveness(table).record_tick()
    liveness.Liveness(table).record_tick(timer="maintenance", schedule=FIVE_MINUTES)
    rows = _rows(diagnostics.collect(services))
    assert rows["maintenance last tick"]["ok"] is True

    liveness.Liveness(table).record_tick(
        timer="maintenance", schedule=FIVE_MINUTES, now=clock.utcnow() - timedelta(minutes=20)
    )
    failed = _failed(diagnostics.collect(services))
    assert set(failed) == {"maintenance last tick"}
    assert "maintenance last ran 120" in failed["maintenance last tick"]["detail"]


def test_in_azure_a_maintenance_timer_that_never_ticked_fails(services, monkeypatch):
    """function_app.py registers the maintenance timer unconditionally: deployed, its absence is a
    stopped timer (locally a host may run the watchdog alone, so there it has no row until it ticks)."""
    services.liveness.record_tick()
    assert "maintenance last tick" not in _rows(diagnostics.collect(services))
    monkeypatch.setenv("WEBSITE_SITE_NAME", "func-sas")
    row = {r["check"]: r for r in diagnostics.timers(services)}["maintenance last tick"]
    assert row["ok"] is False and row["detail"] == "the maintenance timer has never recorded a tick"
