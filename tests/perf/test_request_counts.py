"""Storage requests per operation of the pattern, pinned: a change that adds a round trip fails here.

The figures come from ``tests.helpers.request_scenarios`` (the same measurement ``bench/requests_per_step.py``
prints), counted at the SDK's transport by ``tests.helpers.request_counter`` on a real Azurite. They are
today's costs, not targets: when a write path gets cheaper, lower its row in ``EXPECTED`` (and
``EXPECTED_PER_OVERDUE_STEP``) in the same change. A row that goes *up* needs a reason in the commit.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.helpers import request_counter as rc
from tests.helpers.request_counter import RequestCounter, pattern_operation
from tests.helpers.request_scenarios import step_operations, watchdog_tick
from workflow_core.runtime import Services, set_services
from workflow_core.settings import StorageConnection, load_settings

# One driven three-step workflow (provision-tenant), one message per receive. Requests per step of
# each operation, except the per-workflow row (once per workflow) and the heartbeat (the first step's
# agent asks for more time once). The example agent's own effect is counted apart and excluded.
EXPECTED: dict[str, float] = {
    rc.START: 1,  # per workflow: the HTTP starter checks the ledger for the instance id
    # per workflow: one batch (the instance record + audit, and the steps: marker + Pending rows +
    # audit), its index row, its listing row. The orchestration creates no steps (create_workflow_steps
    # runs only for workflows too long for that batch and for restarted schedulers without a state).
    rc.HTTP_API: 3,
    # batch Dispatched + audit + instance + the delete of the previous success's basis row, unread
    # (the starter's step ETag, the instance snapshot of the previous success as the worker recorded
    # it); send (the send is not recorded: the Dispatched write before it implies it). No index row:
    # the instance's row watches the step
    rc.DISPATCH: 2,
    # batch Running + audit + the claim-key row's delete, against the rows the message carries (no
    # read: contracts.WorkVersions)
    rc.WORKER_CLAIM: 1,
    # batch Succeeded + audit + instance with the claim's ETags + the basis row's insert (no index
    # row to delete)
    rc.WORKER_RECORD: 1,
    rc.REPLY: 1,  # send to the result queue
    rc.QUEUE_RECEIVE: 2,  # work and result message, one receive each (unbatched)
    rc.QUEUE_DELETE: 2,  # work and result message
    # (rc.RESULT_HANDLER: 0) a success keyed by a basis row is raised unread; the scheduler's next
    # write proves it (contracts.ResultBasis)
    rc.HEARTBEAT: 1,  # per workflow here: create_storage's agent heartbeats once (one read gives the
    # row and the service's clock; the extension is written only when due)
}
PER_WORKFLOW = {rc.START, rc.HTTP_API, rc.HEARTBEAT}
# verify read; new index row; one batch that is both the claim and the decision (TimedOut + audit)
EXPECTED_PER_OVERDUE_STEP = 3
EXPECTED_DETECTION_PER_TICK = 2  # one range query each on the steps' and the instances' deadline index rows


def expected_total(steps: int) -> float:
    return sum(n if label in PER_WORKFLOW else n * steps for label, n in EXPECTED.items())


@pytest.fixture
def counted(azurite, unique_name):
    """A counter installed before the services are built (the hook wraps clients as they are made)."""
    env = {
        "AzureWebJobsStorage": azurite.connection_string,
        "AGENT_TRANSPORT": "storage-queue",
        "LEDGER_TABLE_NAME": unique_name("steps"),
        "DEADLINE_INDEX_TABLE_NAME": unique_name("idx"),
        "WORK_QUEUE_NAME": unique_name("work"),
        "RESULT_QUEUE_NAME": unique_name("results"),
        "DEAD_LETTER_QUEUE_NAME": unique_name("poison"),
        "WATCHDOG_GRACE_SECONDS": "30",
    }
    with RequestCounter(classify=pattern_operation) as counter:
        services = Services(load_settings(env))
        services.ledger  # noqa: B018 - creates the tables (not measured)
        services.transport  # noqa: B018 - creates the queues
        set_services(services)  # the activity bodies that look services up find these
        try:
            yield counter, services
        finally:
            set_services(None)


def test_requests_per_operation_of_a_three_step_workflow(counted):
    counter, services = counted
    counts = step_operations(services, counter)

    assert counts.steps == 3
    measured = {
        label: (n if label in PER_WORKFLOW else n / counts.steps)
        for label, n in counts.by_operation.items()
        if label != rc.AGENT_EFFECT
    }
    assert measured == EXPECTED, "requests per operation changed; see the module docstring"
    assert counts.total_excluding_effect == expected_total(counts.steps)
    assert counts.effect == 3  # the example agent's own writes: counted, but apart


def test_requests_per_overdue_step_of_a_watchdog_tick(counted):
    counter, services = counted
    tick = watchdog_tick(services, counter, overdue=4)

    assert tick.decisions == 4
    assert tick.detection == EXPECTED_DETECTION_PER_TICK
    assert tick.per_overdue_step == EXPECTED_PER_OVERDUE_STEP
    # the retired index rows go at the end of the tick, one request per index partition they lie in
    assert 1 <= tick.index_cleanup <= 4
    assert tick.total == EXPECTED_DETECTION_PER_TICK + 4 * EXPECTED_PER_OVERDUE_STEP + tick.index_cleanup


def test_requests_per_overdue_step_watched_through_its_instance_row(counted):
    counter, services = counted
    tick = watchdog_tick(services, counter, overdue=4, watched=True)

    assert tick.decisions == 4
    assert tick.detection == EXPECTED_DETECTION_PER_TICK
    # one partition query reads the instance and the steps its row watches; one batch claims and
    # decides. No index row is written or retired (the instance row moves on lazily, a later tick)
    assert tick.per_overdue_step == 2
    assert tick.index_cleanup == 0
    assert tick.total == EXPECTED_DETECTION_PER_TICK + 4 * 2


def test_the_counter_sees_each_request_with_its_operation_and_table(counted):
    counter, services = counted
    ledger = services.ledger
    with counter.measure() as made, counter.scope("probe"):
        assert ledger.list_for_instance("nobody") == []
    assert [(r.service, r.op, r.resource, r.label) for r in made] == [
        ("table", "query", services.settings.ledger_table, "probe")
    ]


def test_clients_built_after_the_counter_is_removed_are_not_counted(azurite):
    from workflow_core.storage_clients import table_service_client

    counter = RequestCounter().install()
    counter.uninstall()
    service = table_service_client(StorageConnection(connection_string=azurite.connection_string))
    list(service.list_tables())
    service.close()
    assert counter.requests == []


# A step an agent's circuit holds back parks (docs/agent-limits.md): requests of one ask of the gate,
# the first (the step and instance read, the agent's rows read, the wait row's insert, the scheduler's
# promise, the audit note) and each after a park or a wake-up (the same, the wait row refreshed, no note)
EXPECTED_HELD_FIRST_ASK = 5
EXPECTED_HELD_ASK = 4


def test_limits_a_step_parked_behind_an_open_circuit_costs_at_most_six_requests_a_minute(
    counted, monkeypatch, tmp_path
):
    from activities.scheduler.dispatch import dispatch_step
    from tests.activities.test_pool_routing import declare_pools
    from tests.limits.dispatcher import payload
    from tests.limits.support import AGENT, STEP, pending
    from workflow_core.limits.gate import PARK_SECONDS
    from workflow_core.workflows.pools import CircuitSettings, clear_pools_cache

    counter, services = counted
    declare_pools(monkeypatch, tmp_path, f"agents:\n  {AGENT}:\n    circuit: {{failure_threshold: 3}}\n")
    clear_pools_cache()
    try:
        pending(services, "held", promise=timedelta(0))  # each ask moves it
        services.circuits.operator_move(
            AGENT, CircuitSettings(), open_it=True, actor="operator:t", reason="t"
        )
        asks = []
        for held in (None, True):
            with counter.measure() as made:
                answer = dispatch_step({**payload("held", 1), "held": held}, services)
            assert (answer["outcome"], answer["retry_after"]) == ("waiting", PARK_SECONDS) and answer["wake"]
            asks.append(len(made))
    finally:
        clear_pools_cache()
    assert asks == [EXPECTED_HELD_FIRST_ASK, EXPECTED_HELD_ASK]
    assert services.ledger.get("held", STEP).attempt == 0  # no attempt spent
    assert EXPECTED_HELD_ASK * 60 / PARK_SECONDS <= 6


# Whole workflows on the in-process durable host (tests.helpers.request_scenarios.end_to_end): what a
# real run adds to the driven scenario above (the HTTP start and its instance record, settling the
# instance, batched receives). Receives depend on timing (a pump takes up to 16 messages at once), so they are
# bounded, not pinned.
E2E_PER_STEP: dict[str, int] = {
    # batch Dispatched + audit + instance; send. No read: the step's ETag from the starter and the
    # instance's snapshot from the previous result's event (workflow_core/ledger/known_rows.py). No
    # index row: the instance's row watches the step (workflow_core/ledger/watch.py), placed by the
    # starter early enough for every step.
    rc.DISPATCH: 2,
    rc.WORKER_CLAIM: 1,  # unread, as above
    rc.WORKER_RECORD: 1,  # batch Succeeded + audit + instance; no index row to delete
    rc.REPLY: 1,
    rc.QUEUE_DELETE: 2,
    # (rc.RESULT_HANDLER: 0) raised unread, and no orchestrator read: the next dispatch or the settle
    # deletes the success's basis row in its own transaction
}
E2E_PER_WORKFLOW: dict[str, int] = {
    # instance record + audit and the steps (one batch), its index row, its listing row; the
    # orchestration starts at step 0 and creates nothing
    rc.HTTP_API: 3,
    # batch (unread: the last success's snapshot, which watched no step, and its basis row's
    # delete), its index row deleted, its listing row updated
    rc.SETTLE: 3,
    rc.HEARTBEAT: 1,  # provision-tenant's first agent asks for more time once
}
E2E_ONCE = {rc.DEFINITION_STORE: 1}  # the first start of this definition version stores it
# (rc.START: a generated instance id is not looked up; rc.VERIFY_RESULT: never needed here)


def test_requests_of_whole_workflows_end_to_end(azurite):
    from tests.helpers.request_scenarios import end_to_end

    counts = end_to_end(azurite, workflows=2)

    assert counts.steps == 6
    by_operation = dict(counts.by_operation)
    receives = by_operation.pop(rc.QUEUE_RECEIVE, 0)
    expected = {
        **{label: n * counts.steps for label, n in E2E_PER_STEP.items()},
        **{label: n * counts.workflows for label, n in E2E_PER_WORKFLOW.items()},
        **E2E_ONCE,
    }
    assert by_operation == expected, "requests per operation end to end changed; see the module docstring"
    assert 1 <= receives <= 2 * counts.steps  # at most one per message (work + result), shared when batched
    assert counts.effect and not [r for r in counts.counted if r.label is None]


def test_the_capacity_models_defaults_are_the_measured_counts():
    """``bench/capacity.py`` computes its ceilings from defaults written down by hand: they must be
    what the end-to-end run measures now (storage-queue messages aside: the model takes the
    unbatched worst case on purpose), or the published ceilings are stale."""
    import dataclasses
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "capacity.py"
    spec = importlib.util.spec_from_file_location("capacity_model", path)
    assert spec is not None and spec.loader is not None
    capacity = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = capacity  # its dataclasses look their module up
    try:
        spec.loader.exec_module(capacity)
    finally:
        sys.modules.pop(spec.name, None)

    measured = dataclasses.asdict(capacity.measured_cost(workflows=2))
    defaults = dataclasses.asdict(capacity.StepCost())
    measured.pop("queue_messages_per_step")
    assert defaults.pop("queue_messages_per_step") == 6
    assert measured == defaults
