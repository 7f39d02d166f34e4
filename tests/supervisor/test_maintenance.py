"""The maintenance timer's features against the durable test host: retention purges the ledger rows and
the Durable history of an instance finished long ago; bulk operations carry a recorded operation on,
ending the orchestration of each instance it stops; each feature acts when its schedule is due, and a
bad setting turns off its feature alone."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from devtools.durable_host import DurableTestHost
from supervisor.maintenance import bulk, bulk_tick, due_features, maintenance_tick, retention_tick
from tests.durable_host.test_client_and_app import approval
from tests.helpers.rows import IS, NOW, make_instance
from workflow_core import clock
from workflow_core.settings import bulk_settings, retention_settings


@pytest.fixture
def host():
    with DurableTestHost(orchestrators={"approval": approval}) as h:
        yield h


def test_retention_tick_purges_ledger_and_durable_history(services, host):
    ledger = services.ledger
    host.start_new("approval", "m-old")
    host.run_until_idle()
    host.raise_event("m-old", "approved", "x")
    host.run_until_complete("m-old")
    with clock.use_clock(lambda: NOW):
        make_instance(ledger, "m-old", IS.SUCCEEDED)
        make_instance(ledger, "m-no-history", IS.SUCCEEDED)
    with clock.use_clock(lambda: NOW + timedelta(days=10)):
        make_instance(ledger, "m-recent", IS.SUCCEEDED)
    ops = replace(retention_settings({}), days=30)
    report = host.run_async(retention_tick(services, host.client, ops, NOW + timedelta(days=31)))
    assert sorted(report.purged) == ["m-no-history", "m-old"], report
    assert ledger.find_instance("m-old") is None and "m-old" not in host.instance_ids()
    assert ledger.find_instance("m-recent").status is IS.SUCCEEDED


def test_bulk_tick_carries_a_recorded_stop_on_and_ends_the_orchestration(services, host):
    ledger = services.ledger
    host.start_new("approval", "m-live")
    host.run_until_idle()
    make_instance(ledger, "m-live", IS.RUNNING)
    store = bulk.BulkStore(ledger)
    op = store.create("stop", bulk.BulkFilter(status="Running"), reason="outage", actor="operator:bo")
    carried = host.run_async(bulk_tick(services, host.client, bulk_settings({})))
    assert carried == [op.bulk_id]
    assert ledger.find_instance("m-live").status is IS.STOPPED
    assert host.run_async(host.client.get_status("m-live")).runtime_status.name == "Terminated"
    assert store.get(op.bulk_id).done and store.unfinished() == []


def test_retention_tick_also_deletes_old_finished_bulk_operations(services, host):
    store = bulk.BulkStore(services.ledger)
    done = store.create("stop", bulk.BulkFilter(status="Running"), reason="outage", actor="operator:bo")
    store.rows.freeze(done.bulk_id, ["m-x"])
    done.done = True
    store.save(done)
    live = store.create("stop", bulk.BulkFilter(status="Running"), reason="outage", actor="operator:bo")
    ops = replace(retention_settings({}), days=30)
    # Azurite stamps rows with the real time; NOW (2030) is more than 30 days after it
    host.run_async(retention_tick(services, host.client, ops, NOW))
    assert store.get(done.bulk_id) is None and store.rows.instance_rows(done.bulk_id) == []
    assert store.get(live.bulk_id) is not None


TICK_AT_NOON = datetime(2030, 1, 1, 12, 0, 0, 400_000, tzinfo=UTC)  # the tick of 12:00:00, a little late


def test_each_feature_is_due_when_its_schedule_falls_in_the_tick():
    due, errors = due_features(TICK_AT_NOON, {})
    assert set(due) == {"canary", "bulk"} and errors == {}  # hourly at :00, every 30 s
    assert set(due_features(TICK_AT_NOON.replace(minute=17), {})[0]) == {"retention", "bulk"}  # at :17
    assert set(due_features(TICK_AT_NOON.replace(minute=17, second=31), {})[0]) == {"bulk"}
    assert set(due_features(TICK_AT_NOON, {"BULK_SCHEDULE": "0 */5 * * * *"})[0]) == {"canary", "bulk"}
    assert set(due_features(TICK_AT_NOON.replace(minute=1), {"BULK_SCHEDULE": "0 */5 * * * *"})[0]) == set()


def test_a_bad_setting_turns_off_its_feature_alone_with_an_error_naming_it():
    env = {"RETENTION_DAYS": "thirty", "CANARY_SCHEDULE": "0 0 9 * * 1"}
    due, errors = due_features(TICK_AT_NOON, env)
    assert set(due) == {"bulk"}
    assert errors["retention"] == "RETENTION_DAYS must be an integer, got 'thirty'"
    assert errors["canary"].startswith("CANARY_SCHEDULE: '0 0 9 * * 1' does not repeat every day")


def test_a_tick_runs_every_due_feature_side_by_side_and_a_bad_one_stops_no_other(services, host, monkeypatch):
    monkeypatch.setenv("RETENTION_DAYS", "-1")
    done = host.run_async(maintenance_tick(services, host.client, now=TICK_AT_NOON.replace(minute=17)))
    assert set(done) == {"bulk"} and done["bulk"] == []  # retention is off; bulk had nothing to carry
    done = host.run_async(maintenance_tick(services, host.client, now=TICK_AT_NOON))
    assert set(done) == {"canary", "bulk"} and done["canary"]["started"] == {}  # the canary is off here


def test_a_bad_feature_setting_at_start_is_one_logged_line_and_every_function_stays():
    """Read at start (function_app.py): the app registers all its functions, the bad feature is named."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import function_app; print(sorted(f.get_function_name() for f in function_app.app.get_functions()))"
    )
    root = Path(__file__).resolve().parents[2]

    def start(**env: str) -> subprocess.CompletedProcess[str]:
        run_env = {**os.environ, "PYTHONPATH": str(root), **env}
        return subprocess.run(
            [sys.executable, "-c", script], cwd=root, env=run_env, capture_output=True, text=True, timeout=120
        )

    good, bad = start(), start(RETENTION_DAYS="thirty")
    assert good.returncode == 0 and bad.returncode == 0, bad.stderr
    assert bad.stdout == good.stdout and "maintenance_timer" in bad.stdout
    errors = [line for line in bad.stderr.splitlines() if "disabled" in line]
    assert errors == ["maintenance: retention is disabled: RETENTION_DAYS must be an integer, got 'thirty'"]
