"""Storage requests per operation, per step and per overdue step of a watchdog tick, counted at the SDK.

    python bench/requests_per_step.py            # 10 workflows end to end, a tick over 20 overdue steps
    python bench/requests_per_step.py --quick    # 3 workflows, 5 overdue steps (a few seconds)

Starts its own Azurite and counts every HTTP request the app's Table and Queue clients send
(``tests.helpers.request_counter``: a transport hook installed where the clients are built, in
``workflow_core.storage_clients``; each request is named from the call stack). Three measurements:

1. **per operation** (``tests.helpers.request_scenarios.step_operations``, the figures ``tests/perf`` pins):
   one three-step ``provision-tenant`` workflow driven through the real function bodies (the HTTP
   starter's id check and instance record, step creation, dispatch, worker, result handler), one
   message per receive (the unbatched worst case for queue requests);
2. **per step end to end**: ``--workflows`` three-step workflows started together on the in-process
   durable host (``devtools.harness``) with the real agent pumps, which receive up to 16 messages per
   request, so receives are shared between steps. Receives that come back empty are counted apart:
   how often an idle queue is polled is the host's choice (the Functions host backs off to one poll a
   minute; the harness polls in a tight loop), not a per-step cost;
3. **per overdue step of a watchdog tick** (``request_scenarios.watchdog_tick``): Running steps of live
   orchestrations past deadline and grace; the tick marks each TimedOut and raises its event. Twice:
   steps with index rows of their own (written without an instance record), and steps of supervised
   instances, watched through the instance's row (how the app's steps are written);
4. **large payloads** (``workflow_core.payloads``): the run of 2. again with a ``plan`` of
   ``LARGE_PLAN_CHARS`` characters, so the workflow input and ``send_welcome``'s input are over a
   ledger property and go to Blob Storage by reference: the blob requests and the extra requests per
   large payload, against the inline run of 2. (whose counts have no blob request at all).

The example agent's own effect (its ``RemoteEffects`` row) is counted and shown, and excluded from
the per-step figures. Raw counts first, then the per-step figures derived from them. Not part of the
test suite.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devtools.azurite import Azurite, private_env
from devtools.logs import quiet_logging
from tests.helpers import request_counter as rc
from tests.helpers import request_scenarios
from tests.helpers.request_counter import RequestCounter, StorageRequest, pattern_operation
from tests.helpers.request_scenarios import (
    OPERATIONS,
    WORKFLOW,
    WORKFLOW_INPUT,
    step_operations,
    watchdog_tick,
)
from workflow_core.runtime import Services, set_services
from workflow_core.settings import load_settings

PER_WORKFLOW = {rc.START, rc.CREATE_STEPS, rc.HEARTBEAT}


def _env(azurite: Azurite) -> dict[str, str]:
    return {**private_env(azurite, "r"), "WATCHDOG_GRACE_SECONDS": "30"}


def _ops(requests: list[StorageRequest]) -> str:
    kinds = Counter(
        f"{r.service} {r.op}" + (f"[{r.batch_size}]" if r.op == "batch" else "") for r in requests
    )
    return ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))


def per_operation(azurite: Azurite) -> float:
    with RequestCounter(classify=pattern_operation) as counter:
        services = Services(load_settings(_env(azurite)))
        services.ledger  # noqa: B018 - creates the tables (not measured)
        services.transport  # noqa: B018 - creates the queues
        set_services(services)
        try:
            counts = step_operations(services, counter)
        finally:
            set_services(None)
    print(f"1. per operation: one {counts.steps}-step {WORKFLOW} workflow driven body by body,")
    print("   one message per receive")
    print(f"   {'operation':<28} {'requests':>8} {'per step':>9}   what they were")
    labels = list(OPERATIONS) + sorted(
        (str(k) for k in counts.by_operation if k not in OPERATIONS and k != rc.AGENT_EFFECT), key=str
    )
    for label in labels:
        made = [r for r in counts.requests if r.label == label]
        if not made:
            continue
        per = "(once)" if label in PER_WORKFLOW else f"{len(made) / counts.steps:.2f}"
        print(f"   {label:<28} {len(made):>8} {per:>9}   {_ops(made)}")
    effect = [r for r in counts.requests if r.label == rc.AGENT_EFFECT]
    print(f"   {'(agent effect, excluded)':<28} {len(effect):>8} {'':>9}   {_ops(effect)}")
    total = counts.total_excluding_effect
    print(f"   total excluding the agent's effect: {total} requests for {counts.steps} steps")
    print(f"   => {counts.per_step:.2f} storage requests per step (driven, unbatched receives)")
    return counts.per_step


def end_to_end(azurite: Azurite, workflows: int) -> tuple[float, int]:
    counts = request_scenarios.end_to_end(azurite, workflows)
    steps = counts.steps
    print()
    print(f"2. end to end: {workflows} x {WORKFLOW} started together on the in-process host ({steps} steps)")
    for label, n in sorted(counts.by_operation.items(), key=lambda kv: -kv[1]):
        ops = _ops([r for r in counts.counted if r.label == label])
        print(f"   {label!s:<28} {n:>6}  {n / steps:6.2f} per step   {ops}")
    print(f"   {'(agent effect, excluded)':<28} {len(counts.effect):>6}")
    print(f"   {'(empty receives, excluded)':<28} {len(counts.idle):>6}  idle polls of the harness's pumps")
    print(
        f"   {'(harness observation, excl.)':<28} {len(counts.observed):>6}  the harness reading its ledger"
    )
    print(f"   total: {len(counts.counted)} requests for {steps} steps")
    print(f"   => {counts.per_step:.2f} storage requests per step end to end (receives shared by batching)")
    blob = [r for r in counts.counted if r.service == "blob"]
    print(f"   blob requests: {len(blob)} (every payload inline)")
    return counts.per_step, len(counts.counted)


LARGE_PLAN_CHARS = 100_000  # a plan over a ledger property (32,000 characters): two payloads by reference


def large_payloads(azurite: Azurite, workflows: int, inline_counted: int) -> float:
    """The end-to-end run with a large ``plan``: what the blob path costs per large payload."""
    large_input = {**WORKFLOW_INPUT, "plan": "p" * LARGE_PLAN_CHARS}
    counts = request_scenarios.end_to_end(azurite, workflows, large_input)
    blob = [r for r in counts.counted if r.service == "blob"]
    payloads = 2 * workflows  # per workflow: its input (instance record), send_welcome's input
    # creating the container is a local run's (Azure provisions it): once per process, not per payload
    setup = [r for r in blob if r.op == "create-container"]
    extra = len(counts.counted) - len(setup) - inline_counted
    print()
    print(
        f"4. large payloads: {workflows} x {WORKFLOW} with a {LARGE_PLAN_CHARS:,}-character plan "
        f"({counts.steps} steps; {payloads} payloads by reference: each workflow input and "
        "each send_welcome input)"
    )
    for label, n in sorted(Counter(r.label for r in blob).items(), key=lambda kv: -kv[1]):
        print(f"   {label!s:<28} {n:>6}  blob: {_ops([r for r in blob if r.label == label])}")
    print(f"   blob requests: {len(blob)} ({_ops(blob)})")
    print(
        f"   total: {len(counts.counted)} requests for {counts.steps} steps; the inline run of 2.: "
        f"{inline_counted} ({extra:+d} without the {len(setup)} container creation of a local run)"
    )
    print(f"   => {len(counts.counted) / counts.steps:.2f} storage requests per step end to end")
    print(f"   => {extra / payloads:+.2f} requests per large payload against the inline run")
    return extra / payloads


def per_tick(azurite: Azurite, overdue: int, *, watched: bool = False) -> float:
    with RequestCounter(classify=pattern_operation) as counter:
        services = Services(load_settings(_env(azurite)))
        services.ledger  # noqa: B018
        services.transport  # noqa: B018
        try:
            tick = watchdog_tick(services, counter, overdue=overdue, watched=watched)
        finally:
            services.close()
    print()
    if watched:
        print(
            f"3b. watchdog tick over {overdue} overdue Running steps of live orchestrations, each watched "
            "through its instance's index row (one partition query reads the instance and its steps)"
        )
    else:
        print(f"3. watchdog tick over {overdue} overdue Running steps of live orchestrations, own index rows")
    print(f"   requests per tick: {tick.total} ({_ops(tick.requests)}); decisions: {tick.decisions}")
    print(f"   detection (index range query): {tick.detection} per tick")
    print(
        f"   index cleanup at the end of the tick: {tick.index_cleanup} "
        "(one batch per index partition holding retired rows; single deletes where it holds one)"
    )
    print(
        f"   => {tick.per_overdue_step:.2f} requests per overdue step "
        f"(({tick.total} - {tick.detection} - {tick.index_cleanup}) / {tick.overdue}); "
        f"{(tick.total - tick.detection) / tick.overdue:.2f} with the cleanup spread over the steps"
    )
    return tick.per_overdue_step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=10, help="end-to-end workflows (default 10)")
    parser.add_argument("--overdue", type=int, default=20, help="overdue steps in the tick (default 20)")
    parser.add_argument("--quick", action="store_true", help="3 workflows, 5 overdue steps")
    args = parser.parse_args(argv)
    workflows, overdue = (3, 5) if args.quick else (args.workflows, args.overdue)
    quiet_logging()
    warnings.filterwarnings("ignore")
    with Azurite() as azurite:
        print(f"Azurite 127.0.0.1:{azurite.table_port}; storage-queue transport; requests counted at the SDK")
        print()
        driven = per_operation(azurite)
        e2e, inline_counted = end_to_end(azurite, workflows)
        tick = per_tick(azurite, overdue)
        tick_watched = per_tick(azurite, overdue, watched=True)
        large = large_payloads(azurite, workflows, inline_counted)
    print()
    print("summary (raw counts above; each figure is requests / steps of its own run)")
    print(f"   per step, driven one message per receive:  {driven:6.2f}")
    print(f"   per step, end to end with batched receives: {e2e:6.2f}")
    print(
        f"   per overdue step in a watchdog tick:        {tick:6.2f}"
        "  (own index rows; + detection and index cleanup per tick)"
    )
    print(
        f"   per overdue watched step in a tick:         {tick_watched:6.2f}"
        "  (watched through the instance's row; + detection per tick)"
    )
    print(f"   extra requests per large payload (blob path): {large:+6.2f}  (the inline path: none)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
