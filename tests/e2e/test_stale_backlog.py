"""A revived agent with a stale backlog does nothing for given-up attempts, end to end on Azurite.

The welcome step's pool (``mail``) has no agent: its work messages pile up in their queue while the
app, on the harness's virtual clock, gives every attempt up (deadline, retry, deadline) and
compensates the instance. Then the agent comes back and reads the whole backlog. Neither a
message-only agent (a Python stand-in, and the Node.js example as a real ``node`` process) nor the
app's own worker (what ``sas-agent`` runs) makes the effect for any of them.

The messages' time-to-live runs on the real clock, an hour here, so the queue still delivers them.
The app's worker refuses them as expired (``workflow_core.messages.is_expired``, on the app's clock);
a message-only agent reads the wall clock, on which they are not expired (the harness's clock is
virtual), so what stops it is the ledger's answer to its question (a heartbeat naming its answer
queue: ``activities.replies.attempt_status``): not current. The ledger is unchanged but for the audit
rows of those refused heartbeats.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from activities.replies.attempt_status import answer_queue_prefix
from activities.worker.agent_worker import process_work_message
from activities.worker.handlers import RemoteEffects, faults
from devtools.durable_host.clock import VirtualClock
from devtools.harness import PatternHarness
from tests.e2e.node_agent import node_agent, node_env, record_answers
from tests.e2e.test_agent_reports import heartbeat, reply
from tests.helpers.fault_matrix import storage_queue_only
from tests.transport.test_message_schemas import validator
from workflow_core.contracts import WorkMessage
from workflow_core.messages import is_expired
from workflow_core.transport import OutgoingMessage

POOLS = "pools:\n  mail:\n    agents: [email.send_welcome]\n    message_only: true\n"
WELCOME = {
    "name": "stale-welcome",
    "input": {"required": ["tenant_id"], "properties": {"tenant_id": {"type": "string"}}},
    "steps": [
        {
            "id": "create_storage",
            "agent": "storage.create",
            "input": {"tenant_id": "$input.tenant_id", "region": "westeurope", "sku": "Standard_LRS"},
            "deadline_seconds": 60,
            "compensation": {"agent": "storage.delete", "deadline_seconds": 60},
        },
        {
            "id": "send_welcome",
            "agent": "email.send_welcome",
            "input": {"to": "admin@stale.example", "tenant_id": "$input.tenant_id"},
            "deadline_seconds": 3600,  # the real-clock time-to-live of its messages: they stay queued
            "retry": {"max_attempts": 2, "initial_interval_seconds": 10},
        },
    ],
}
TENANTS = ("stale-a", "stale-b")


def backlog_harness(azurite) -> PatternHarness:
    """The app hosting the default pool only, on a virtual clock that starts at the wall clock's now:
    it runs ahead of the wall clock from there, so the given-up attempts' messages are expired on the
    app's clock and not on the wall clock a message-only agent reads."""
    workflows = {"pools": POOLS, "stale-welcome": WELCOME}
    start = VirtualClock(datetime.now(UTC).replace(microsecond=0))
    return PatternHarness(azurite, extra_workflows=workflows, hosted_pools=["default"], clock=start)


def ledger_rows(h: PatternHarness, iids: list[str]) -> list[tuple]:
    return [
        (r.step_id, r.status.value, r.attempt, r.owner, r.deadline)
        for i in iids
        for r in h.ledger.list_for_instance(i)
    ]


def audit(h: PatternHarness, iids: list[str]) -> list:
    return [e for i in iids for e in h.events_for(i)]


def ask(h: PatternHarness, work: dict, queue: str) -> dict | None:
    """docs/agents.md: before an effect, heartbeat naming the answer queue and wait (bounded) for the
    answer with this question's ``correlation_id``; the app's handlers run meanwhile, on the spot (the
    virtual clock does not move)."""
    correlation = uuid.uuid4().hex
    beat = heartbeat(work, answer_queue=queue, correlation_id=correlation)
    h.transport.send(h.settings.result_queue, OutgoingMessage(body=beat, message_id=uuid.uuid4().hex))
    until = time.monotonic() + 30
    while time.monotonic() < until:
        h.host.run_until_idle()
        for message in h.transport.receive(queue, max_messages=32, lock_seconds=30):
            h.transport.complete(message)
            if message.body.get("correlation_id") == correlation:
                assert list(validator("attempt-status").iter_errors(message.body)) == [], message.body
                return message.body
        time.sleep(0.05)
    return None


def message_only_agent(h: PatternHarness, asked: list[dict]):
    """An agent with messages only, following docs/agents.md: an expired work message (by its own clock,
    the wall clock, on which these are not expired: the harness's clock is virtual) is completed with
    no heartbeat, no effect and no reply; any other is asked about first (a heartbeat with an answer
    queue), and only an attempt the answer calls current makes its effect (once per idempotency key, in
    the remote-effects table the example handlers use) and replies; no answer: left for a redelivery."""
    effects = RemoteEffects.for_services(h.services)
    queue = f"{answer_queue_prefix(h.services)}{uuid.uuid4().hex[:8]}"
    h.transport.ensure_queues(queue)

    def handle(body: dict) -> list[dict]:
        if is_expired(WorkMessage.model_validate(body), datetime.now(UTC)):
            return []
        answer = ask(h, body, queue)
        assert answer is not None, "no answer within 30 s"
        asked.append(answer)
        if not answer["current"]:
            return []
        effects.apply("email", body["idempotency_key"], {"to": body["input"]["to"]})
        return [reply(body)]

    return handle


def app_worker(h: PatternHarness, refusals: list[str | None]):
    """The app's worker entry point, as ``sas-agent`` runs it for the pool."""

    def handle(body: dict) -> list[dict]:
        refusals.append(
            process_work_message(body, delivery_count=1, services=h.services, worker_id="revived")
        )
        return []

    return handle


def gave_up(h: PatternHarness) -> list[str]:
    """Both instances run until the app gave every welcome attempt up and compensated, then the clock
    moves on past the attempts' expiry: the agent comes back then."""
    iids = [h.start_workflow("stale-welcome", {"tenant_id": t}) for t in TENANTS]
    for iid in iids:
        status = h.run_until_complete(iid)
        assert status.output["status"] == "compensated", status.output
        assert h.ledger.get(iid, "send_welcome").attempt == 2  # both attempts given up
        assert h.statuses(iid)["create_storage"] == "Compensated"
    revival = h.now() + timedelta(minutes=10)
    h.run_until(lambda: h.now() >= revival)
    return iids


def only_refused_beats(before: list, after: list, count: int) -> None:
    """What a refused question leaves in the ledger: one audit row per heartbeat, nothing else."""
    added = Counter((e.actor, e.note or e.action, e.step_id) for e in after)
    added.subtract(Counter((e.actor, e.note or e.action, e.step_id) for e in before))
    assert +added == Counter({("result-handler", "agent-report-refused", "send_welcome"): count}), added


@pytest.mark.parametrize("agent", ["message-only", "sas-agent"])
def test_a_revived_agent_makes_no_effect_for_its_stale_backlog(azurite, agent):
    faults.clear()
    with backlog_harness(azurite) as h:
        iids = gave_up(h)
        rows, events = ledger_rows(h, iids), audit(h, iids)

        refusals: list[str | None] = []
        asked: list[dict] = []
        handle = message_only_agent(h, asked) if agent == "message-only" else app_worker(h, refusals)
        queue = f"{h.settings.work_queue}-mail"
        seen: list[dict] = []
        while batch := h.transport.receive(queue, max_messages=8, lock_seconds=30):  # the revived agent
            for message in batch:
                seen.append(message.body)
                for body in handle(message.body):
                    h.transport.send(
                        h.settings.result_queue, OutgoingMessage(body=body, message_id=uuid.uuid4().hex)
                    )
                h.transport.complete(message)
        later = h.now() + timedelta(minutes=2)  # replies handled, watchdog ticks: whatever follows
        h.run_until(lambda: h.now() >= later)

        stale = {(w["instance_id"], w["attempt"]) for w in seen}
        assert stale == {(iid, n) for iid in iids for n in (1, 2)}, seen  # the whole backlog was read
        effects = RemoteEffects.for_services(h.services)
        assert [w for w in seen if effects.get("email", w["idempotency_key"]) is not None] == []
        assert ledger_rows(h, iids) == rows
        if agent == "sas-agent":
            assert audit(h, iids) == events
            assert len(refusals) == len(seen) and all(r and "expired" in r for r in refusals), refusals
        else:  # every one asked, and the ledger's answer stopped it
            assert [(a["current"], a["attempt"]) for a in asked] == [(False, w["attempt"]) for w in seen]
            only_refused_beats(events, audit(h, iids), len(seen))
    faults.clear()


@storage_queue_only
def test_the_revived_node_agent_asks_and_makes_no_effect_for_its_stale_backlog(azurite, tmp_path):
    """The Node.js example (a real ``node`` process), revived after the app gave up and compensated:
    its messages are not expired on the wall clock, so it is the ledger's answer that stops it."""
    faults.clear()
    with backlog_harness(azurite) as h:
        iids = gave_up(h)
        rows, events = ledger_rows(h, iids), audit(h, iids)
        answers = record_answers(h)
        env = node_env(
            azurite.connection_string,
            h.settings,
            "mail",
            MAIL_OUTBOX=str(tmp_path / "outbox"),
            HEARTBEAT_SECONDS="600",
        )
        queue = f"{h.settings.work_queue}-mail"
        with node_agent(env, tmp_path / "agent.log") as agent:
            until = time.monotonic() + 60
            while len(answers) < 4:
                assert time.monotonic() < until, (tmp_path / "agent.log").read_text()
                assert agent.poll() is None, (tmp_path / "agent.log").read_text()
                h.host.run_until_idle()  # the app's handlers, on the spot: the virtual clock stays
                time.sleep(0.05)
            time.sleep(1)  # what the agent would do after its last answer, it has done
            h.host.run_until_idle()
        text = (tmp_path / "agent.log").read_text()

        assert not (tmp_path / "outbox").exists() or list((tmp_path / "outbox").iterdir()) == [], text
        got = sorted((a["instance_id"], a["attempt"], a["current"]) for _, a in answers)
        assert got == sorted((iid, n, False) for iid in iids for n in (1, 2)), (got, text)
        for _, body in answers:
            assert list(validator("attempt-status").iter_errors(body)) == [], body
        assert text.count("is not current") == 4, text
        assert h.transport.receive(queue, max_messages=8, lock_seconds=1) == []  # all completed
        assert ledger_rows(h, iids) == rows
        only_refused_beats(events, audit(h, iids), 4)  # no reply was recorded, nothing claimed
    faults.clear()
