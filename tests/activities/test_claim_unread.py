"""A first delivery claimed against the rows its message carries, without reading the ledger.

On Azurite, through the real dispatch and worker: only the unaltered message, on rows nobody wrote
since the dispatch, claims that way (its transaction deletes the claim-key row named by the
message's digest); every other delivery falls back to reading the row, with all its checks.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from activities.scheduler import functions as scheduling
from activities.worker.agent_worker import process_work_message
from activities.worker.handlers import AGENT_HANDLERS
from orchestrators.shortcuts import expected_rows
from orchestrators.state import WorkflowStart
from tests.helpers.bodies import CallCounter, altered_at, json_paths
from workflow_core.contracts import WorkMessage
from workflow_core.ledger import StepStatus
from workflow_core.ledger.known_rows import CLAIM_KEY_PREFIX, claim_row_key
from workflow_core.messages import claim_digest
from workflow_core.workflows import get_workflow

S = StepStatus
WORKFLOW = "provision-tenant"
STEP = "create_storage"


def count_reads(ledger: Any, monkeypatch: pytest.MonkeyPatch) -> CallCounter:
    """Counts the worker's reads of the step (the unread claim makes none)."""
    return CallCounter(ledger, monkeypatch, "read_step_and_instance", "get")


def dispatched(harness: Any) -> tuple[str, Any]:
    """A starter-written instance whose first step was dispatched as the scheduler does; its message."""
    iid, rows = harness.start_as_the_starter(WORKFLOW)
    definition = get_workflow(WORKFLOW)
    body = harness.dispatch_payload(iid, STEP)
    body["expected"] = expected_rows(
        definition, WorkflowStart.of(definition, rows=rows), definition.step(STEP), rows["instance"]
    )
    assert scheduling.dispatch_step(body, harness.services)["outcome"] == "dispatched"
    [work] = harness.work()
    return iid, work


def claim_rows(harness: Any, iid: str) -> list[str]:
    rows = harness.ledger.table_client().query_entities(
        "PartitionKey eq @p and RowKey ge @lo and RowKey lt @hi",
        parameters={"p": iid, "lo": CLAIM_KEY_PREFIX, "hi": CLAIM_KEY_PREFIX + "~"},
    )
    return [r["RowKey"] for r in rows]


def deliver(harness: Any, body: dict[str, Any], delivery_count: int = 1) -> None:
    process_work_message(body, delivery_count=delivery_count, services=harness.services, worker_id="w1")


def test_the_dispatch_writes_the_claim_key_of_the_message_it_sends(harness):
    iid, work = dispatched(harness)
    message = WorkMessage.model_validate(work.body)
    assert message.ledger is not None and set(message.ledger.etags) == {"step", "instance"}
    assert claim_rows(harness, iid) == [claim_row_key(STEP, claim_digest(message))]
    # the attempt's token stays out of every message (contracts.ConfirmedResult)
    assert "attempt_token" not in message.ledger.step
    assert harness.ledger.get(iid, STEP).attempt_token not in str(work.body)


def test_a_first_delivery_claims_and_records_without_reading(harness, monkeypatch):
    iid, work = dispatched(harness)
    reads = count_reads(harness.ledger, monkeypatch)

    deliver(harness, work.body)

    assert reads.calls == 0
    row = harness.ledger.get(iid, STEP)
    assert row.status is S.SUCCEEDED and row.owner == "w1" and row.index_key is None
    assert row.attempt_token is not None and row.input_ref is not None  # merged around, kept
    trail = [(a.from_status, a.to_status) for a in harness.audit(iid, STEP) if a.action == "transition"]
    assert trail == [("Pending", "Dispatched"), ("Dispatched", "Running"), ("Running", "Succeeded")]
    assert harness.ledger.get_instance(iid).completions == 1 and row.completion_seq == 1
    assert claim_rows(harness, iid) == []  # consumed by the claim
    assert [r.body["outcome"] for r in harness.results()] == ["succeeded"]
    assert row.input_ref == harness.ledger.get(iid, STEP).input_ref  # as the dispatch wrote it


def test_the_handler_sees_the_same_step_input_on_either_path(harness, monkeypatch):
    seen: list[dict] = []
    real = AGENT_HANDLERS["storage.create"]

    def spy(ctx):
        seen.append(dict(ctx.step_input))
        return real(ctx)

    monkeypatch.setitem(AGENT_HANDLERS, "storage.create", spy)
    _, work = dispatched(harness)
    deliver(harness, work.body)  # unread
    _, work2 = dispatched(harness)
    deliver(harness, {k: v for k, v in work2.body.items() if k != "ledger"})  # read first
    assert seen == [work.body["input"], work2.body["input"]]


@pytest.mark.parametrize(
    "tamper",
    [
        lambda b: {**b, "input": {**b["input"], "tenant_id": "mallory"}},
        lambda b: {**b, "ledger": {**b["ledger"], "instance": {**b["ledger"]["instance"], "completions": 7}}},
        lambda b: {**b, "ledger": {**b["ledger"], "step": {**b["ledger"]["step"], "owner": "w9"}}},
        # the ETags are outside the digest: the If-Match itself refuses another one
        lambda b: {**b, "ledger": {**b["ledger"], "etags": {**b["ledger"]["etags"], "step": 'W/"forged"'}}},
    ],
    ids=["input", "instance-snapshot", "step-snapshot", "step-etag"],
)
def test_an_altered_message_cannot_claim_unread(harness, monkeypatch, tamper):
    """Its digest names no claim-key row: the claim transaction fails as a whole and the worker reads
    the row, where an altered input is refused and altered snapshots are simply not used."""
    iid, work = dispatched(harness)
    reads = count_reads(harness.ledger, monkeypatch)

    deliver(harness, tamper(work.body))

    assert reads.calls >= 1
    row = harness.ledger.get(iid, STEP)
    if "mallory" in str(tamper(work.body)["input"]):
        assert row.status is S.DISPATCHED  # refused after the read: message-mismatch-ignored
        deliver(harness, work.body)  # the genuine message still claims, unread
        assert claim_rows(harness, iid) == []
    row = harness.ledger.get(iid, STEP)
    assert row.status is S.SUCCEEDED
    assert harness.ledger.get_instance(iid).completions == 1  # never the forged 7 + 1


def test_a_redelivery_or_a_row_written_since_claims_after_a_read(harness, monkeypatch):
    iid, work = dispatched(harness)
    ledger = harness.ledger
    ledger.update(ledger.get(iid, STEP), actor="supervisor", reason="looked at it")  # a new ETag
    reads = count_reads(ledger, monkeypatch)

    deliver(harness, work.body)

    assert reads.calls >= 1 and ledger.get(iid, STEP).status is S.SUCCEEDED
    assert len(claim_rows(harness, iid)) == 1  # left behind by the read claim: harmless

    reads.calls = 0
    deliver(harness, work.body, delivery_count=2)  # the attempt is over: its reply is re-sent
    assert reads.calls >= 1
    assert [r.body["outcome"] for r in harness.results()] == ["succeeded", "succeeded"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_alteration_of_a_message_outside_its_etags_claims_unread(harness, data):
    """Whatever one value of the body is changed to, the message no longer names its claim-key row:
    the digest covers the whole body but the ETags (which the If-Match itself checks)."""
    iid, work = dispatched(harness)
    body = work.body
    paths = [p for p in json_paths(body) if p[:2] != ("ledger", "etags")]
    path = data.draw(st.sampled_from(paths), label="path")
    new = data.draw(st.one_of(st.integers(-3, 3), st.text(max_size=5), st.booleans(), st.none()), label="new")
    original = WorkMessage.model_validate(body)
    key = claim_row_key(STEP, claim_digest(original))
    try:
        altered = WorkMessage.model_validate(altered_at(body, path, new))
    except ValueError:
        return  # not a work message at all: parked before any claim
    unsigned = {"ledger": {"etags"}}
    assume(altered.model_dump(exclude=unsigned) != original.model_dump(exclude=unsigned))  # changed
    assert claim_row_key(STEP, claim_digest(altered)) != key
    assert claim_rows(harness, iid) == [key]
