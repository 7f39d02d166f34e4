"""What the scheduler's "ledger first, then send" costs: dispatch vs a raw batch upsert of the same rows.

    python bench/dispatch_throughput.py            # 1,000 steps
    python bench/dispatch_throughput.py --quick    # 200 steps

Starts its own Azurite, then in one run on the same emulator:

* **dispatch**: the real ``dispatch_step`` activity body for N Pending steps, one after another, as
  the orchestrator calls it: read the step, ETag-conditional transition to Dispatched (with its
  audit row, in one entity-group transaction), new deadline-index row, send the work message on the
  storage-queue transport (nothing is written after the send);
* **raw upsert**: the same N rows written with ``azure-data-tables`` entity-group transactions of
  100 upserts each (no condition, no index, no audit, no message): the floor of what Table Storage
  can take from one client.

Prints rows/s for each and the ratio. The ratio is the price of doing it right (and of doing it one
step at a time, which is how an orchestrator dispatches); it is not a target to optimise away.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from azure.data.tables import TableServiceClient, UpdateMode

from activities.scheduler.functions import dispatch_step
from devtools.azurite import Azurite, private_env
from workflow_core.contracts import StepDispatch
from workflow_core.ledger import NewStep
from workflow_core.runtime import Services
from workflow_core.settings import load_settings

STEPS_PER_INSTANCE = 50
DEADLINE = "2030-01-01T12:05:00+00:00"


def prepare(services: Services, steps: int) -> list[tuple[str, str]]:
    """``steps`` Pending steps, ``STEPS_PER_INSTANCE`` per instance (not timed)."""
    created = []
    for start in range(0, steps, STEPS_PER_INSTANCE):
        instance = f"bench-{uuid.uuid4().hex[:12]}"
        count = min(STEPS_PER_INSTANCE, steps - start)
        new = [
            NewStep(step_id=f"s{n:04d}", step_name=f"s{n:04d}", agent="dns.register") for n in range(count)
        ]
        services.ledger.create_steps(instance, "bench", new, actor="bench")
        created += [(instance, s.step_id) for s in new]
    return created


def bench_dispatch(services: Services, steps: list[tuple[str, str]]) -> tuple[float, list[float]]:
    latencies = []
    started = time.perf_counter()
    for instance, step_id in steps:
        payload = StepDispatch(
            instance_id=instance,
            orchestration_id=instance,
            workflow="bench",
            step_id=step_id,
            attempt=1,
            deadline=DEADLINE,
            input={"tenant_id": "t"},
        ).model_dump()
        t0 = time.perf_counter()
        outcome = dispatch_step(payload, services)
        latencies.append(time.perf_counter() - t0)
        if not outcome["sent"]:
            raise RuntimeError(f"dispatch did not send: {outcome}")
    return time.perf_counter() - started, latencies


def bench_raw(connection_string: str, steps: int) -> float:
    service = TableServiceClient.from_connection_string(connection_string)
    table = service.create_table(f"raw{uuid.uuid4().hex[:10]}")
    rows = [
        {
            "PartitionKey": f"bench-{n // STEPS_PER_INSTANCE}",
            "RowKey": f"s{n % STEPS_PER_INSTANCE:04d}",
            "Status": "Dispatched",
            "Attempt": 1,
            "Owner": "agent:dns.register",
            "InputRef": '{"tenant_id":"t"}',
        }
        for n in range(steps)
    ]
    started = time.perf_counter()
    batch: list = []
    for row in rows:
        if batch and (len(batch) == 100 or batch[-1][1]["PartitionKey"] != row["PartitionKey"]):
            table.submit_transaction(batch)
            batch = []
        batch.append(("upsert", row, {"mode": UpdateMode.REPLACE}))
    if batch:
        table.submit_transaction(batch)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000, help="steps to dispatch (default 1000)")
    parser.add_argument("--quick", action="store_true", help="200 steps")
    args = parser.parse_args(argv)
    steps = 200 if args.quick else args.steps

    with Azurite() as azurite:
        env = private_env(azurite, "b")
        services = Services(load_settings(env))
        services.ledger  # noqa: B018 - creates the tables
        services.transport  # noqa: B018 - creates the queues
        print(f"Azurite 127.0.0.1:{azurite.table_port}; {steps} steps; storage-queue transport")
        created = prepare(services, steps)
        dispatch_seconds, latencies = bench_dispatch(services, created)
        raw_seconds = bench_raw(azurite.connection_string, steps)
        services.close()

    dispatch_rate = steps / dispatch_seconds
    raw_rate = steps / raw_seconds
    p50 = statistics.median(latencies) * 1000
    p95 = sorted(latencies)[int(len(latencies) * 0.95) - 1] * 1000
    dispatch_label = "dispatch (ledger write + send, one at a time):"
    print(f"{dispatch_label} {dispatch_rate:8.1f} rows/s  ({dispatch_seconds:.2f} s)")
    print(f"    per dispatch: median {p50:.1f} ms, p95 {p95:.1f} ms")
    print(f"raw batch upsert (100 per transaction):        {raw_rate:8.1f} rows/s  ({raw_seconds:.2f} s)")
    print(f"ratio raw / dispatch: {raw_rate / dispatch_rate:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
