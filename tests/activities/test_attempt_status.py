"""A message-only agent asks whether its attempt is still current: a heartbeat naming an
``answer_queue`` is answered there (``activities.replies.attempt_status``), on Azurite.

The heartbeats go through the result handler as a message-only agent's would; the answers are read
from real queues and validated against ``docs/schemas/attempt-status.schema.json``."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from activities import handle_result
from activities.replies.attempt_status import REFUSED_ANSWER, answer_queue_prefix
from activities.scheduler import functions as scheduling
from activities.worker.agent_worker import process_work_message
from tests.helpers.request_counter import RequestCounter
from tests.transport.test_message_schemas import validator
from workflow_core.ledger import StepStatus as S
from workflow_core.ledger.parking import parked_messages
from workflow_core.runtime import Services

# A message-only agent's later heartbeat today (not a target): the token check's read, the claim's read
# of the step and its instance, the heartbeat's read (with the service's clock), then the extension: its
# new deadline-index row, the step + audit transaction, the old index row's delete.
PLAIN_HEARTBEAT = [
    ("table", "read"),
    ("table", "query"),
    ("table", "read"),
    ("table", "insert"),
    ("table", "batch"),
    ("table", "delete"),
]
STEP = "create_storage"
AGENT = "storage.create"


def heartbeat(work: dict, **changes) -> dict:
    keys = ("kind", "instance_id", "orchestration_id", "step_id", "attempt", "reply_token")
    return {"type": "heartbeat", **{k: work[k] for k in keys}, "seconds": 600, **changes}


@pytest.fixture
def answers(harness):
    """A fresh answer queue, as an agent creates it: ``<RESULT_QUEUE_NAME>-answers-<hex>``."""
    queue = f"{answer_queue_prefix(harness.services)}{uuid.uuid4().hex[:8]}"
    harness.transport.ensure_queues(queue)
    return queue


@pytest.fixture
def sent(harness, monkeypatch):
    """Every queue the app sends to from here on (the real send still happens)."""
    queues: list[str] = []
    transport = harness.transport
    real = transport.send

    def send(queue, message):
        queues.append(queue)
        return real(queue, message)

    monkeypatch.setattr(transport, "send", send)
    return queues


def run(coro):
    return asyncio.run(coro)


def dispatched(harness, attempt: int = 1, **kwargs) -> dict:
    instance = harness.start()
    harness.dispatch(instance, STEP, attempt, **kwargs)
    [work] = harness.work()
    return work.body


def the_answer(harness, queue: str) -> dict:
    [message] = harness.drain(queue)
    body = message.body
    assert list(validator("attempt-status").iter_errors(body)) == [], body
    assert message.correlation_id == body["correlation_id"]
    return body


def test_a_current_attempt_is_answered_current_and_the_token_never_travels(harness, durable_client, answers):
    work = dispatched(harness)
    body = heartbeat(work, answer_queue=answers, correlation_id="q-1")
    assert run(handle_result(body, durable_client, harness.services)) == "heartbeat"

    answer = the_answer(harness, answers)
    row = harness.ledger.get(work["instance_id"], STEP)
    assert (row.status, row.owner) == (S.RUNNING, AGENT)  # claimed for the agent
    assert answer == {
        "type": "attempt-status",
        "kind": "work",
        "instance_id": work["instance_id"],
        "step_id": STEP,
        "attempt": 1,
        "current": True,
        "status": "Running",
        "deadline": row.deadline.isoformat(),
        "reason": answer["reason"],
        "correlation_id": "q-1",
    }
    assert "current" in answer["reason"]
    assert work["reply_token"] not in json.dumps(answer) and row.attempt_token not in json.dumps(answer)
    assert durable_client.calls == []  # a heartbeat raises no event


def test_a_heartbeat_without_answer_queue_sends_nothing(harness, durable_client, sent):
    work = dispatched(harness)
    sent.clear()  # the dispatch's own send
    assert run(handle_result(heartbeat(work), durable_client, harness.services)) == "heartbeat"
    assert sent == []


def test_a_stale_attempt_is_answered_not_current(harness, durable_client, answers, vclock):
    work = dispatched(harness, deadline_in=5)
    instance = work["instance_id"]
    vclock.advance(6)
    scheduling.check_step({"instance_id": instance, "step_id": STEP, "attempt": 1}, harness.services)
    retry = {"instance_id": instance, "step_id": STEP, "attempt": 1, "retry_at": vclock.now.isoformat()}
    scheduling.schedule_retry(retry, harness.services)
    harness.dispatch(instance, STEP, 2)
    before = harness.ledger.get(instance, STEP)

    body = heartbeat(work, answer_queue=answers)  # attempt 1's message, revived
    assert run(handle_result(body, durable_client, harness.services)) == "agent-report-refused"

    answer = the_answer(harness, answers)
    assert (answer["current"], answer["attempt"], answer["status"]) == (False, 1, "Dispatched")
    assert answer["correlation_id"] is None and "attempt 2" in answer["reason"]
    after = harness.ledger.get(instance, STEP)
    assert (after.status, after.attempt, after.deadline, after.owner) == (
        before.status,
        before.attempt,
        before.deadline,
        before.owner,
    )


def test_a_finished_attempt_is_answered_not_current(harness, durable_client, answers):
    work = dispatched(harness)
    process_work_message(work, delivery_count=1, services=harness.services, worker_id="w1")
    harness.results()
    body = heartbeat(work, answer_queue=answers, correlation_id="after-the-end")
    assert run(handle_result(body, durable_client, harness.services)) == "agent-report-refused"
    answer = the_answer(harness, answers)
    assert (answer["current"], answer["status"], answer["correlation_id"]) == (
        False,
        "Succeeded",
        "after-the-end",
    )
    assert "no longer in progress" in answer["reason"]


def test_a_wrong_token_is_answered_not_current_and_changes_nothing(harness, durable_client, answers):
    work = dispatched(harness)
    before = harness.ledger.get(work["instance_id"], STEP)
    body = heartbeat(work, reply_token="0" * 64, answer_queue=answers)
    assert run(handle_result(body, durable_client, harness.services)) == "agent-report-refused"
    answer = the_answer(harness, answers)
    assert (answer["current"], answer["status"]) == (False, "Dispatched")
    assert "reply token" in answer["reason"] and "0" * 64 not in json.dumps(answer)
    after = harness.ledger.get(work["instance_id"], STEP)
    assert (after.status, after.owner, after.deadline) == (before.status, before.owner, before.deadline)


def test_no_such_step_is_answered_with_no_status(harness, durable_client, answers):
    work = dispatched(harness)
    body = heartbeat(work, step_id="no_such_step", answer_queue=answers)
    assert run(handle_result(body, durable_client, harness.services)) == "parked"
    answer = the_answer(harness, answers)
    assert (answer["current"], answer["status"], answer["deadline"]) == (False, None, None)
    assert "no known step" in answer["reason"]


@pytest.mark.parametrize("target", ["work", "results", "poison", "foreign"])
def test_an_answer_goes_only_to_an_answers_queue(harness, durable_client, sent, target):
    """A forged heartbeat naming the app's own queues (or any other) gets no answer, anywhere."""
    settings = harness.services.settings
    queue = {
        "work": settings.work_queue,
        "results": settings.result_queue,
        "poison": f"{settings.work_queue}-poison",
        "foreign": f"x{settings.result_queue}-answers-abc",  # the prefix must begin the name
    }[target]
    work = dispatched(harness)
    sent.clear()  # the dispatch's own send
    body = heartbeat(work, answer_queue=queue)
    assert run(handle_result(body, durable_client, harness.services)) == "heartbeat"  # it still counts
    assert sent == []
    assert harness.drain(settings.work_queue) == [] and harness.drain(settings.result_queue) == []
    [note] = [a for a in harness.audit(work["instance_id"], STEP) if a.action == REFUSED_ANSWER]
    assert queue in note.reason and answer_queue_prefix(harness.services) in note.reason
    assert harness.ledger.get(work["instance_id"], STEP).status is S.RUNNING


def test_the_bare_prefix_is_not_an_answer_queue(harness, durable_client, sent):
    work = dispatched(harness)
    sent.clear()  # the dispatch's own send
    body = heartbeat(work, answer_queue=answer_queue_prefix(harness.services).rstrip("-"))
    assert run(handle_result(body, durable_client, harness.services)) == "heartbeat"
    assert sent == []


def test_a_missing_answer_queue_never_fails_the_heartbeat(harness, durable_client, sent, caplog):
    work = dispatched(harness)
    sent.clear()  # the dispatch's own send
    missing = f"{answer_queue_prefix(harness.services)}gone{uuid.uuid4().hex[:6]}"
    body = heartbeat(work, answer_queue=missing)
    assert run(handle_result(body, durable_client, harness.services)) == "heartbeat"
    assert sent == [missing]
    row = harness.ledger.get(work["instance_id"], STEP)
    assert (row.status, row.owner) == (S.RUNNING, AGENT)
    assert any("not delivered" in r.getMessage() and missing in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("answer_queue", "Has-Upper"),
        ("answer_queue", "a--b"),
        ("answer_queue", "ab"),
        ("answer_queue", "a" * 64),
        ("answer_queue", "q/../x"),
        ("answer_queue", 7),
        ("correlation_id", ""),
        ("correlation_id", "x" * 129),
        ("correlation_id", "has space"),
        ("correlation_id", "line\nbreak"),
    ],
)
def test_a_malformed_answer_field_parks_the_heartbeat_unanswered(harness, durable_client, sent, field, value):
    work = dispatched(harness)
    sent.clear()  # the dispatch's own send
    body = heartbeat(work, **{"answer_queue": f"{answer_queue_prefix(harness.services)}ok", field: value})
    assert list(validator("heartbeat-message").iter_errors(body)) != []  # the schema refuses it too
    assert run(handle_result(body, durable_client, harness.services)) == "parked"
    assert sent == []
    reasons = [p.reason for p in parked_messages(harness.ledger)]
    assert any(r.startswith("not a valid heartbeat message:") and field in r for r in reasons), reasons
    assert harness.ledger.get(work["instance_id"], STEP).status is S.DISPATCHED  # nothing claimed


def test_an_answered_heartbeat_costs_one_queue_send_more(harness, durable_client, answers):
    """Pinned: an answer adds one send to a heartbeat's requests, and no ledger request (it is built
    from the rows the heartbeat read and wrote)."""
    work = dispatched(harness)
    with RequestCounter() as counter:
        counted = Services(harness.services.settings)  # clients built while the counter is installed
        counted.ledger, counted.transport  # noqa: B018 - tables and queues made (not measured)
        run(handle_result(heartbeat(work), durable_client, counted))  # the claim
        with counter.measure() as plain:
            run(handle_result(heartbeat(work), durable_client, counted))
        with counter.measure() as asked:
            run(handle_result(heartbeat(work, answer_queue=answers), durable_client, counted))
    ops = [(r.service, r.op) for r in plain]
    assert [(r.service, r.op) for r in asked] == [*ops, ("queue", "send")], (ops, asked)
    assert ops == PLAIN_HEARTBEAT, ops
    assert the_answer(harness, answers)["current"] is True
