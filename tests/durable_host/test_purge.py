"""``purge_instance_history`` through the SDK client, answered as the extension's HTTP API answers
``DELETE instances/{id}``: 200 with the count for a known instance, 404 (0 deleted) for an unknown one."""

from __future__ import annotations

import pytest

from devtools.durable_host import DurableTestHost
from tests.durable_host.test_client_and_app import approval


@pytest.fixture
def host():
    with DurableTestHost(orchestrators={"approval": approval}) as h:
        yield h


def test_purge_deletes_a_finished_instance_and_reports_it(host):
    done = host.start_new("approval", "p-1")
    host.run_until_idle()
    host.raise_event(done, "approved", "dana")
    host.run_until_complete(done)

    result = host.run_async(host.client.purge_instance_history(done))
    assert result.instances_deleted == 1
    assert host.run_async(host.client.get_status(done)).instance_id is None  # 404: no such instance
    assert done not in host.instance_ids()
    again = host.run_async(host.client.purge_instance_history(done))
    assert again.instances_deleted == 0


def test_purge_of_an_unknown_instance_deletes_nothing(host):
    assert host.run_async(host.client.purge_instance_history("never-was")).instances_deleted == 0


def test_the_test_host_refuses_to_purge_a_live_instance(host):
    live = host.start_new("approval", "p-live")
    host.run_until_idle()
    with pytest.raises(Exception, match="501"):
        host.run_async(host.client.purge_instance_history(live))
    assert live in host.instance_ids()
