"""One instance through every feature that writes rows (limits slot and wait, circuit, canary
verdict, bulk action, idempotency key, answered heartbeat, payload by reference, parked message,
operator actions), then a purge by the registry: no row of it is left in either table (real
Azurite), and what belongs to another instance stays. While an operator's compensation of a step
is under way the instance is live, and no purge takes it."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

from supervisor import operator
from supervisor.maintenance import bulk
from workflow_core import clock
from workflow_core.ledger import InstanceStatus, NewStep, StepLedger, StepStatus
from workflow_core.ledger.idempotency import IdempotencyKeys
from workflow_core.ledger.parking import park_message
from workflow_core.limits import CircuitStore, Holder, LimitsStore
from workflow_core.limits.rows import read_rows
from workflow_core.workflows.pools import AgentLimits, CircuitSettings

S, IS = StepStatus, InstanceStatus
T0 = datetime(2030, 1, 1, tzinfo=UTC)
IID, AGENT = "every-1", "api.call"


def rows_of(ledger: StepLedger, instance_id: str) -> list[tuple[str, str, str]]:
    """(table, partition, row) of every row keyed by, or naming, the instance in either table."""

    def names(value) -> bool:
        return isinstance(value, str) and (
            value == instance_id
            or value.startswith((f"{instance_id}|", f"{instance_id}~"))
            or value.endswith(f"~{instance_id}")
        )

    found = []
    for name, table in (("ledger", ledger._steps), ("index", ledger._index)):
        for e in table.list_entities():
            if any(names(v) for v in (e["PartitionKey"], e["RowKey"], *e.values())):
                found.append((name, e["PartitionKey"], e["RowKey"]))
    return found


def walk(ledger: StepLedger, step_id: str, *, fail: bool = False):
    row = ledger.get(IID, step_id)
    deadline = clock.utcnow() + timedelta(minutes=5)
    row = ledger.transition(row, S.DISPATCHED, actor="scheduler", deadline=deadline, attempt=row.attempt + 1)
    row = ledger.extend_deadline(row, 120, actor="agent")  # an answered heartbeat
    row = ledger.transition(row, S.RUNNING, actor="agent", deadline=row.deadline)
    if fail:
        return ledger.transition(row, S.FAILED, actor="agent", deadline=row.deadline, last_error="HTTP 503")
    return ledger.transition(row, S.SUCCEEDED, actor="agent")


def test_a_purge_by_the_registry_leaves_no_row_of_the_instance(ledger):
    blob = {"$blob": "sha256/" + "ab" * 32, "size": 2_000_000}  # a payload kept by reference
    with clock.use_clock(lambda: T0):
        ledger.create_instance_with_steps(
            IID,
            "provision-tenant",
            actor="test",
            input_json=json.dumps({"document": blob}),
            scheduler_deadline=T0 + timedelta(hours=1),
            version="provision-tenant@t",
            steps=[NewStep(step_id=s, step_name=s, agent=AGENT) for s in ("a", "b")],
        )
        ledger.create_instance_with_steps(
            "other-1",
            "provision-tenant",
            actor="t",
            input_json="{}",
            scheduler_deadline=T0 + timedelta(hours=1),
            version="provision-tenant@t",
            steps=[NewStep(step_id="a", step_name="a", agent=AGENT)],
        )
    with clock.use_clock(lambda: T0 + timedelta(minutes=1)):
        # limits, admitted before the steps are dispatched (an admitted holder keeps its slot): a slot
        # it holds, a place it waits in (both left behind), another instance's slot
        limits, until = AgentLimits(max_in_flight=2), T0 + timedelta(hours=1)
        for holder in (Holder(IID, "a", 1), Holder("other-1", "a", 1), Holder(IID, "b", 1)):
            LimitsStore(ledger).admit(AGENT, limits, holder, until, clock.utcnow())
        walk(ledger, "a")
        walk(ledger, "b", fail=True)
        operator.retry_step(ledger, IID, "b", user="ana", reason="flaky")  # an operator action
        walk(ledger, "b")
        ledger.transition_instance(ledger.get_instance(IID), IS.SUCCEEDED, actor="scheduler")
        CircuitStore(ledger).operator_move(
            AGENT, CircuitSettings(), open_it=True, actor="operator:ana", reason="outage"
        )
        ledger.note(IID, "*", actor="canary", action="canary-verdict", reason='{"outcome": "passed"}')
        assert (
            IdempotencyKeys(ledger).claim_or_replay(IID, "key-1", "compensate every-1", "operator:ana")
            is None
        )
        park_message(ledger, source="worker", reason="unreadable", body={"instance_id": IID})
        store = bulk.BulkStore(ledger)
        op = store.create(
            "resume", bulk.BulkFilter(), reason="outage over", actor="operator:ana", matched=[IID]
        )
        asyncio.run(bulk.run(store, op, rate_per_second=0))  # skipped: it finished
        assert store.progress(op)["skipped"][0]["instanceId"] == IID
        IdempotencyKeys(ledger).record_answer(IID, "key-1", 200, {})

    with clock.use_clock(lambda: T0 + timedelta(days=40)):
        # an operator compensates a step 40 days later: live until the compensation is done
        operator.request_compensation(ledger, IID, "a", user="ana", reason="refund")
        assert ledger.mark_purging(IID, actor="retention", reason="old") is None
        assert ledger.get_instance(IID).status is IS.SUCCEEDED
        row = ledger.get(IID, "a")
        ledger.transition(row, S.COMPENSATED, actor="compensator")

        before = rows_of(ledger, IID)
        partitions = {p for _, p, _ in before}
        assert {
            IID,
            "list",
            "parked",
            "~idempotency",
            f"~limits~{AGENT}",
            f"~bulk~{op.bulk_id}",
        } <= partitions
        record = ledger.mark_purging(IID, actor="retention", reason="old")
        assert record is not None and record.status is IS.PURGING
        ledger.purge_instance(record, ledger.instance_rows(IID))

    assert rows_of(ledger, IID) == []
    agent = read_rows(ledger.table_client(), AGENT)
    assert [s.holder.instance_id for s in agent.slots.values() if s.holder] == ["other-1"]
    assert agent.circuit.state.value == "open"  # the agent's breaker is no instance's
    assert ledger.find_instance("other-1") is not None


def test_an_action_between_the_purges_read_and_its_mark_voids_the_mark(ledger, monkeypatch):
    with clock.use_clock(lambda: T0):
        ledger.create_instance_with_steps(
            "race-1",
            "provision-tenant",
            actor="test",
            input_json="{}",
            scheduler_deadline=T0 + timedelta(hours=1),
            version="provision-tenant@t",
            steps=[NewStep(step_id="a", step_name="a", agent=AGENT)],
        )
        row = ledger.get("race-1", "a")
        row = ledger.transition(row, S.DISPATCHED, actor="s", deadline=T0 + timedelta(minutes=5), attempt=1)
        row = ledger.transition(row, S.RUNNING, actor="a", deadline=row.deadline)
        ledger.transition(row, S.SUCCEEDED, actor="a")
        ledger.transition_instance(ledger.get_instance("race-1"), IS.SUCCEEDED, actor="s")
    real_read = ledger.instance_rows

    def read_then_an_operator_acts(instance_id):
        rows = real_read(instance_id)  # the purge reads: nothing live yet
        operator.request_compensation(ledger, instance_id, "a", user="ana", reason="refund")
        return rows

    monkeypatch.setattr(ledger, "instance_rows", read_then_an_operator_acts)
    assert ledger.mark_purging("race-1", actor="retention", reason="old") is None
    monkeypatch.undo()
    assert ledger.get_instance("race-1").status is IS.SUCCEEDED
    assert ledger.get("race-1", "a").status is S.COMPENSATING
