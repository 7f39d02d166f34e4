"""How many steps per second one deployment carries, from the storage requests each step makes.

    python bench/capacity.py                         # today's counts (docs/capacity.md), Service Bus Standard
    python bench/capacity.py --transport storage-queue
    python bench/capacity.py --measure               # count the requests now, on a private Azurite
    python bench/capacity.py --servicebus premium --index-shards 4 --steps-per-workflow 10

Arithmetic only (plus, with ``--measure``, the same driven scenario ``tests/perf`` pins). For each
published limit it prints the step rate at which that limit is reached, then the lowest one: the
first bottleneck. Limits (see docs/capacity.md for the sources):

* Table Storage, per account: 20,000 transactions/s (an entity-group transaction counts once);
* Table Storage, per partition: 2,000 entities/s. The deadline index puts every deadline of one
  minute in ``--index-shards`` partitions (16 in the ledger); a supervised instance writes its row
  there at the start and deletes it when it settles, and its steps are watched through that row
  (a step writes a row of its own only off the happy path): with one dominant deadline length, all
  instances started in the same minute share those partitions. The operators' instance listing is
  one partition: every instance writes its listing row at the start and when it settles;
* Queue Storage (storage-queue transport): 20,000 messages/s per account, 2,000 per queue (read
  conservatively: a message's send, receive and delete each count);
* Service Bus Standard: 1,000 credits/s per namespace, one credit per message sent or received;
  Premium: no published figure (dedicated messaging units; measure), so no ceiling is computed;
* the watchdog: at most ``WATCHDOG_BATCH_SIZE`` overdue steps per tick, one tick per period.

Not included: the Durable Functions task hub's own storage transactions (activity messages,
history rows, timers), which share the storage account unless the task hub has its own account.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Table Storage / Queue Storage scalability targets and Service Bus Standard throttling (docs/capacity.md)
ACCOUNT_TRANSACTIONS_PER_S = 20_000
PARTITION_ENTITIES_PER_S = 2_000
QUEUE_MESSAGES_PER_S = 2_000
SERVICEBUS_STANDARD_CREDITS_PER_S = 1_000


@dataclass(frozen=True)
class StepCost:
    """Storage requests of one step, by where they land. Defaults: measured end to end
    (``bench/requests_per_step.py`` part 2, pinned in ``tests/perf``); ``--measure`` counts them now
    the same way (``tests.helpers.request_scenarios.end_to_end``)."""

    # dispatch 1 (a batch, unread; the send is not recorded, the instance's row watches the step),
    # claim 1 (a batch, unread), record 1 (a batch); the result handler reads nothing for a sequential
    # step's success (its basis row is deleted by the next dispatch or the settle)
    table_per_step: float = 3
    # starter: instance create with the steps (one batch), index insert, listing row; settle: batch
    # (unread), index delete, listing row. (A generated instance id is not looked up; a chosen one
    # costs one query more; a workflow of more than 96 steps adds create_steps' read and batch.)
    table_per_workflow: float = 6
    index_entities_per_step: float = 0  # watched through the instance's row (own rows: off the happy path)
    index_entities_per_workflow: float = 2  # the instance's row: inserted at the start, deleted at settle
    listing_entities_per_workflow: float = 2  # the listing row: written at the start and at settle
    queue_messages_per_step: float = 6  # storage-queue transport: 2 sends, 2 receives, 2 deletes (unbatched)
    servicebus_credits_per_step: float = 4  # Service Bus: 2 sends + 2 receives (settlement not billed)
    # watchdog: verify read, new index row, one claim-and-decision batch (+ per-tick cleanup batches)
    table_per_overdue_step: float = 3


def measured_cost(workflows: int = 3) -> StepCost:
    """Count the requests now on a private Azurite: ``workflows`` three-step workflows end to end on
    the in-process host (receives batched, shared between steps, as a host's are), and a watchdog
    tick over five overdue steps."""

    from devtools.azurite import Azurite, private_env
    from tests.helpers import request_counter as rc
    from tests.helpers.request_counter import RequestCounter, pattern_operation
    from tests.helpers.request_scenarios import end_to_end, watchdog_tick
    from workflow_core.runtime import Services, set_services
    from workflow_core.settings import load_settings

    with Azurite() as azurite:
        e2e = end_to_end(azurite, workflows)
        with RequestCounter(classify=pattern_operation) as counter:
            env = private_env(azurite, "c")
            services = Services(load_settings(env))
            services.ledger  # noqa: B018
            services.transport  # noqa: B018
            set_services(services)
            try:
                tick = watchdog_tick(services, counter, overdue=5)
            finally:
                set_services(None)
    # per workflow, not per step; the definition store is once per definition version, the
    # heartbeat the example agent's own choice: neither is counted
    per_workflow = {rc.START, rc.CREATE_STEPS, rc.SETTLE, rc.HTTP_API}
    requests = [r for r in e2e.counted if r.label not in (rc.DEFINITION_STORE, rc.HEARTBEAT)]
    tables = [r for r in requests if r.service == "table"]
    per_step = [r for r in tables if r.label not in per_workflow]
    queue_ops = [r for r in requests if r.service == "queue"]
    # on the index table, per workflow: the instance's row inserted and deleted, the listing row
    # upserted (the counter sees operations, not partitions)
    on_index = [r for r in tables if r.label in per_workflow and r.resource == e2e.index_table]
    return StepCost(
        table_per_step=len(per_step) / e2e.steps,
        table_per_workflow=(len(tables) - len(per_step)) / e2e.workflows,
        index_entities_per_step=sum(1 for r in per_step if r.resource == e2e.index_table) / e2e.steps,
        index_entities_per_workflow=sum(1 for r in on_index if r.op != "update") / e2e.workflows,
        listing_entities_per_workflow=sum(1 for r in on_index if r.op == "update") / e2e.workflows,
        queue_messages_per_step=len(queue_ops) / e2e.steps,
        # a credit per message sent and per message received (not per receive request): each sent
        # message is received once
        servicebus_credits_per_step=2 * sum(1 for r in queue_ops if r.op == "send") / e2e.steps,
        table_per_overdue_step=tick.per_overdue_step,
    )


def ceilings(
    cost: StepCost,
    *,
    steps_per_workflow: int,
    transport: str,
    servicebus: str,
    index_shards: int,
    dominant_deadline_share: float,
    ledger_accounts: int,
) -> dict[str, float | None]:
    """Steps/s at which each limit is reached (None: no published ceiling)."""
    table = cost.table_per_step + cost.table_per_workflow / steps_per_workflow
    per_account = table + (cost.queue_messages_per_step if transport == "storage-queue" else 0)
    out: dict[str, float | None] = {
        "Table Storage account (20,000 transactions/s)": ledger_accounts
        * ACCOUNT_TRANSACTIONS_PER_S
        / per_account,
    }
    index = cost.index_entities_per_step + cost.index_entities_per_workflow / steps_per_workflow
    out["deadline-index partitions (2,000 entities/s each)"] = (
        PARTITION_ENTITIES_PER_S * index_shards / (index * dominant_deadline_share) if index else None
    )
    listing = cost.listing_entities_per_workflow / steps_per_workflow
    out["instance listing partition (2,000 entities/s)"] = (
        PARTITION_ENTITIES_PER_S / listing if listing else None
    )
    if transport == "storage-queue":
        # each queue carries one message per step, sent, received and deleted: read conservatively,
        # every one of the three operations counts against the queue's 2,000 messages/s
        out["one storage queue (2,000 messages/s, 3 operations a message)"] = QUEUE_MESSAGES_PER_S / 3
    elif servicebus == "standard":
        out["Service Bus Standard namespace (1,000 credits/s)"] = (
            SERVICEBUS_STANDARD_CREDITS_PER_S / cost.servicebus_credits_per_step
        )
    else:
        out["Service Bus Premium (per messaging unit: not published; measure)"] = None
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measure", action="store_true", help="count the requests now on a private Azurite")
    parser.add_argument("--transport", choices=("servicebus", "storage-queue"), default="servicebus")
    parser.add_argument("--servicebus", choices=("standard", "premium"), default="standard")
    parser.add_argument("--steps-per-workflow", type=int, default=3)
    parser.add_argument(
        "--index-shards", type=int, default=16, help="deadline-index partitions per minute (the ledger's: 16)"
    )
    parser.add_argument(
        "--dominant-deadline-share",
        type=float,
        default=1.0,
        help="share of steps whose deadline falls in the same minute as the others dispatched with it "
        "(1.0: one deadline length for every step, the worst case)",
    )
    parser.add_argument(
        "--ledger-accounts", type=int, default=1, help="storage accounts the ledger is spread on"
    )
    parser.add_argument("--watchdog-batch", type=int, default=100, help="WATCHDOG_BATCH_SIZE")
    parser.add_argument("--watchdog-period", type=float, default=30.0, help="seconds between watchdog ticks")
    args = parser.parse_args(argv)

    cost = measured_cost() if args.measure else StepCost()
    print(
        "requests per step ("
        + ("measured now, end to end" if args.measure else "defaults: measured end to end")
        + "):"
    )
    for field, value in cost.__dict__.items():
        print(f"  {field:<30} {value:6.2f}")
    table = cost.table_per_step + cost.table_per_workflow / args.steps_per_workflow
    print(f"  => table requests per step for {args.steps_per_workflow}-step workflows: {table:.2f}")
    print()
    found = ceilings(
        cost,
        steps_per_workflow=args.steps_per_workflow,
        transport=args.transport,
        servicebus=args.servicebus,
        index_shards=args.index_shards,
        dominant_deadline_share=args.dominant_deadline_share,
        ledger_accounts=args.ledger_accounts,
    )
    print(
        f"ceilings (steps/s), transport {args.transport}"
        + (f" {args.servicebus}" if args.transport == "servicebus" else "")
    )
    for name, value in found.items():
        print(f"  {name:<64} {'-' if value is None else f'{value:8.0f}'}")
    binding = min(((v, k) for k, v in found.items() if v is not None), default=None)
    if binding is not None:
        print(f"first bottleneck: {binding[1]} at {binding[0]:.0f} steps/s")
    recover = args.watchdog_batch / args.watchdog_period
    print(
        f"watchdog recovery ceiling: {recover:.1f} overdue steps/s ({args.watchdog_batch} per tick every "
        f"{args.watchdog_period:g} s); flat out it makes {recover * cost.table_per_overdue_step:.0f} "
        "table requests/s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
