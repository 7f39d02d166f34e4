"""A message-only agent (no storage rights): its heartbeats and replies on the result queue are
recorded in the ledger by the app, under the reply token of the attempt the ledger holds.

The agent here is a pump of the durable test host that reads the queue of ``email.send_welcome``'s
message-only pool (``MAIL_POOL``, which the harness does not host) and answers with messages only;
everything else is the real app on Azurite."""

from __future__ import annotations

import uuid

import pytest

from activities import handle_result
from tests.helpers.fault_matrix import start_provisioning
from tests.transport.test_message_schemas import validator
from workflow_core.ledger.parking import parked_messages
from workflow_core.transport import OutgoingMessage

AGENT = "email.send_welcome"
MAIL_POOL = "pools:\n  mail:\n    agents: [email.send_welcome]\n    message_only: true\n"


@pytest.fixture
def harness_options():
    """The app hosting the default pool only: the work of pool ``mail`` waits in its own queue."""
    return {"extra_workflows": {"pools": MAIL_POOL}, "hosted_pools": ["default"]}


def mail_queue(h) -> str:
    return f"{h.settings.work_queue}-mail"


def serve(h, queue, answer):
    """Run ``answer(work body) -> [bodies]`` as the agent of ``queue``; the bodies go to the result queue."""
    seen = []

    def pump() -> int:
        received = h.transport.receive(queue, max_messages=8, lock_seconds=30)
        for message in received:
            seen.append(message.body)
            assert list(validator("work-message").iter_errors(message.body)) == []
            for body in answer(message.body):
                schema = "heartbeat-message" if body.get("type") == "heartbeat" else "result-message"
                assert list(validator(schema).iter_errors(body)) == []
                sent = OutgoingMessage(body=body, message_id=uuid.uuid4().hex)
                h.transport.send(h.settings.result_queue, sent)
            h.transport.complete(message)
        return len(received)

    h.host.add_pump(pump, "message-only agent")
    return seen


def heartbeat(work, **changes):
    keys = ("kind", "instance_id", "orchestration_id", "step_id", "attempt", "reply_token")
    return {"type": "heartbeat", **{k: work[k] for k in keys}, "seconds": 600, **changes}


def reply(work, **changes):
    keys = ("kind", "instance_id", "orchestration_id", "step_id", "attempt", "reply_token")
    output = {"message_id": f"mail:{work['instance_id']}:{work['step_id']}"}
    return {**{k: work[k] for k in keys}, "outcome": "succeeded", "output": output, **changes}


def actions(h, iid, step="send_welcome"):
    return [(e.actor, e.action, e.note or e.to_status) for e in h.events_for(iid) if e.step_id == step]


def test_heartbeat_claims_and_extends_and_a_duplicate_reply_is_recorded_once(harness):
    seen = serve(harness, mail_queue(harness), lambda work: [heartbeat(work), reply(work), reply(work)])
    iid = start_provisioning(harness)
    assert harness.run_until_complete(iid).runtime_status.value == "Completed"

    assert len(seen) == 1 and len(seen[0]["reply_token"]) == 64
    row = harness.ledger.get(iid, "send_welcome")
    assert (row.status.value, row.owner) == ("Succeeded", AGENT)
    done = actions(harness, iid)
    assert (AGENT, "transition", "Running") in done  # claimed for the agent by its heartbeat
    assert [a for a in done if a[2] == "Succeeded"] == [(AGENT, "transition", "Succeeded")]  # once
    beats = [e for e in harness.events_for(iid) if e.action == "heartbeat" and e.actor == AGENT]
    events = harness.events_for(iid)
    dispatched = next(e for e in events if e.step_id == "send_welcome" and e.to_status == "Dispatched")
    assert len(beats) == 1 and beats[0].record.deadline > dispatched.record.deadline
    assert harness.host.get_status(iid).output["status"] == "succeeded"


def test_a_report_with_another_attempts_or_a_guessed_token_changes_nothing(harness):
    forged = "0" * 64

    def answer(work):
        return [
            heartbeat(work, reply_token=forged),
            reply(work, reply_token=forged, output={"message_id": "forged"}),
            reply(work, attempt=2),  # a later attempt the ledger never dispatched
            reply(work),
        ]

    serve(harness, mail_queue(harness), answer)
    iid = start_provisioning(harness)
    assert harness.run_until_complete(iid).runtime_status.value == "Completed"

    refused = [a for a in actions(harness, iid) if a[2] == "agent-report-refused"]
    assert len(refused) == 3, refused
    row = harness.ledger.get(iid, "send_welcome")
    assert row.status.value == "Succeeded" and "forged" not in (row.result_ref or "")
    assert not [e for e in harness.events_for(iid) if e.action == "heartbeat" and e.actor == AGENT]


def test_a_malformed_heartbeat_is_parked_with_a_clear_reason(harness):
    body = {"type": "heartbeat", "kind": "work", "instance_id": "i-1", "step_id": "a/b", "attempt": 1}
    outcome = harness.host.run_async(handle_result(body, harness.host.client, harness.services))
    assert outcome == "parked"
    reasons = [p.reason for p in parked_messages(harness.ledger)]
    assert any(r.startswith("not a valid heartbeat message:") and "step_id" in r for r in reasons), reasons
