"""Where the project's CPU per step goes: CPU time (``time.thread_time``) of the benchmark's project run
(``bench/throughput.py``'s headline variant) and of its lean loop, split by phase and by layer, outside
the transport and in it.

    python bench/cpu_per_step.py            # 5 workflows x 3 steps, 6 repetitions of each after a warm-up
    python bench/cpu_per_step.py --runs 10
    python bench/cpu_per_step.py --profile  # the project's timed part under cProfile, by package
    python bench/cpu_per_step.py --cuts     # this round's cuts off and on, alternately, one process

Each timed function is wrapped; a wrapped call's time counts for it alone (its own wrapped callees
are subtracted), and the time inside the transport (the SDK's ``RequestsTransport.send``: from
handing a request to the HTTP stack to its answer, the stack's own CPU included) is charged to a
column of its own. CPU time, not wall time: a busy machine moves it far less than the rates
(``bench/throughput.py``), though not at all is too much to ask of a shared core. Main thread only:
the HTTP starter hands two ledger writes to an executor thread, not counted. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import pstats
import statistics
import sys
import threading
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from azure.core.pipeline import Pipeline
from azure.core.pipeline.transport import RequestsTransport
from azure.data.tables import TableClient
from azure.storage.queue import QueueClient

import orchestrators.attempts as attempts
from bench import throughput
from devtools import harness_agents
from devtools.azurite import Azurite
from devtools.durable_host import episodes, host, registry
from devtools.logs import quiet_logging
from workflow_core import messages, table_transactions
from workflow_core.ledger import store
from workflow_core.table_transactions import TransactionTableClient
from workflow_core.transport import bounded_json, envelope, storage_queue

SDK_TABLE = "table client (the SDK's, sub-requests built by ours: entities, reading the answer)"
SDK_QUEUE = "Azure SDK queue client (request, XML, base64)"
# (owner, attribute, phase): outer phases first; an inner one takes its share from the outer
PHASES: list[tuple[Any, str, str]] = [
    (episodes._Episodes, "_run_episode", "orchestration episodes: Durable SDK, orchestrator code, host"),
    (registry.ActivityFunction, "invoke", "scheduler activities (dispatch, settle): own code"),
    (harness_agents.HarnessPumps, "_work_handler", "worker (claim, handler, record, reply): own code"),
    (harness_agents.HarnessPumps, "_result_handler", "result handler: own code"),
    (host.DurableTestHost, "call", "HTTP starter: own code"),
    (storage_queue.StorageQueueTransport, "receive", "queue pumps (receive, delete)"),
    (storage_queue.StorageQueueTransport, "complete", "queue pumps (receive, delete)"),
    (Pipeline, "run", "Azure SDK pipeline policies (per request)"),
    *((TableClient, name, SDK_TABLE) for name in ("submit_transaction", "update_entity", "upsert_entity")),
    *((TableClient, name, SDK_TABLE) for name in ("create_entity", "delete_entity", "query_entities")),
    (TableClient, "get_entity", SDK_TABLE),
    (TransactionTableClient, "submit_transaction", SDK_TABLE),
    *((QueueClient, name, SDK_QUEUE) for name in ("send_message", "receive_messages", "delete_message")),
    (table_transactions, "encode_transaction", "$batch codec"),
    (table_transactions, "decode_transaction_response", "$batch codec"),
    (store.StepLedger, "_write", "step ledger writes (entities, ETags, audit rows, known rows)"),
    (bounded_json, "loads", "bounded-JSON read of each message"),
    (envelope, "write_envelope", "envelope write"),
    (messages, "_digest_without_etags", "message digests (claim key, basis row)"),
    (messages, "payload_digest", "message digests (claim key, basis row)"),
    (attempts, "provisional_outcome", "episodes: a success taken unread, re-read on every replay"),
    (attempts, "call_activity", "episodes: activity calls (the SDK's action, input JSON)"),
]
OUTSIDE = "harness loop, clock, the rest"


class CpuLedger:
    """Thread-CPU per phase, exclusive of nested phases, with the transport's share apart."""

    def __init__(self) -> None:
        self.outside: Counter[str] = Counter()
        self.wire: Counter[str] = Counter()
        self._local = threading.local()

    def _stack(self) -> list[list[Any]]:
        return self._local.stack

    def open(self) -> None:
        self._local.stack = [[OUTSIDE, time.thread_time()]]

    def _enter(self, phase: str) -> None:
        stack, now = self._stack(), time.thread_time()
        self.outside[stack[-1][0]] += now - stack[-1][1]
        stack.append([phase, now])

    def _leave(self, wire: bool = False) -> None:
        stack, now = self._stack(), time.thread_time()
        phase, since = stack.pop()
        (self.wire if wire else self.outside)[stack[-1][0] if wire else phase] += now - since
        stack[-1][1] = now

    def wrap(self, owner: Any, name: str, phase: str, *, wire: bool = False) -> None:
        inner = getattr(owner, name)

        @functools.wraps(inner)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if getattr(self._local, "stack", None) is None:  # another thread, or outside a timed run
                return inner(*args, **kwargs)
            self._enter(phase)
            try:
                return inner(*args, **kwargs)
            finally:
                self._leave(wire)

        setattr(owner, name, timed)

    def close(self) -> None:
        (phase, since), self._local.stack = self._local.stack[0], None
        self.outside[phase] += time.thread_time() - since


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=6, help="timed repetitions (default 6)")
    parser.add_argument("--workflows", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile's self time by package instead")
    parser.add_argument("--cuts", action="store_true", help="the client cuts off and on, alternately")
    args = parser.parse_args(argv)
    quiet_logging()
    warnings.filterwarnings("ignore")
    if args.profile:
        return profile(args.runs, args.workflows, args.steps)
    if args.cuts:
        return cuts(args.runs, args.workflows, args.steps)
    ledger = CpuLedger()
    for owner, name, phase in PHASES:
        ledger.wrap(owner, name, phase)
    ledger.wrap(RequestsTransport, "send", "", wire=True)
    harness = throughput.PatternHarness
    for name in ("start_workflow", "run_until"):  # the timed part of a run, nothing before or after
        setattr(harness, name, _timed(ledger, getattr(harness, name)))
    lean = _timed(ledger, throughput.lean_loop)
    with Azurite() as azurite:
        throughput.project(azurite, args.workflows, args.steps)  # warm-up
        lean(azurite, args.workflows, args.steps)
        for title, run in (
            ("project", throughput.project),
            ("lean loop (its own loop is the harness row)", lambda *a: lean(*a)),
        ):
            ledger.outside.clear()
            ledger.wire.clear()
            steps = sum(run(azurite, args.workflows, args.steps).steps for _ in range(args.runs))
            outside, wire = sum(ledger.outside.values()), sum(ledger.wire.values())
            print(f"{title}, {steps} steps: main-thread CPU per step, ms")
            for phase, seconds in ledger.outside.most_common():
                print(f"  {seconds / steps * 1e3:6.2f}  {phase}")
            print(f"  {outside / steps * 1e3:6.2f}  outside the transport, in all")
            print(f"  {wire / steps * 1e3:6.2f}  in the transport (the HTTP stack below the SDK's pipeline)")
    return 0


def profile(runs: int, workflows: int, steps: int) -> int:
    """The project's timed part under cProfile, self time summed by package and the own functions
    that take most. cProfile charges every call, so many small calls (the SDK's) weigh more than a
    sampling profiler says: a guide to where the time goes, the table above to how much."""
    profiler, on = cProfile.Profile(), [False]
    harness = throughput.PatternHarness
    for name in ("start_workflow", "run_until"):  # the timed part of a run, as in main
        setattr(harness, name, _profiled(profiler, on, getattr(harness, name)))
    with Azurite() as azurite:
        throughput.project(azurite, workflows, steps)  # warm-up, not profiled
        on[0] = True
        done = sum(throughput.project(azurite, workflows, steps).steps for _ in range(runs))
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    by_package: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for (path, line, function), (_, _, self_time, _, _) in stats.items():
        package = _package(path, function)
        by_package[package] += self_time
        if package.split("/")[0] in ("workflow_core", "activities", "orchestrators", "api"):
            own[f"{Path(path).relative_to(ROOT)}:{line} {function}"] += self_time
    total = sum(by_package.values())
    print(f"project, {done} steps under cProfile: {total / done * 1e3:.1f} ms per step (inflated)")
    for package, seconds in by_package.most_common(30):
        print(f"  {seconds / total:6.1%}  {package}")
    print(f"our own functions, self time: {sum(own.values()) / total:.1%} in all; the most:")
    for function, seconds in own.most_common(15):
        print(f"  {seconds / total:6.1%}  {function}")
    return 0


def cuts(runs: int, workflows: int, steps: int) -> int:
    """The project's CPU per step (this process, every thread) with the storage clients' cuts of
    issue 53 off and on in alternate repetitions (a busy machine moves both alike): answers' heads
    read as headers only (``storage_clients.HeadersOnlyResponse``) and sub-requests built by
    ``table_subrequests``."""
    from azure.data.tables._table_batch import TableBatchOperations

    from workflow_core import storage_clients
    from workflow_core.table_subrequests import SubRequests

    variants = {
        "off": (lambda _pool_manager: None, TableBatchOperations),
        "on": (storage_clients.headers_only_pools, SubRequests),
    }
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    with Azurite() as azurite:
        throughput.project(azurite, workflows, steps)  # warm-up
        for _ in range(runs):
            for name, (pools, batch) in variants.items():
                storage_clients.headers_only_pools, table_transactions.SubRequests = pools, batch  # type: ignore[attr-defined]
                run = throughput.project(azurite, workflows, steps)
                cpu[name].append(run.cpu / run.steps * 1e3)
    for name, values in cpu.items():
        print(f"cuts {name:>3}: CPU per step {statistics.median(values):5.1f} ms (median), runs:", end="")
        print(" ".join(f"{v:.1f}" for v in values))
    saved = [off - on for off, on in zip(cpu["off"], cpu["on"], strict=True)]
    pairs = " ".join(f"{v:.1f}" for v in saved)
    print(f"saved per step, each pair: {pairs} ms; median {statistics.median(saved):.1f}")
    return 0


def _profiled(profiler: cProfile.Profile, on: list[bool], inner: Any) -> Any:
    @functools.wraps(inner)
    def run(*args: Any, **kwargs: Any) -> Any:
        return profiler.runcall(inner, *args, **kwargs) if on[0] else inner(*args, **kwargs)

    return run


ROOT = Path(__file__).resolve().parents[1]
_SOCKETS = ("recv_into", "sendall", "poll")


def _package(path: str, function: str) -> str:
    if path == "~":  # a builtin: waiting on sockets apart, charged by name
        return "waiting on sockets" if any(s in function for s in _SOCKETS) else f"builtin {function}"
    if "site-packages" in path:
        parts = path.split("site-packages/", 1)[1].split("/")
        return "/".join(parts[:3] if parts[0] == "azure" else parts[:1])
    if path.startswith(str(ROOT)):
        parts = Path(path).relative_to(ROOT).parts
        return "/".join(parts[:2])
    parts = Path(path).parts  # the standard library: its module, package included
    inside = len(parts) > 1 and not parts[-2].startswith("python3")
    return "stdlib " + "/".join(parts[-2:] if inside else parts[-1:])


def _timed(ledger: CpuLedger, inner: Any) -> Any:
    @functools.wraps(inner)
    def timed(*args: Any, **kwargs: Any) -> Any:
        ledger.open()
        try:
            return inner(*args, **kwargs)
        finally:
            ledger.close()

    return timed


if __name__ == "__main__":
    sys.exit(main())
