"""A successful workflow settled against the instance snapshot the scheduler holds, unread.

On Azurite, through the real result handler (which reads the instance and what its row watches)
and ``settle_instance``: the unread settle leaves what a read-first one leaves, and any version out
of date, or a snapshot whose row still watched a step, makes it read.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from activities.replies.results import handle_result
from activities.scheduler import functions as scheduling
from activities.scheduler.instances import settle_instance
from orchestrators.shortcuts import expected_rows
from orchestrators.state import WorkflowStart
from tests.helpers.bodies import CallCounter
from workflow_core.ledger.instance_list import LIST_PARTITION
from workflow_core.ledger.known_rows import WATCHED_KEY
from workflow_core.workflows import get_workflow

WORKFLOW = "provision-tenant"


def count_reads(ledger: Any, monkeypatch: pytest.MonkeyPatch) -> CallCounter:
    """Counts the settle's read of the instance."""
    return CallCounter(ledger, monkeypatch, "instance_and_watched_steps")


def run_through(harness: Any, durable_client: Any) -> tuple[str, dict[str, Any]]:
    """Every step of a starter-written instance run as the scheduler runs it; the last confirmed
    result's instance snapshot."""
    iid, rows = harness.start_as_the_starter(WORKFLOW)
    definition = get_workflow(WORKFLOW)
    start = WorkflowStart.of(get_workflow(WORKFLOW), rows=rows)
    known = rows["instance"]
    for step in definition.steps:
        body = harness.dispatch_payload(iid, step.id)
        body["expected"] = expected_rows(definition, start, step, known)
        scheduling.dispatch_step(body, harness.services)
        for work in harness.work():
            harness.deliver(work)
        for reply in harness.results():
            asyncio.run(handle_result(reply.body, durable_client, harness.services))
        known = durable_client.calls[-1][2]["instance"]
    return iid, known


def listed_status(harness: Any, iid: str) -> str:
    rows = [r for r in harness.ledger.index_rows() if r["PartitionKey"] == LIST_PARTITION]
    return next(r["ListStatus"] for r in rows if r["InstanceId"] == iid)


def test_a_success_settles_against_the_last_snapshot_without_a_read(harness, durable_client, monkeypatch):
    iid, known = run_through(harness, durable_client)
    assert known[WATCHED_KEY] == []
    before = harness.ledger.get_instance(iid)
    reads = count_reads(harness.ledger, monkeypatch)

    done = settle_instance({"instance_id": iid, "outcome": "succeeded", "expected": known}, harness.services)

    assert reads.calls == 0 and done == {"instance_id": iid, "status": "Succeeded", "changed": True}
    record = harness.ledger.get_instance(iid)
    assert record.status.value == "Succeeded" and record.scheduler_deadline is None
    assert record.index_key is None and record.completed_at is not None
    assert record.input_ref == before.input_ref and record.outcome is not None
    assert not [r for r in harness.ledger.index_rows() if r["_key"] == before.index_key]
    assert listed_status(harness, iid) == "Succeeded"


def test_a_snapshot_out_of_date_or_watching_a_step_makes_the_settle_read(
    harness, durable_client, monkeypatch
):
    iid, known = run_through(harness, durable_client)
    ledger = harness.ledger
    ledger.update_instance(ledger.get_instance(iid), actor="test", reason="someone wrote", stalls=1)
    reads = count_reads(ledger, monkeypatch)

    settle_instance({"instance_id": iid, "outcome": "succeeded", "expected": known}, harness.services)
    assert reads.calls == 1 and ledger.get_instance(iid).status.value == "Succeeded"

    other, known = run_through(harness, durable_client)
    reads.calls = 0
    watching = {**known, WATCHED_KEY: ["create_storage"]}
    settle_instance({"instance_id": other, "outcome": "succeeded", "expected": watching}, harness.services)
    assert reads.calls == 1 and ledger.get_instance(other).status.value == "Succeeded"
