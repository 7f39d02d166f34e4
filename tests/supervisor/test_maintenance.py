"""The maintenance timers' bodies against the durable test host: retention purges the ledger rows and
the Durable history of an instance finished long ago; the bulk timer carries a recorded operation on,
ending the orchestration of each instance it stops."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from devtools.durable_host import DurableTestHost
from supervisor import bulk
from supervisor.maintenance import bulk_tick, retention_tick
from tests.durable_host.test_client_and_app import approval
from tests.helpers.rows import IS, NOW, make_instance
from workflow_core import clock
from workflow_core.operations_settings import load_operations_settings


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
    ops = replace(load_operations_settings({}), retention_days=30)
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
    carried = host.run_async(bulk_tick(services, host.client, load_operations_settings({})))
    assert carried == [op.bulk_id]
    assert ledger.find_instance("m-live").status is IS.STOPPED
    assert host.run_async(host.client.get_status("m-live")).runtime_status.name == "Terminated"
    assert store.get(op.bulk_id).done and store.unfinished() == []


def test_retention_tick_also_deletes_old_finished_bulk_operations(services, host):
    store = bulk.BulkStore(services.ledger)
    done = store.create("stop", bulk.BulkFilter(status="Running"), reason="outage", actor="operator:bo")
    store.record(done.bulk_id, "m-x", bulk.SKIPPED, "not running")
    done.done = True
    store.save(done)
    live = store.create("stop", bulk.BulkFilter(status="Running"), reason="outage", actor="operator:bo")
    ops = replace(load_operations_settings({}), retention_days=30)
    # Azurite stamps rows with the real time; NOW (2030) is more than 30 days after it
    host.run_async(retention_tick(services, host.client, ops, NOW))
    assert store.get(done.bulk_id) is None and store.outcomes(done.bulk_id) == []
    assert store.get(live.bulk_id) is not None
