"""Storage requests of a purge, pinned (docs/capacity.md, "Retention and bulk operations"): per purged
instance 12 Table requests (+3 blob requests with the archive), plus 4 listing queries per tick."""

from __future__ import annotations

from tests.helpers.request_counter import RequestCounter
from tests.helpers.request_scenarios import finished_instance, measure_purge
from workflow_core.ledger import StepLedger
from workflow_core.settings import StorageConnection
from workflow_core.storage_clients import blob_container_client


def test_requests_per_purged_instance(azurite, unique_name):
    with RequestCounter() as counter:
        ledger = StepLedger.from_connection_string(
            azurite.connection_string, unique_name("s"), unique_name("i")
        )
        ledger.create_tables()
        for n in range(5):
            finished_instance(ledger, f"pq-{n}")
        made, purged = measure_purge(counter, ledger, 1)
        assert purged == 1
        one = sum(made.values())
        made, purged = measure_purge(counter, ledger, 4)
        assert purged == 4
        assert made["table batch"] == 2 * 4  # the mark, and the rows' delete (one transaction each)
        per_instance = (sum(made.values()) - 4) / 4  # 4 listing scans (3 finished statuses, Purging)
        assert per_instance == 12 and one == 4 + 12  # 3 of them: parked, limits and bulk rows naming it

        archive = blob_container_client(
            StorageConnection(connection_string=azurite.connection_string), unique_name("a")
        )
        for n in range(5, 7):
            finished_instance(ledger, f"pq-{n}")
        made, purged = measure_purge(counter, ledger, 2, archive=archive)
        assert purged == 2
        blob = {k: v for k, v in made.items() if k.startswith("blob")}
        # per instance: look for an earlier archive, upload, read back; the container once
        assert blob == {"blob download": 4, "blob upload": 2, "blob create-container": 1}
