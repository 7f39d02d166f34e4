"""How a watchdog tick scales with the size of the ledger: 100 overdue steps among few or many rows.

    python bench/watchdog_scaling.py                 # 1,000 and 100,000 ledger rows (a few minutes)
    python bench/watchdog_scaling.py --quick         # 1,000 and 10,000 rows, 3 ticks each (< 1 min)
    python bench/watchdog_scaling.py --small 1000 --rows 20000 --ticks 5

Starts its own Azurite (devtools.azurite), fills two fresh pairs of ledger/index tables with
``--small`` and ``--rows`` step rows in 100-entity batch transactions (every step has a
deadline-index row; all but the overdue ones have deadlines in the future), then runs ``--ticks``
rounds; each round ticks once on each table, small and large interleaved (alternating which goes
first), so machine noise and Azurite's periodic stalls hit both sizes alike.

What a tick does here: detection (``ledger.overdue``: one range query, one verify read per row) +
the ``fail_step`` decision, which is also the claim (one ETag-conditional TimedOut transition with
its new index row, and a raised event) + the end-of-tick deletes of the retired index rows (one batch
per index partition), against a
*recording* Durable client that answers "Running" without any I/O. So the figures measure the
ledger work of detection and claim, not Durable Functions' HTTP API. Before each tick a fresh set of
100 overdue steps is written (the previous tick's steps have moved to future deadlines).

Printed per tick and as medians: the whole tick's time and its storage requests (counted at the SDK
transport, ``tests.helpers.request_counter``), detection alone (the same index query, timed separately)
and what it read (``LedgerStats``); then the raw large/small ratios of requests, whole tick and
detection. Requests per tick are the scaling claim that does not depend on the emulator: Azurite
keeps tables in memory and its per-row operations slow down as a table grows (real Table Storage
point operations do not), so the time ratios carry Azurite's growth too; no figure here tries to
factor it out.

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
from tests.helpers.request_counter import RequestCounter
from workflow_core.ledger import StepLedger, StepRecord, StepStatus
from workflow_core.ledger.entities import _deadline_key, _to_entity
from workflow_core.ledger.families import MAX_BATCH
from workflow_core.ledger.index_keys import index_partition
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
    # sharded like the ledger's rows; by instance only, so one instance's rows seed in one batch
    index_pk, index_rk = index_partition(deadline, instance), f"{_deadline_key(deadline)}~{instance}{step_id}"
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


def tick_once(services: Services, counter: RequestCounter, label: str, round_: int) -> dict[str, Any]:
    """Write a fresh set of overdue steps, then time detection alone and one whole tick over them."""
    ledger = services.ledger
    client = RecordingClient()
    add_overdue(ledger, label, round_)
    with counter.measure() as detection_requests:
        started = time.perf_counter()  # detection alone (read-only): the same query the tick makes
        found = ledger.overdue(NOW, limit=OVERDUE)
        detection = time.perf_counter() - started
    if len(found) != OVERDUE:
        raise SystemExit(f"expected {OVERDUE} overdue steps, the index returned {len(found)}")
    with counter.measure() as tick_requests:
        report = asyncio.run(
            run_tick(client, services, now=NOW, tick_id=f"{label}-{round_}", batch_size=OVERDUE)
        )
    if report.claimed != OVERDUE or report.errors:
        raise SystemExit(f"tick {report.tick_id} claimed {report.claimed} with {report.errors} errors")
    return {
        "tick": report.duration_seconds,
        "detection": detection,
        "requests": len(tick_requests),
        "detection_requests": len(detection_requests),
        "index": report.index_entities_read,
        "steps": report.step_entities_read,
    }


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
        "--rows", type=int, default=100_000, help="ledger rows of the large table (default 100000)"
    )
    parser.add_argument(
        "--small", type=int, default=1_000, help="ledger rows of the small table (default 1000)"
    )
    parser.add_argument(
        "--ticks", type=int, default=5, help="ticks per size; the median is reported (default 5)"
    )
    parser.add_argument("--quick", action="store_true", help="10,000 rows in the large table, 3 ticks each")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.ticks = min(args.rows, 10_000), 3
    if min(args.rows, args.small) <= OVERDUE:
        parser.error(f"--rows and --small must exceed the {OVERDUE} overdue steps")

    sizes = {"small": args.small, "large": args.rows}
    samples: dict[str, list[dict[str, Any]]] = {label: [] for label in sizes}
    with Azurite() as azurite, RequestCounter() as counter:
        print(f"Azurite on table port {azurite.table_port}", flush=True)
        services = {label: services_for(azurite, label) for label in sizes}
        try:
            for label, rows in sizes.items():
                print(f"populating {rows:,} ledger rows ({OVERDUE} of them overdue per tick)...", flush=True)
                counter.paused = True
                populate(services[label].ledger, rows, label)
                counter.paused = False
            for round_ in range(args.ticks):
                # interleaved, alternating which size goes first, so machine noise and Azurite's
                # periodic stalls hit both sizes alike
                order = ("small", "large") if round_ % 2 == 0 else ("large", "small")
                for label in order:
                    s = tick_once(services[label], counter, label, round_)
                    samples[label].append(s)
                    print(
                        f"  round {round_ + 1}/{args.ticks} {label:<5} ({sizes[label]:>7,} rows): "
                        f"tick {s['tick'] * 1000:7.1f} ms, {s['requests']} requests; detection alone "
                        f"{s['detection'] * 1000:6.1f} ms, {s['detection_requests']} requests; "
                        f"{s['index']} index + {s['steps']} step entities read",
                        flush=True,
                    )
        finally:
            for svc in services.values():
                svc.close()

    def median(label: str, key: str) -> float:
        return statistics.median(s[key] for s in samples[label])

    print()
    print(f"Watchdog tick: detection + claim + fail_step decision of {OVERDUE} overdue steps")
    print("(recording Durable client: no Durable HTTP calls; real Azurite tables)")
    for label, rows in sizes.items():
        print(
            f"  {rows:>9,} ledger rows: median tick {median(label, 'tick') * 1000:8.1f} ms, "
            f"{median(label, 'requests'):.0f} requests per tick; detection alone "
            f"{median(label, 'detection') * 1000:6.1f} ms, "
            f"{median(label, 'detection_requests'):.0f} requests; "
            f"{median(label, 'index'):.0f} index and {median(label, 'steps'):.0f} step entities read"
        )
    print(f"  raw ratios (large / small, medians), for {sizes['large'] / sizes['small']:.0f}x the rows:")
    print(f"    requests per tick  {median('large', 'requests') / median('small', 'requests'):5.2f}")
    print(f"    whole tick         {median('large', 'tick') / median('small', 'tick'):5.2f}")
    print(f"    detection alone    {median('large', 'detection') / median('small', 'detection'):5.2f}")
    # Derived from the raw counts above: per overdue step, everything but the tick's two index range
    # queries (steps and instances), i.e. verify read + new index row + the claim-and-decision batch,
    # plus the end-of-tick cleanup batches spread over the steps.
    per_step = {k: (median(k, "requests") - 2) / OVERDUE for k in sizes}
    print(
        f"  requests per overdue step ((requests per tick - 2 range queries) / {OVERDUE}, end-of-tick "
        f"index cleanup included): small {per_step['small']:.2f}, large {per_step['large']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
