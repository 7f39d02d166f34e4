"""A sequential step's success raised without a ledger read, and proven by the scheduler's next write.

On Azurite, through the real dispatch, worker, result handler and settle: the worker records the
success with a basis row named by its reply's digest (``contracts.ReplyVersions``); the handler
raises such a reply unread; the next dispatch or the settle deletes that row in its own transaction
(``contracts.ResultBasis``), reads when it is missing, and refuses to write when the ledger does not
hold that success.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from activities.replies.results import handle_result
from activities.scheduler import functions as scheduling
from activities.scheduler.instances import settle_instance
from orchestrators.decisions import provisional_outcome
from orchestrators.shortcuts import expected_rows
from orchestrators.state import WorkflowStart
from tests.helpers.bodies import CallCounter, altered_at, json_paths
from workflow_core.contracts import ResultMessage
from workflow_core.ledger import StepStatus
from workflow_core.ledger.known_rows import BASIS_KEY_PREFIX, WATCHED_KEY, basis_row_key
from workflow_core.messages import payload_digest, reply_digest
from workflow_core.workflows import get_workflow

S = StepStatus
WORKFLOW = "provision-tenant"
FIRST, SECOND = "create_storage", "register_dns"


def basis_rows(harness: Any, iid: str) -> list[str]:
    rows = harness.ledger.table_client().query_entities(
        "PartitionKey eq @p and RowKey ge @lo and RowKey lt @hi",
        parameters={"p": iid, "lo": BASIS_KEY_PREFIX, "hi": BASIS_KEY_PREFIX + "~"},
    )
    return [r["RowKey"] for r in rows]


class Scheduler:
    """Dispatches each step as the workflow orchestrator does (provisionally, with the starter's
    versions, then each success's snapshot and basis) and hands replies to the real handler."""

    def __init__(self, harness: Any, client: Any) -> None:
        self.h, self.client = harness, client
        self.iid, rows = harness.start_as_the_starter(WORKFLOW)
        self.definition = get_workflow(WORKFLOW)
        self.start = WorkflowStart.of(get_workflow(WORKFLOW), rows=rows)
        self.known: dict[str, Any] | None = rows["instance"]
        self.basis: dict[str, Any] | None = None

    def dispatch(self, step_id: str, basis: dict[str, Any] | None = None) -> dict[str, Any]:
        body = self.h.dispatch_payload(self.iid, step_id)
        step = self.definition.step(step_id)
        body.update(provisional=True, expected=expected_rows(self.definition, self.start, step, self.known))
        if basis or self.basis:
            body["basis"] = basis or self.basis
        return scheduling.dispatch_step(body, self.h.services)

    def run(self, step_id: str) -> dict[str, Any]:
        """Dispatch, work, reply: the event raised, taken as the orchestrator takes it."""
        assert self.dispatch(step_id)["outcome"] == "dispatched"
        for work in self.h.work():
            self.h.deliver(work)
        for reply in self.h.results():
            asyncio.run(handle_result(reply.body, self.client, self.h.services))
        event = self.client.calls[-1][2]
        taken = provisional_outcome(event, "work", self.iid, step_id, 1)
        assert taken is not None, event
        self.known, self.basis = taken.instance, taken.basis
        return event


def test_a_keyed_success_is_recorded_with_its_basis_row_and_raised_unread(
    harness, durable_client, monkeypatch
):
    run = Scheduler(harness, durable_client)
    reads = CallCounter(harness.ledger, monkeypatch, "read_step_instance_and_watched", "get")

    event = run.run(FIRST)

    assert reads.calls == 0  # neither the worker nor the handler read the ledger
    reply = ResultMessage.model_validate(event)
    assert reply.ledger is not None and "ledger_token" not in event  # as the worker sent it
    assert basis_rows(harness, run.iid) == [basis_row_key(FIRST, reply_digest(reply))]
    record = harness.ledger.get_instance(run.iid)
    assert reply.ledger.etags == {"instance": record.etag}  # the instance as the record left it
    assert reply.ledger.instance[WATCHED_KEY] == []  # its row watches no step in flight now
    assert reply.ledger.instance["completions"] == record.completions == 1
    row = harness.ledger.get(run.iid, FIRST)
    assert row.status is S.SUCCEEDED and reply.output == json.loads(row.result_ref or "null")


def test_the_next_dispatch_proves_the_success_in_its_own_transaction(harness, durable_client, monkeypatch):
    run = Scheduler(harness, durable_client)
    run.run(FIRST)
    reads = CallCounter(harness.ledger, monkeypatch, "read_step_and_instance", "get")

    answer = run.dispatch(SECOND)

    assert answer["outcome"] == "dispatched" and reads.calls == 0
    assert basis_rows(harness, run.iid) == []  # deleted with the Dispatched write
    assert harness.ledger.get(run.iid, SECOND).status is S.DISPATCHED


def test_a_re_run_of_the_dispatch_finds_no_row_and_reads_the_ledger_which_backs_it(harness, durable_client):
    """The durable runtime re-runs an activity whose answer it lost: the row went with the first
    run, so the second reads the step the basis names; the ledger holds that success: it goes on."""
    run = Scheduler(harness, durable_client)
    run.run(FIRST)
    assert run.dispatch(SECOND)["outcome"] == "dispatched"
    harness.work()

    again = run.dispatch(SECOND)

    assert again["outcome"] == "already-dispatched"
    assert [a for a in harness.audit(run.iid, FIRST) if a.action == "provisional-result-refused"] == []


@pytest.mark.parametrize("forged", ["output", "attempt", "digest"])
def test_a_basis_the_ledger_does_not_hold_is_refused_without_a_write(harness, durable_client, forged):
    run = Scheduler(harness, durable_client)
    run.run(FIRST)
    genuine = dict(run.basis or {})
    basis = {
        "output": {**genuine, "output_digest": payload_digest({"account": "mallory"}), "digest": "0" * 64},
        "attempt": {**genuine, "attempt": 2, "digest": "1" * 64},
        # a genuine output under another reply's digest: no row, but the ledger does back the success
        "digest": {**genuine, "digest": "2" * 64},
    }[forged]

    answer = run.dispatch(SECOND, basis)

    if forged == "digest":
        assert answer["outcome"] == "dispatched"  # read, and the ledger holds exactly that output
        return
    assert answer["outcome"] == "basis-refused" and answer["sent"] is False
    assert harness.ledger.get(run.iid, SECOND).status is S.PENDING  # nothing written
    assert harness.work() == []  # nothing sent
    [note] = [a for a in harness.audit(run.iid, FIRST) if a.action == "provisional-result-refused"]
    assert (
        note.reason.startswith("dispatch of 'register_dns' not written") and note.attempt == basis["attempt"]
    )
    assert basis_rows(harness, run.iid) == [basis_row_key(FIRST, genuine["digest"])]  # still there


def test_the_settle_proves_the_last_success_or_refuses_it(harness, durable_client, monkeypatch):
    run = Scheduler(harness, durable_client)
    for step in get_workflow(WORKFLOW).steps:
        run.run(step.id)
    assert len(basis_rows(harness, run.iid)) == 1  # the last success's, for the settle
    assert run.known is not None and run.known[WATCHED_KEY] == []

    forged = {**(run.basis or {}), "output_digest": payload_digest({"forged": True}), "digest": "3" * 64}
    refused = settle_instance(
        {"instance_id": run.iid, "outcome": "succeeded", "expected": run.known, "basis": forged},
        harness.services,
    )
    assert refused["outcome"] == "basis-refused" and refused["changed"] is False
    assert harness.ledger.get_instance(run.iid).status.value == "Running"

    reads = CallCounter(harness.ledger, monkeypatch, "instance_and_watched_steps", "get")
    done = settle_instance(
        {"instance_id": run.iid, "outcome": "succeeded", "expected": run.known, "basis": run.basis},
        harness.services,
    )
    assert done["changed"] is True and reads.calls == 0  # unread: the snapshot and its basis row
    assert harness.ledger.get_instance(run.iid).status.value == "Succeeded"
    assert basis_rows(harness, run.iid) == []


def test_a_keyed_reply_for_an_orchestration_that_is_gone_is_checked_against_the_ledger(
    harness, durable_client
):
    """A resumed scheduler took the attempt over: the reply names the dead orchestration, which the
    event client answers 404. The handler then reads the ledger, as for any reply: the ledger names
    another orchestration, so nothing is raised and the mismatch is audited (the resumed scheduler
    learns the outcome from the ledger at its deadline, as before)."""
    run = Scheduler(harness, durable_client)
    assert run.dispatch(FIRST)["outcome"] == "dispatched"
    for work in harness.work():
        harness.deliver(work)
    [reply] = harness.results()
    row = harness.ledger.get(run.iid, FIRST)
    harness.ledger.update(
        row, actor="test", reason="a resumed scheduler took over", orchestration_id="resumed-1"
    )
    durable_client.answers[run.iid] = 404

    outcome = asyncio.run(handle_result(reply.body, durable_client, harness.services))

    assert outcome == "result-mismatch"
    assert [c[0] for c in durable_client.calls] == [run.iid]  # the unread try, then no other raise
    assert [a.action for a in harness.audit(run.iid, FIRST)][-1] == "result-mismatch"


def test_a_success_claimed_after_a_read_is_keyed_without_what_its_row_watches(harness, durable_client):
    """A redelivery is claimed after a read: the worker no longer knows which steps the instance's
    row watches, so its reply says nothing about them, and a settle on it would read first."""
    run = Scheduler(harness, durable_client)
    assert run.dispatch(FIRST)["outcome"] == "dispatched"
    [work] = harness.work()
    harness.deliver(work, delivery_count=2)
    [reply] = harness.results()

    keyed = ResultMessage.model_validate(reply.body)
    assert keyed.ledger is not None and WATCHED_KEY not in keyed.ledger.instance
    assert basis_rows(harness, run.iid) == [basis_row_key(FIRST, reply_digest(keyed))]


def test_a_step_the_scheduler_does_not_take_unread_gets_a_plain_reply(harness, durable_client, monkeypatch):
    """No ``provisional`` on the dispatch (a group member, a step before a checkpoint): no basis row,
    and the result handler reads the ledger and raises its verdict, as before."""
    run = Scheduler(harness, durable_client)
    body = harness.dispatch_payload(run.iid, FIRST)
    assert scheduling.dispatch_step(body, harness.services)["outcome"] == "dispatched"
    for work in harness.work():
        assert work.body["ledger"]["keyed_reply"] is False
        harness.deliver(work)
    [reply] = harness.results()
    assert "ledger" not in reply.body or reply.body["ledger"] is None
    assert basis_rows(harness, run.iid) == []
    reads = CallCounter(harness.ledger, monkeypatch, "read_step_instance_and_watched")

    asyncio.run(handle_result(reply.body, durable_client, harness.services))

    assert reads.calls == 1 and "ledger_token" in durable_client.calls[-1][2]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pick=st.integers(0, 10_000),
    new=st.one_of(st.integers(-3, 3), st.text(max_size=5), st.booleans(), st.none()),
)
# a malformed ETag once reached the dispatch's transaction, whose 400 escaped the activity
@example(pick=("ledger", "etags", "instance"), new="0")
@example(pick=("ledger", "etags", "instance"), new="*")  # "*" would make an If-Match write unconditional
def test_no_alteration_of_a_keyed_reply_gets_written_on(harness, durable_client, monkeypatch, pick, new):
    """Whatever one value of a keyed success is changed to, on its way to the orchestrator, the next
    dispatch either writes what the genuine reply would have made it write, or nothing at all: an
    unread write lands only for the genuine digest, a read one only for the genuine output.
    ``pick``: the path altered, as an index into the reply's leaves, or the path itself."""
    run = Scheduler(harness, durable_client)
    genuine = run.run(FIRST)
    paths = [p for p in json_paths(genuine) if p[0] not in ("kind", "instance_id", "step_id", "attempt")]
    path = pick if isinstance(pick, tuple) else paths[pick % len(paths)]
    assert path in paths
    altered = altered_at(genuine, path, new)
    assume(altered != genuine)
    taken = provisional_outcome(altered, "work", run.iid, FIRST, 1)
    assume(taken is not None)  # otherwise not taken unread: verified against the ledger as any event
    honest = provisional_outcome(genuine, "work", run.iid, FIRST, 1)
    assert honest is not None and taken.basis is not None and honest.basis is not None
    run.known, run.basis = taken.instance, taken.basis
    reads = CallCounter(harness.ledger, monkeypatch, "read_step_and_instance", "get")

    answer = run.dispatch(SECOND)

    row = harness.ledger.get(run.iid, SECOND)
    if answer["outcome"] == "basis-refused":
        assert row.status is S.PENDING and harness.work() == []
        return
    assert answer["outcome"] == "dispatched" and row.status is S.DISPATCHED
    assert taken.basis["output_digest"] == honest.basis["output_digest"]  # built on the genuine output
    if reads.calls == 0:  # unread: only the genuine reply names the basis row (ETags aside)
        assert taken.basis["digest"] == honest.basis["digest"]
    assert basis_rows(harness, run.iid) in ([], [basis_row_key(FIRST, honest.basis["digest"])])
