"""A revived agent with a stale backlog does nothing for given-up attempts, end to end on Azurite.

The welcome step's pool (``mail``) has no agent: its work messages pile up in their queue while the
app, on the harness's virtual clock, gives every attempt up (deadline, retry, deadline) and
compensates the instance. Then the agent comes back and reads the whole backlog. Neither a
message-only agent (which has no ledger to ask: ``expires_at`` is all it has) nor the app's own worker
(what ``sas-agent`` runs) makes the effect for any of them, and the ledger is unchanged by them.

The messages' time-to-live runs on the real clock, an hour here, so the queue still delivers them:
what is tested is the agents' own refusal (``workflow_core.messages.is_expired``), not the transport's.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from activities.worker.agent_worker import process_work_message
from activities.worker.handlers import RemoteEffects, faults
from devtools.harness import PatternHarness
from tests.activities.test_agent_reports import heartbeat, reply
from workflow_core import clock
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


def ledger_state(h: PatternHarness, iids: list[str]) -> list[tuple]:
    rows = [
        (r.step_id, r.status.value, r.attempt, r.owner, r.deadline)
        for i in iids
        for r in h.ledger.list_for_instance(i)
    ]
    return [rows, [len(h.events_for(i)) for i in iids]]


def message_only_agent(h: PatternHarness):
    """An agent with messages only, following docs/agents.md: an expired work message is completed with
    no heartbeat, no effect and no reply; any other makes its effect (once per idempotency key, in the
    remote-effects table the example handlers use) and heartbeats and replies."""
    effects = RemoteEffects.for_services(h.services)

    def handle(body: dict) -> list[dict]:
        if is_expired(WorkMessage.model_validate(body), clock.utcnow()):
            return []
        effects.apply("email", body["idempotency_key"], {"to": body["input"]["to"]})
        return [heartbeat(body), reply(body)]

    return handle


def app_worker(h: PatternHarness, refusals: list[str | None]):
    """The app's worker entry point, as ``sas-agent`` runs it for the pool."""

    def handle(body: dict) -> list[dict]:
        refusals.append(
            process_work_message(body, delivery_count=1, services=h.services, worker_id="revived")
        )
        return []

    return handle


@pytest.mark.parametrize("agent", ["message-only", "sas-agent"])
def test_a_revived_agent_makes_no_effect_for_its_stale_backlog(azurite, agent):
    faults.clear()
    workflows = {"pools": POOLS, "stale-welcome": WELCOME}
    with PatternHarness(azurite, extra_workflows=workflows, hosted_pools=["default"]) as h:
        iids = [h.start_workflow("stale-welcome", {"tenant_id": t}) for t in TENANTS]
        for iid in iids:
            status = h.run_until_complete(iid)
            assert status.output["status"] == "compensated", status.output
            assert h.ledger.get(iid, "send_welcome").attempt == 2  # both attempts given up
            assert h.statuses(iid)["create_storage"] == "Compensated"
        revival = h.now() + timedelta(minutes=10)  # the agent is back after the attempts expired
        h.run_until(lambda: h.now() >= revival)
        before = ledger_state(h, iids)

        refusals: list[str | None] = []
        handle = message_only_agent(h) if agent == "message-only" else app_worker(h, refusals)
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
        assert ledger_state(h, iids) == before
        if agent == "sas-agent":
            assert len(refusals) == len(seen) and all(r and "expired" in r for r in refusals), refusals
    faults.clear()
