"""The Node.js example agent (``examples/node-agent``, a real ``node`` process) serves the recovery
canary of the message-only pool it runs in (``sas-canary-echo``, through the conformance echo contract)
on Azurite, next to the app's scheduler, result handler and watchdog: the ``retry`` run (its probe's
first attempt fails, the retry succeeds) and the ``compensate`` run (the finish step fails for good, the
probe is compensated) both pass their verdicts, and every message it sends validates against the
published schemas (``permanent: true`` included)."""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import time
import uuid
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from azure.core.exceptions import ResourceNotFoundError
from azure.storage.queue import QueueClient

from devtools.harness import PatternHarness
from supervisor.canary import verify_runs
from supervisor.canary.runs import start_canary_run
from tests.e2e.node_agent import node_agent, node_env
from tests.helpers.fault_matrix import storage_queue_only
from tests.transport.test_message_schemas import validator

REF = {"$blob": "sha256:" + "0" * 64, "size": 12}  # a payload stored by reference: unreadable to it
EDGE = "pools:\n  edge:\n    message_only: true\n    canary: true\n"


@storage_queue_only
def test_the_node_agent_passes_the_retry_and_compensate_canaries_of_its_pool(azurite, tmp_path):
    pools = {"extra_workflows": {"pools": EDGE}, "hosted_pools": ["default"]}
    with PatternHarness(azurite, clock="real", **pools) as h:  # no in-process worker reads pool edge
        reports: list[dict] = []
        handle = h._result_handler

        def recording(message):
            reports.append(message.body)
            return handle(message)

        h._result_handler = recording
        env = node_env(azurite.connection_string, h.settings, "edge")
        with node_agent(env, tmp_path / "agent.log"):
            started = {
                s: h.host.run_async(start_canary_run(h.host.client, h.services, s, "edge"))
                for s in ("compensate", "retry")
            }
            for iid in started.values():
                h.run_until(
                    lambda iid=iid: (
                        h.ledger.get_instance(iid).status.value not in ("Running", "Compensating")
                    ),
                    timeout=timedelta(seconds=60),
                )
        verdicts = {v.scenario: v for v in verify_runs(h.ledger, watchdog_period=30, grace=30, now=h.now())}
        for scenario, iid in started.items():
            assert h.ledger.get_instance(iid).workflow == "sas-canary-echo"
            verdict = verdicts[scenario]
            assert verdict.instance_id == iid and verdict.outcome == "passed" and verdict.pool == "edge", (
                verdict
            )
        assert h.statuses(started["compensate"])["probe"] == "Compensated"
    failed = [(b["step_id"], b.get("permanent")) for b in reports if b.get("outcome") == "failed"]
    assert sorted(failed) == [("finish", True), ("probe", None)], reports
    undone = [b["output"] for b in reports if b.get("kind") == "compensate" and b.get("outcome")]
    assert undone == [{"undone": True}], reports
    for body in reports:
        schema = "heartbeat-message" if body.get("type") == "heartbeat" else "result-message"
        assert list(validator(schema).iter_errors(body)) == [], body


@storage_queue_only
def answer(connection: str, beat: dict) -> None:
    """What the app answers an accepted heartbeat that names an answer queue
    (``activities.replies.attempt_status``): this attempt is current."""
    status = {
        "type": "attempt-status",
        **{k: beat[k] for k in ("kind", "instance_id", "step_id", "attempt", "correlation_id")},
        "current": True,
        "status": "Running",
        "deadline": None,
        "reason": "",
    }
    doc = {"envelope": "workflow-message/1", "message_id": uuid.uuid4().hex, "body": status}
    queue = QueueClient.from_connection_string(connection, beat["answer_queue"])
    queue.send_message(base64.b64encode(json.dumps(doc).encode()).decode())


def test_the_node_agent_keeps_each_echo_fault_on_its_own(azurite, tmp_path):
    """Work messages put straight on its queue: ``silent`` and ``heartbeat-then-silent`` get no reply
    (only the claim heartbeat the agent sends before any work, plus the one the fault makes), a fault
    past ``fault_attempts`` is none, an unknown fault fails for good, a compensation is ``undone`` (blob
    references in its pair included: it reads neither); a work input by blob reference is refused for
    good before any question; a message for an agent it does not serve is dead-lettered as
    ``MisroutedMessage`` with nothing sent; every message is settled. The test answers the agent's
    asking heartbeat as the app does (current)."""
    tag = uuid.uuid4().hex[:8]
    work_name, result_name = f"n{tag}-work", f"n{tag}-results"
    work = QueueClient.from_connection_string(azurite.connection_string, work_name)
    poison = QueueClient.from_connection_string(azurite.connection_string, f"{work_name}-poison")
    results = QueueClient.from_connection_string(azurite.connection_string, result_name)
    work.create_queue()
    results.create_queue()
    now = datetime.now(UTC)
    cases = {  # instance id -> (kind, attempt, input)
        "silent": ("work", 1, {"fault": "silent", "value": 1}),
        "beat": ("work", 1, {"fault": "heartbeat-then-silent", "value": 2}),
        "past": ("work", 2, {"fault": "fail", "fault_attempts": 1, "value": 3}),
        "bogus": ("work", 1, {"fault": "explode", "value": 4}),
        "undo": ("compensate", 1, {"input": {"fault": "fail-permanently"}, "output": None}),
        "blob": ("work", 1, REF),
        "blob-undo": ("compensate", 1, {"input": REF, "output": REF}),
        "elsewhere": ("work", 1, {"value": 5}),  # for an agent of another pool
    }
    for iid, (kind, attempt, given) in cases.items():
        body = {
            "kind": kind,
            "instance_id": iid,
            "orchestration_id": iid,
            "step_id": "probe",
            "attempt": attempt,
            "agent": "crm.create_account" if iid == "elsewhere" else "conformance.echo",
            "workflow": "sas-canary-echo",
            "reply_token": secrets.token_hex(32),
            "idempotency_key": f"{iid}:probe",
            "deadline": (now + timedelta(minutes=1)).isoformat(),
            "expires_at": (now + timedelta(minutes=5)).isoformat(),
            "input": given,
        }
        doc = {
            "envelope": "workflow-message/1",
            "message_id": iid,
            "body": body,
            "application_properties": {},
        }
        work.send_message(base64.b64encode(json.dumps(doc).encode()).decode())
    queues = SimpleNamespace(work_queue=work_name, result_queue=result_name)
    env = node_env(azurite.connection_string, queues, "default")
    sent: list[dict] = []
    try:
        with node_agent(env, tmp_path / "agent.log"):
            until = time.monotonic() + 20
            while time.monotonic() < until and (
                len(sent) < 12 or work.get_queue_properties().approximate_message_count
            ):
                for item in results.receive_messages(max_messages=32, visibility_timeout=60):
                    body = json.loads(base64.b64decode(item.content))["body"]
                    sent.append(body)
                    if body.get("answer_queue"):  # it asks before its effect: answer as the app does
                        answer(azurite.connection_string, body)
                time.sleep(0.2)
            time.sleep(1)  # anything more it would send (it must not)
            for item in results.receive_messages(max_messages=32, visibility_timeout=60):
                sent.append(json.loads(base64.b64decode(item.content))["body"])
        parked = [json.loads(base64.b64decode(m.content)) for m in poison.receive_messages(max_messages=32)]
    finally:
        for queue in (work, results, poison):
            with contextlib.suppress(ResourceNotFoundError):
                queue.delete_queue()
    got = {
        iid: sorted(b.get("type") or b["outcome"] for b in sent if b["instance_id"] == iid) for iid in cases
    }
    assert got == {
        "silent": ["heartbeat"],  # the claim only
        "beat": ["heartbeat", "heartbeat"],
        "past": ["heartbeat", "succeeded"],
        "bogus": ["failed", "heartbeat"],
        "undo": ["heartbeat", "succeeded"],
        "blob": ["failed"],  # refused before any question: no claim, no effect
        "blob-undo": ["heartbeat", "succeeded"],
        "elsewhere": [],  # no heartbeat (no claim), no reply
    }, sent
    replies = {b["instance_id"]: b for b in sent if b.get("outcome")}
    assert replies["past"]["output"] == {"echo": 3} and replies["undo"]["output"] == {"undone": True}
    assert replies["bogus"]["permanent"] is True and "fault must be one of" in replies["bogus"]["error"]
    assert replies["blob"]["permanent"] is True and "blob reference" in replies["blob"]["error"]
    assert replies["blob-undo"]["output"] == {"undone": True}
    [misrouted] = parked
    assert misrouted["dead_letter_reason"] == "MisroutedMessage"
    assert misrouted["body"]["instance_id"] == "elsewhere"
    assert "'crm.create_account' is not served by pool 'default'" in misrouted["dead_letter_description"]
    for body in sent:
        schema = "heartbeat-message" if body.get("type") == "heartbeat" else "result-message"
        assert list(validator(schema).iter_errors(body)) == [], body
