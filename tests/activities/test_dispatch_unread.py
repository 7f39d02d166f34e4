"""A first dispatch written against the versions the scheduler carried, without reading the rows.

On Azurite, through the real activities: the unread write must leave exactly the rows a read-first
dispatch leaves, and any version that is no longer current (the step or the instance written since)
must make the dispatch read, so nothing is decided on a stale copy (the fence of a compensating
instance above all).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from activities.replies.results import handle_result
from activities.scheduler import functions as scheduling
from orchestrators.shortcuts import expected_rows
from orchestrators.state import WorkflowStart
from tests.helpers.bodies import CallCounter
from workflow_core import clock
from workflow_core.ledger import InstanceStatus, encode_json
from workflow_core.workflows import get_workflow

WORKFLOW = "provision-tenant"
STEP = "create_storage"
# what differs between two instances dispatched alike: identities, times, the random token
VOLATILE = {
    "instance_id",
    "orchestration_id",
    "etag",
    "attempt_token",
    "created_at",
    "updated_at",
    "started_at",
}


def count_reads(ledger: Any, monkeypatch: pytest.MonkeyPatch) -> CallCounter:
    """Counts the dispatch's ledger reads (the unread path makes none)."""
    return CallCounter(ledger, monkeypatch, "read_step_and_instance")


def start(harness: Any) -> tuple[str, dict[str, Any]]:
    return harness.start_as_the_starter(WORKFLOW)


def payload(
    harness: Any, iid: str, rows: dict[str, Any] | None, instance: dict | None = None, deadline: str = ""
) -> dict:
    definition = get_workflow(WORKFLOW)
    body = harness.dispatch_payload(iid, STEP)
    body["deadline"] = deadline or body["deadline"]
    if rows is not None:
        step = next(s for s in definition.steps if s.id == STEP)
        start = WorkflowStart.of(get_workflow(WORKFLOW), rows=rows)
        body["expected"] = expected_rows(definition, start, step, instance or rows["instance"])
    return body


def comparable(record: Any) -> dict[str, Any]:
    return {k: v for k, v in record.model_dump().items() if k not in VOLATILE}


def test_unread_first_dispatch_leaves_the_rows_a_read_first_one_leaves(harness, monkeypatch):
    unread_iid, rows = start(harness)
    read_iid, _ = start(harness)
    reads = count_reads(harness.ledger, monkeypatch)

    deadline = (clock.utcnow() + timedelta(minutes=1)).isoformat()
    unread = scheduling.dispatch_step(payload(harness, unread_iid, rows, deadline=deadline), harness.services)
    assert reads.calls == 0 and unread["outcome"] == "dispatched" and unread["sent"]
    read = scheduling.dispatch_step(payload(harness, read_iid, None, deadline=deadline), harness.services)
    assert reads.calls == 1 and read["outcome"] == "dispatched"

    ledger = harness.ledger
    a, b = ledger.get(unread_iid, STEP), ledger.get(read_iid, STEP)
    assert comparable(a) == {**comparable(b), "input_ref": a.input_ref}
    assert a.status.value == "Dispatched" and a.attempt == 1 and a.attempt_token == unread["token"]
    assert a.created_at is not None  # the merge kept what the change does not touch
    ia, ib = ledger.get_instance(unread_iid), ledger.get_instance(read_iid)
    per_instance = {"index_key": None, "input_ref": None}  # a nonce in the index row's key; the input
    assert {**comparable(ia), **per_instance} == {**comparable(ib), **per_instance}
    assert ia.input_ref == encode_json({"tenant_id": unread_iid})  # the snapshot left it out; kept
    grace = timedelta(seconds=harness.services.settings.watchdog_grace_seconds)
    assert ia.scheduler_deadline == a.deadline + grace  # the scheduler's promise moved with the step
    trail = [(e.from_status, e.to_status) for e in harness.audit(unread_iid, STEP)]
    assert trail[-1] == ("Pending", "Dispatched")
    [work] = [m for m in harness.work() if m.body["instance_id"] == unread_iid]
    assert work.body["agent"] == a.agent and work.body["attempt"] == 1


def test_an_instance_written_since_its_snapshot_makes_the_dispatch_read(harness, monkeypatch):
    iid, rows = start(harness)
    ledger = harness.ledger
    ledger.update_instance(ledger.get_instance(iid), actor="test", reason="someone else wrote it", stalls=1)
    reads = count_reads(ledger, monkeypatch)

    outcome = scheduling.dispatch_step(payload(harness, iid, rows), harness.services)

    assert reads.calls == 1  # the unread write lost on the instance's ETag, then the rows were read
    assert outcome["outcome"] == "dispatched" and outcome["sent"]
    assert ledger.get(iid, STEP).status.value == "Dispatched"
    assert ledger.get_instance(iid).stalls == 0  # the read-first write, from the row as it is now


def test_a_step_written_since_the_start_makes_the_dispatch_read(harness, monkeypatch):
    iid, rows = start(harness)
    ledger = harness.ledger
    ledger.update(ledger.get(iid, STEP), actor="test", reason="someone else wrote it", owner="operator:ann")
    reads = count_reads(ledger, monkeypatch)

    outcome = scheduling.dispatch_step(payload(harness, iid, rows), harness.services)

    assert reads.calls == 1 and outcome["outcome"] == "dispatched"
    row = ledger.get(iid, STEP)
    assert row.owner == f"agent:{row.agent}" and row.status.value == "Dispatched"


def test_a_compensating_instance_fences_a_dispatch_carrying_an_older_snapshot(harness, monkeypatch):
    """The snapshot still says Running; the ledger says Compensating: nothing is written or sent."""
    iid, rows = start(harness)
    ledger = harness.ledger
    ledger.transition_instance(
        ledger.get_instance(iid),
        InstanceStatus.COMPENSATING,
        actor="supervisor",
        reason="test",
        scheduler_deadline=clock.utcnow() + timedelta(minutes=5),
    )
    reads = count_reads(ledger, monkeypatch)

    outcome = scheduling.dispatch_step(payload(harness, iid, rows), harness.services)

    assert reads.calls == 1
    assert outcome["outcome"] == "not-dispatchable" and not outcome["sent"]
    assert ledger.get(iid, STEP).status.value == "Pending"
    assert not [m for m in harness.work() if m.body["instance_id"] == iid]


def test_a_snapshot_of_another_instance_is_not_written_against(harness, monkeypatch):
    iid, rows = start(harness)
    _, other = start(harness)
    reads = count_reads(harness.ledger, monkeypatch)

    outcome = scheduling.dispatch_step(payload(harness, iid, rows, other["instance"]), harness.services)

    assert reads.calls == 1 and outcome["outcome"] == "dispatched"


def test_the_result_event_carries_the_instance_as_the_handler_read_it(harness, durable_client):
    iid, rows = start(harness)
    scheduling.dispatch_step(payload(harness, iid, rows), harness.services)
    for work in harness.work():
        harness.deliver(work)
    [reply] = harness.results()

    assert asyncio.run(handle_result(reply.body, durable_client, harness.services)) == "raised"

    [(_, _, data)] = durable_client.calls
    record = harness.ledger.get_instance(iid)
    assert data["instance"]["etag"] == record.etag  # the version after the worker's record
    assert data["instance"]["completions"] == record.completions == 1
    assert "input_ref" not in data["instance"]
