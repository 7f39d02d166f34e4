"""End-to-end steps/s of the pattern next to a lean but complete loop, on the same Azurite, in one run.

    python bench/throughput.py            # 10 workflows x 5 steps, 5 repetitions of each variant
    python bench/throughput.py --quick    # 5 workflows x 3 steps, 5 repetitions (well under a minute)

Starts its own Azurite. Each repetition runs, one after the other (interleaved, so a noisy moment
of the machine hits every variant alike), on fresh tables and queues:

* **project**: ``--workflows`` synthetic workflows of ``--steps`` quick steps (agent ``bench.answer``,
  which answers at once and makes no remote effect, like the lean loop's) started together through
  the HTTP starter on the in-process durable host (``devtools.harness``, virtual clock, watchdog
  off): the real orchestrator, activities, worker, result handler, ledger and Storage Queues. Timed
  from the first start to the last completion.
* **project, example agent**: the same with the example agent ``dns.register``, whose idempotent
  effect is one more insert per step (into its own table): what the figures before the no-op agent
  measured. Its requests are left out of the requests per step, not out of its time.
* **project, SDK default transport**: the same, with the Azure SDK's default ``requests`` transport
  (``trust_env`` on: proxy variables and ``~/.netrc`` looked up on every request) instead of the
  one ``workflow_core.storage_clients`` builds (environment read once per client). Omit with
  ``--no-sdk-transport``.
* **project / lean loop, SDK's $batch codec**: the same two runs with entity-group transactions
  built by the SDK's request builders and encoded and decoded by azure-core's ``email``-based
  multipart code instead of ``workflow_core.table_subrequests`` and ``table_transactions`` (what the
  app used before it had its own codec): their effect, and the ratio when both sides pay the SDK's
  price per transaction. Omit with ``--no-sdk-codec``.
* **point reads** (with the SDK variant): ``--reads`` reads of one entity with our transport and
  with the SDK's default, interleaved: the per-request cost of the environment lookups alone.
* **lean loop** (the baseline): the same workflows and steps, single-threaded like the host, doing
  per step only what a complete supervised step needs: one entity-group transaction (step row with
  If-Match + audit row), send the work message, receive it, an If-Match update of the step row
  reusing the ETag that transaction returned, send the result, delete the work message, receive the
  result, delete it (8 requests per step, receives batched up to 16 like the harness's pumps); one
  batch per workflow creates its step rows.

Prints every repetition's raw steps/s, storage requests per step and CPU time per step of this
process (every thread: the app's and the SDK's work, not Azurite's; less moved by a busy machine than
the rates) first, then the medians, then
for the median repetition of the project and of the lean loop the time per step spent in the
transport (every request timed, the example agent's effect and idle receives included, though the
requests-per-step figures leave them out) and outside it, by kind of request, then the ratios of the
medians. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from azure.core import MatchConditions
from azure.core.pipeline.transport import HttpTransport, RequestsTransport
from azure.data.tables import UpdateMode
from azure.storage.queue import QueueServiceClient

from activities.worker.handlers import RemoteEffects, agent
from devtools.azurite import Azurite
from devtools.harness import PatternHarness
from devtools.logs import quiet_logging
from tests.helpers.request_counter import RequestCounter
from tests.helpers.request_scenarios import forget_effect_clients
from workflow_core import storage_clients
from workflow_core.settings import StorageConnection

WORKFLOW = "throughput"
RECEIVE_BATCH = 16  # what the harness's pumps ask for
FINISHED = ("Completed", "Failed", "Terminated")


# The agent of the headline run: answers at once and makes no remote effect, as the lean loop's
# "agent" does no work: both then measure only what supervising a step costs. The example agent
# (``dns.register``, one insert into its effect table per step) runs as a variant beside it.
NO_OP_AGENT = "bench.answer"
EXAMPLE_AGENT = "dns.register"


@agent(NO_OP_AGENT)
def answer(ctx: Any) -> dict[str, Any]:
    return {"answered": ctx.step_id}


def definition(steps: int, agent_name: str = NO_OP_AGENT) -> dict[str, Any]:
    return {
        "name": WORKFLOW,
        "description": f"{steps} quick steps (throughput benchmark)",
        "input": {"required": ["tenant_id"], "properties": {"tenant_id": {"type": "string"}}},
        "steps": [
            {
                "id": f"step{n:03d}",
                "agent": agent_name,
                "input": {"tenant_id": "$input.tenant_id"},
                "deadline_seconds": 300,
                "retry": {"max_attempts": 1},
            }
            for n in range(steps)
        ],
    }


class Run:
    def __init__(
        self, seconds: float, steps: int, requests: int, made: list[Any] | None = None, cpu: float = 0.0
    ) -> None:
        self.seconds, self.steps, self.requests = seconds, steps, requests
        self.cpu = cpu  # this process's CPU time (every thread; Azurite is another process)
        # every request on the wire (the agent's effect and idle receives too: they take time)
        self.made = made or []

    @property
    def rate(self) -> float:
        return self.steps / self.seconds

    @property
    def transport_seconds(self) -> float:
        return sum(r.seconds for r in self.made)

    def by_kind(self) -> dict[str, tuple[int, float]]:
        """``"service op"`` -> (requests, seconds) on the wire."""
        kinds: dict[str, tuple[int, float]] = {}
        for r in self.made:
            n, t = kinds.get(f"{r.service} {r.op}", (0, 0.0))
            kinds[f"{r.service} {r.op}"] = (n + 1, t + r.seconds)
        return kinds


@contextlib.contextmanager
def sdk_batch_codec() -> Iterator[None]:
    """Within: every table client of the app sends its transactions through the SDK's own codec."""
    from azure.data.tables import TableClient

    from workflow_core.table_transactions import TransactionTableClient

    ours = {name: TransactionTableClient.__dict__[name] for name in ("_batch_send", "submit_transaction")}
    for name in ours:  # the SDK's sub-requests and codec both
        setattr(TransactionTableClient, name, getattr(TableClient, name))
    try:
        yield
    finally:
        for name, method in ours.items():
            setattr(TransactionTableClient, name, method)


def with_sdk_codec(run: Callable[[Azurite], Run]) -> Callable[[Azurite], Run]:
    def wrapped(azurite: Azurite) -> Run:
        with sdk_batch_codec():
            return run(azurite)

    return wrapped


def project(
    azurite: Azurite,
    workflows: int,
    steps: int,
    *,
    sdk_transport: bool = False,
    agent_name: str = NO_OP_AGENT,
) -> Run:
    def sdk_default(_: HttpTransport) -> HttpTransport:
        return RequestsTransport()  # what the SDK builds when given no transport

    if sdk_transport:
        storage_clients.add_transport_hook(sdk_default)
    counter = RequestCounter().install()  # wraps last: counts whichever transport is underneath
    forget_effect_clients()  # the agent's effect client is built under the counter: its time is timed
    try:
        with PatternHarness(
            azurite, watchdog_every=None, extra_workflows={WORKFLOW: definition(steps, agent_name)}
        ) as h:
            RemoteEffects.for_services(h.services)  # built (and its table created) before the clock starts
            counter.reset()
            tag = uuid.uuid4().hex[:6]
            started, cpu_started = time.perf_counter(), time.process_time()
            iids = [h.start_workflow(WORKFLOW, {"tenant_id": f"{tag}-{n}"}) for n in range(workflows)]
            # One run until every instance finished (not one per instance: each further run would
            # end with an idle iteration, one empty poll per queue, that the lean loop does not make).
            h.run_until(
                lambda: all(h.host.get_status(i).runtime_status.value in FINISHED for i in iids),
                timedelta(hours=1),
            )
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
            made = counter.snapshot()
            for iid in iids:
                status = h.host.get_status(iid)
                if not isinstance(status.output, dict) or status.output.get("status") != "succeeded":
                    raise SystemExit(f"{iid} did not succeed: {status.runtime_status} {status.output}")
    finally:
        counter.uninstall()
        storage_clients.remove_transport_hook(sdk_default)
    # requests per step: everything but idle polls and the example agent's own effect table
    useful = [r for r in made if not (r.op == "receive" and r.empty) and r.resource != "RemoteEffects"]
    return Run(seconds, workflows * steps, len(useful), made, cpu)


def lean_loop(azurite: Azurite, workflows: int, steps: int) -> Run:
    """The baseline: a complete supervised step in as few requests as the storage model allows."""
    tag = uuid.uuid4().hex[:8]
    storage = StorageConnection(connection_string=azurite.connection_string)
    counter = RequestCounter().install()
    try:
        table = storage_clients.table_client(storage, f"lean{tag}")
        queues: QueueServiceClient = storage_clients.queue_service_client_from_connection_string(
            azurite.connection_string
        )
        table.create_table()
        work, results = queues.get_queue_client(f"lean{tag}-work"), queues.get_queue_client(f"lean{tag}-res")
        work.create_queue()
        results.create_queue()
        counter.reset()
        started, cpu_started = time.perf_counter(), time.process_time()
        etags: dict[tuple[str, int], str] = {}
        for w in range(workflows):  # one batch per workflow: every step row Pending
            created = table.submit_transaction(
                [
                    ("create", {"PartitionKey": f"wf{w}", "RowKey": f"s{n:03d}", "Status": "Pending"})
                    for n in range(steps)
                ]
            )
            for n, meta in enumerate(created):
                etags[(f"wf{w}", n)] = meta["etag"]
        position = dict.fromkeys((f"wf{w}" for w in range(workflows)), 0)

        def dispatch(instance: str) -> None:
            n = position[instance]
            now = datetime.now(UTC)
            step = {"PartitionKey": instance, "RowKey": f"s{n:03d}", "Status": "Dispatched", "Deadline": now}
            audit = {"PartitionKey": instance, "RowKey": f"~audit~{now.isoformat()}~{n}", "To": "Dispatched"}
            written = table.submit_transaction(
                [
                    (
                        "update",
                        step,
                        {
                            "mode": UpdateMode.REPLACE,
                            "etag": etags[(instance, n)],
                            "match_condition": MatchConditions.IfNotModified,
                        },
                    ),
                    ("create", audit),
                ]
            )
            body = {"instance": instance, "step": n, "etag": written[0]["etag"]}
            work.send_message(json.dumps(body))

        for instance in position:
            dispatch(instance)
        remaining = workflows * steps
        while remaining:
            for message in work.receive_messages(messages_per_page=RECEIVE_BATCH, max_messages=RECEIVE_BATCH):
                body = json.loads(message.content)
                instance, n = body["instance"], body["step"]
                table.update_entity(
                    {"PartitionKey": instance, "RowKey": f"s{n:03d}", "Status": "Succeeded"},
                    mode=UpdateMode.REPLACE,
                    etag=body["etag"],
                    match_condition=MatchConditions.IfNotModified,
                )
                results.send_message(json.dumps({"instance": instance, "step": n, "ok": True}))
                work.delete_message(message)
            for message in results.receive_messages(
                messages_per_page=RECEIVE_BATCH, max_messages=RECEIVE_BATCH
            ):
                body = json.loads(message.content)
                results.delete_message(message)
                remaining -= 1
                position[body["instance"]] += 1
                if position[body["instance"]] < steps:
                    dispatch(body["instance"])
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        made = counter.snapshot()
        table.close()
        queues.close()
    finally:
        counter.uninstall()
    useful = [r for r in made if not (r.op == "receive" and r.empty)]
    return Run(seconds, workflows * steps, len(useful), made, cpu)


def point_reads(azurite: Azurite, reads: int, *, sdk_transport: bool) -> float:
    """Point reads/s of one existing entity: the per-request cost of the client alone."""
    storage = StorageConnection(connection_string=azurite.connection_string)
    if sdk_transport:
        from azure.data.tables import TableClient

        table = TableClient.from_connection_string(azurite.connection_string, "transportprobe")
    else:
        table = storage_clients.table_client(storage, "transportprobe")
    with table:
        started = time.perf_counter()
        for _ in range(reads):
            table.get_entity("p", "r")
        return reads / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=10, help="workflows started together (default 10)")
    parser.add_argument("--steps", type=int, default=5, help="steps per workflow (default 5)")
    parser.add_argument("--repetitions", type=int, default=5, help="repetitions of each variant (default 5)")
    parser.add_argument("--quick", action="store_true", help="5 workflows x 3 steps")
    parser.add_argument(
        "--no-sdk-transport", action="store_true", help="skip the variant with the SDK's default transport"
    )
    parser.add_argument(
        "--no-sdk-codec", action="store_true", help="skip the two variants with the SDK's $batch codec"
    )
    parser.add_argument(
        "--reads",
        type=int,
        default=300,
        help="point reads per repetition of the transport probe (default 300)",
    )
    args = parser.parse_args(argv)
    workflows, steps = (5, 3) if args.quick else (args.workflows, args.steps)
    quiet_logging()
    warnings.filterwarnings("ignore")

    variants: dict[str, Callable[[Azurite], Run]] = {
        "project": lambda az: project(az, workflows, steps),
        "lean loop (baseline)": lambda az: lean_loop(az, workflows, steps),
        "project, example agent": lambda az: project(az, workflows, steps, agent_name=EXAMPLE_AGENT),
    }
    if not args.no_sdk_transport:
        variants["project, SDK default transport"] = lambda az: project(
            az, workflows, steps, sdk_transport=True
        )
    if not args.no_sdk_codec:
        variants["project, SDK $batch codec"] = with_sdk_codec(variants["project"])
        variants["lean loop, SDK $batch codec"] = with_sdk_codec(variants["lean loop (baseline)"])
    runs: dict[str, list[Run]] = {name: [] for name in variants}
    with Azurite() as azurite:
        print(
            f"Azurite 127.0.0.1:{azurite.table_port}; {workflows} workflows x {steps} steps; storage queues"
        )
        for run in variants.values():  # warm-up (imports, first connections), not reported
            run(azurite)
        for rep in range(args.repetitions):
            for name, run in variants.items():
                r = run(azurite)
                runs[name].append(r)
                print(
                    f"  rep {rep + 1}  {name:<32} {r.rate:7.1f} steps/s  ({r.steps} steps in "
                    f"{r.seconds:5.2f} s, {r.requests / r.steps:5.2f} storage requests per step, "
                    f"CPU {r.cpu / r.steps * 1e3:5.1f} ms per step)",
                    flush=True,
                )
        reads: dict[str, list[float]] = {"ours": [], "sdk": []}
        if not args.no_sdk_transport:
            from azure.data.tables import TableClient

            with TableClient.from_connection_string(azurite.connection_string, "transportprobe") as probe:
                probe.create_table()
                probe.create_entity({"PartitionKey": "p", "RowKey": "r"})
            for rep in range(args.repetitions):
                for which in ("ours", "sdk"):
                    reads[which].append(point_reads(azurite, args.reads, sdk_transport=which == "sdk"))
                print(
                    f"  rep {rep + 1}  point reads/s: our transport {reads['ours'][-1]:7.1f}, "
                    f"SDK default transport {reads['sdk'][-1]:7.1f}",
                    flush=True,
                )
    medians = {name: statistics.median(r.rate for r in rs) for name, rs in runs.items()}
    print()
    print(f"median of {args.repetitions} repetitions (steps/s):")
    for name, value in medians.items():
        per_step = statistics.median(r.requests / r.steps for r in runs[name])
        cpu = statistics.median(r.cpu / r.steps for r in runs[name]) * 1e3
        print(
            f"  {name:<32} {value:7.1f} steps/s   {per_step:5.2f} requests per step   "
            f"CPU {cpu:5.1f} ms per step"
        )
    baseline = medians["lean loop (baseline)"]
    print()
    print("time per step, the median repetition of each (transport: from handing a request to the SDK's")
    print("transport to its answer, every request counted; outside: the SDK pipeline above it, replays,")
    print("activities, the harness):")
    for name in ("project", "project, example agent", "lean loop (baseline)"):
        run = sorted(runs[name], key=lambda r: r.rate)[len(runs[name]) // 2]
        total, wire = run.seconds / run.steps * 1e3, run.transport_seconds / run.steps * 1e3
        print(f"  {name:<32} {total:6.1f} ms   in transport {wire:6.1f} ms   outside {total - wire:6.1f} ms")
        for kind, (n, t) in sorted(run.by_kind().items()):
            print(f"      {kind:<20} {n / run.steps:5.2f} per step  {t / n * 1e3:5.2f} ms each")
    print()
    print(f"ratio project / lean loop:                          {medians['project'] / baseline:5.2f}")
    cpu = {
        name: statistics.median(r.cpu / r.steps for r in runs[name])
        for name in ("project", "lean loop (baseline)")
    }
    print(
        "CPU per step (this process), project / lean loop:   "
        f"{cpu['project'] / cpu['lean loop (baseline)']:5.2f}"
    )
    example = medians["project, example agent"]
    print(
        f"ratio project with the example agent / lean loop:   {example / baseline:5.2f}  "
        "(its effect's insert included)"
    )
    if "project, SDK $batch codec" in medians:
        project_sdk, lean_sdk = medians["project, SDK $batch codec"], medians["lean loop, SDK $batch codec"]
        print(f"ratio project / lean loop, both on the SDK codec:   {project_sdk / lean_sdk:5.2f}")
        print(f"ratio project, own codec / SDK codec:               {medians['project'] / project_sdk:5.2f}")
        print(f"ratio lean loop, own codec / SDK codec:             {baseline / lean_sdk:5.2f}")
    if "project, SDK default transport" in medians:
        sdk = medians["project, SDK default transport"]
        print(f"ratio project, SDK default transport / lean loop:   {sdk / baseline:5.2f}")
        print(f"ratio project / project with the SDK's transport:   {medians['project'] / sdk:5.2f}")
        ours, theirs = statistics.median(reads["ours"]), statistics.median(reads["sdk"])
        print(
            f"point reads/s, our transport / SDK default:        {ours / theirs:5.2f}  "
            f"({ours:.0f} vs {theirs:.0f}; {(1 / theirs - 1 / ours) * 1e6:.0f} us saved per request)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
