"""Storage requests and time per purged instance (retention), with and without the audit archive.

    python bench/purge_requests.py             # 200 finished instances, one tick each way
    python bench/purge_requests.py --quick     # 20

Starts its own Azurite; each instance is a three-step ``provision-tenant`` run as the app leaves it
(``tests.helpers.request_scenarios``). Raw counts first, then per-instance figures. Not part of the test suite
(``tests/retention/test_purge_requests.py`` pins the counts).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devtools.azurite import Azurite
from devtools.logs import quiet_logging
from tests.helpers.request_counter import RequestCounter
from tests.helpers.request_scenarios import finished_instance, measure_purge
from workflow_core.ledger import StepLedger
from workflow_core.settings import StorageConnection
from workflow_core.storage_clients import blob_container_client


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    count = 20 if parser.parse_args().quick else 200
    quiet_logging()
    with Azurite() as azurite, RequestCounter() as counter:
        for with_archive in (False, True):
            suffix = "a" if with_archive else "n"
            ledger = StepLedger.from_connection_string(
                azurite.connection_string, f"bps{suffix}", f"bpi{suffix}"
            )
            ledger.create_tables()
            for n in range(count):
                finished_instance(ledger, f"bench-{n:05d}")
            archive = None
            if with_archive:
                storage = StorageConnection(connection_string=azurite.connection_string)
                archive = blob_container_client(storage, "bench-archive")
            started = time.perf_counter()
            made, purged = measure_purge(counter, ledger, count, archive=archive)
            seconds = time.perf_counter() - started
            total = sum(made.values())
            mode = "on" if with_archive else "off"
            print(f"archive={mode}: purged {purged} in {seconds:.2f} s; requests {total}")
            for key, value in sorted(made.items()):
                print(f"    {key:28} {value:6d}   {value / purged:6.2f} per instance")
            print(f"    per instance: {total / purged:.2f} requests, {1000 * seconds / purged:.1f} ms")


if __name__ == "__main__":
    main()
