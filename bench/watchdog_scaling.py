"""How a watchdog tick scales with the size of the ledger: 100 overdue steps among few or many rows.

    python bench/watchdog_scaling.py                 # 1,000 and 100,000 ledger rows (a few minutes)
    python bench/watchdog_scaling.py --rows 10000    # a quicker look

Starts its own Azurite (devtools.azurite), fills two fresh pairs of ledger/index tables
with ``--small`` and ``--rows`` step rows in 100-entity batch transactions (every step has a
deadline-index row; all but the overdue ones have deadlines in the future), then runs ``--ticks``
watchdog ticks on each and prints the median tick time, the ratio, and what each tick read
(``LedgerStats``: index entities and step entities).

What a tick does here: detection (``ledger.overdue``) + claim (ETag-conditional update) + the
``fail_step`` decision (a TimedOut transition in the ledger and a raised event), against a
*recording* Durable client that answers "Running" without any I/O. So the figures measure the
ledger work of detection and claim, not Durable Functions' HTTP API. Before each tick a fresh set of
100 overdue steps is written (the previous tick's steps have moved to future deadlines).

Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devtools.azurite import Azurite, env_for
from supervisor.watchdog import run_tick
from workflow_core.ledger import StepLedger, StepRecord, StepStatus
from workflow_core.ledger.store import MAX_BATCH, _bucket, _deadline_key, _to_entity
from workflow_core.runtime import Services
from workflow_core.settings import load_settings

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
OVERDUE = 100
STEPS_PER_INSTANCE = 100  # one batch transaction per instance partition


class RecordingClient:
    """Durable client stand-in: every orchestration is Running; events and starts are only counted."""

    def __init__(self) -> None:
        self.events = 0
        self.starts = 0

    async def get_status(self, instance_id: str, *args: Any, **kwargs: Any) -> dict[str, str]:
        return {"runtimeStatus": "Running"}

    async def raise_event(self, instance_id: str, event_name: str, event_data: Any = None) -> None:
        self.events += 1

    async def start_new(self, name: str, instance_id: str | None = None, client_input: Any = None) -> str:
        self.starts += 1
        return instance_id or ""


def _step(instance: str, index: int, deadline: datetime) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Running step row and its deadline-index row, laid out exactly as StepLedger writes them."""
    step_id = f"s{index:03d}"
    index_pk, index_rk = _bucket(deadline), f"{_deadline_key(deadline)}~{instance}{step_id}"
    record = StepRecord(
        instance_id=instance,
        step_id=step_id,
        workflow_name="bench",
        step_name=step_id,
        sequence=index,
        agent="bench.agent",
        status=StepStatus.RUNNING,
        owner="worker-bench",
        attempt=1,
        max_attempts=3,
        deadline=deadline,
        created_at=NOW - timedelta(hours=1),
        updated_at=NOW - timedelta(hours=1),
        message_sent_at=NOW - timedelta(hours=1),
        orchestration_id=instance,
        index_key=f"{index_pk}|{index_rk}",
    )
    index_row = {
        "PartitionKey": index_pk,
        "RowKey": index_rk,
        "InstanceId": instance,
        "StepId": step_id,
        "Deadline": deadline,
        "Status": "Running",
    }
    return _to_entity(record), index_row


def _write(ledger: StepLedger, rows: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """Step rows (one partition per instance) and index rows (one partition per minute), batched."""
    by_partition: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for step, index_row in rows:
        by_partition.setdefault(("steps", step["PartitionKey"]), []).append(step)
        by_partition.setdefault(("index", index_row["PartitionKey"]), []).append(index_row)
    for (table, _), entities in by_partition.items():
        client = ledger._steps if table == "steps" else ledger._index
        for start in range(0, len(entities), MAX_BATCH):
            client.submit_transaction([("upsert", e) for e in entities[start : start + MAX_BATCH]])


def populate(ledger: StepLedger, rows: int, label: str, workers: int = 4) -> None:
    """``rows`` - OVERDUE future-deadline steps (deadlines spread over the next 30 days)."""
    future = rows - OVERDUE
    started = time.perf_counter()
    done = 0
    last_report = started

    def chunk(first_instance: int) -> int:
        instance = f"bench-{label}-{first_instance:06d}"
        count = min(STEPS_PER_INSTANCE, future - first_instance * STEPS_PER_INSTANCE)
        batch = []
        for i in range(count):
            # One minute bucket per instance (so its index rows make one batch), buckets spread
            # over the next 30 days.
            deadline = NOW + timedelta(minutes=10 + (first_instance * 7919) % (30 * 24 * 60), seconds=i % 60)
            batch.append(_step(instance, i, deadline))
        _write(ledger, batch)
        return count

    instances = (future + STEPS_PER_INSTANCE - 1) // STEPS_PER_INSTANCE
    with ThreadPoolExecutor(workers) as pool:
        for count in pool.map(chunk, range(instances)):
            done += count
            now = time.perf_counter()
            if now - last_report >= 5 or done == future:
                rate = done / (now - started)
                print(
                    f"  {label}: {done:>7,} / {future:,} future-deadline rows ({rate:,.0f} rows/s)",
                    flush=True,
                )
                last_report = now


def add_overdue(ledger: StepLedger, label: str, round_: int) -> None:
    instance = f"late-{label}-{round_:03d}"
    _write(ledger, [_step(instance, i, NOW - timedelta(minutes=5, seconds=i)) for i in range(OVERDUE)])


def measure(services: Services, label: str, ticks: int) -> dict[str, Any]:
    ledger = services.ledger
    client = RecordingClient()
    durations, detections, index_reads, step_reads = [], [], [], []
    for round_ in range(ticks):
        add_overdue(ledger, label, round_)
        started = time.perf_counter()  # detection alone (read-only): the same query the tick makes
        found = ledger.overdue(NOW, limit=OVERDUE)
        detections.append(time.perf_counter() - started)
        if len(found) != OVERDUE:
            raise SystemExit(f"expected {OVERDUE} overdue steps, the index returned {len(found)}")
        report = asyncio.run(
            run_tick(client, services, now=NOW, tick_id=f"{label}-{round_}", batch_size=OVERDUE)
        )
        if report.claimed != OVERDUE or report.errors:
            raise SystemExit(f"tick {report.tick_id} claimed {report.claimed} with {report.errors} errors")
        durations.append(report.duration_seconds)
        index_reads.append(report.index_entities_read)
        step_reads.append(report.step_entities_read)
        print(
            f"  {label}: tick {round_ + 1}/{ticks}: {report.duration_seconds * 1000:7.1f} ms "
            f"(detection alone {detections[-1] * 1000:6.1f} ms), "
            f"{report.index_entities_read} index entities, {report.step_entities_read} step entities read",
            flush=True,
        )
    return {
        "median": statistics.median(durations),
        "detection": statistics.median(detections),
        "index": statistics.median(index_reads),
        "steps": statistics.median(step_reads),
        "events": client.events,
    }


def raw_operation_cost(ledger: StepLedger, label: str, rounds: int = 3) -> float:
    """Azurite's own cost of the operations a claim makes, on this table size, without our code.

    Per step: a point read, an ETag-conditional replace of the step row, an index-row insert and an
    index-row delete, with azure-data-tables directly. Azurite keeps tables in memory and its per-row
    operations slow down as a table grows (real Table Storage point operations do not); dividing the
    tick ratio by this ratio separates Azurite's scaling from the watchdog's.
    """
    from azure.core import MatchConditions
    from azure.data.tables import UpdateMode

    instance = f"bench-{label}-000000"
    times = []
    for round_ in range(rounds):
        started = time.perf_counter()
        for i in range(OVERDUE):
            entity = ledger._steps.get_entity(instance, f"s{i:03d}")
            ledger._steps.update_entity(
                entity,
                mode=UpdateMode.REPLACE,
                etag=entity.metadata["etag"],
                match_condition=MatchConditions.IfNotModified,
            )
            key = {"PartitionKey": "209901010000", "RowKey": f"raw-{round_}-{i}"}
            ledger._index.create_entity(key)
            ledger._index.delete_entity(key["PartitionKey"], key["RowKey"])
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def services_for(azurite: Azurite, label: str) -> Services:
    env = {
        **env_for(azurite),
        "LEDGER_TABLE_NAME": f"BenchSteps{label}",
        "DEADLINE_INDEX_TABLE_NAME": f"BenchIndex{label}",
        "WATCHDOG_GRACE_SECONDS": "30",
    }
    return Services(load_settings(env))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rows", type=int, default=100_000, help="ledger rows of the large run (default 100000)"
    )
    parser.add_argument(
        "--small", type=int, default=1_000, help="ledger rows of the small run (default 1000)"
    )
    parser.add_argument(
        "--ticks", type=int, default=5, help="ticks per size; the median is reported (default 5)"
    )
    args = parser.parse_args(argv)
    if min(args.rows, args.small) <= OVERDUE:
        parser.error(f"--rows and --small must exceed the {OVERDUE} overdue steps")

    results = {}
    with Azurite() as azurite:
        print(f"Azurite on table port {azurite.table_port}", flush=True)
        for label, rows in (("small", args.small), ("large", args.rows)):
            services = services_for(azurite, label)
            try:
                print(f"populating {rows:,} ledger rows ({OVERDUE} of them overdue per tick)...", flush=True)
                populate(services.ledger, rows, label)
                measured = measure(services, label, args.ticks)
                measured["raw"] = raw_operation_cost(services.ledger, label)
                results[label] = (rows, measured)
            finally:
                services.close()

    (small_rows, small), (large_rows, large) = results["small"], results["large"]
    print()
    print("Watchdog tick: detection + claim + fail_step decision of 100 overdue steps")
    print("(recording Durable client: no Durable HTTP calls; real Azurite tables)")
    for rows, r in ((small_rows, small), (large_rows, large)):
        print(
            f"  {rows:>9,} ledger rows: median {r['median'] * 1000:8.1f} ms per tick "
            f"(detection alone {r['detection'] * 1000:6.1f} ms); "
            f"{r['index']:.0f} index entities and {r['steps']:.0f} step entities read per tick"
        )
    ratio = large["median"] / small["median"]
    detection_ratio = large["detection"] / small["detection"]
    print(
        f"  ratio (large / small): tick {ratio:.2f}x, detection {detection_ratio:.2f}x, "
        f"for {large_rows / small_rows:.0f}x the rows"
    )
    raw_ratio = large["raw"] / small["raw"]
    print(
        f"  Azurite's own cost of the same per-step operations (raw SDK calls): "
        f"{small['raw'] * 1000:.1f} ms -> {large['raw'] * 1000:.1f} ms per 100 steps, ratio {raw_ratio:.2f}x"
    )
    print(f"  tick ratio with Azurite's per-operation growth factored out: {ratio / raw_ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
