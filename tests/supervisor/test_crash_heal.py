"""A crash between "ledger written" and "message sent" is healed by the watchdog: sent exactly once.

The send is not recorded, so the watchdog cannot tell "never sent" from "late": it leaves an
unclaimed Dispatched step to the orchestration's timer within the grace and re-sends it once past it.

Uses the real ``dispatch_step`` activity body with a transport whose send fails (the process "dies"
right after the ledger write), the real storage-queue transport for the watchdog's re-send, and the
real agent worker to show the re-sent message is the one the agent acts on.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest

from supervisor.watchdog import run_tick
from supervisor.watchdog_model import Action
from tests.helpers.app import drain
from tests.helpers.durable import RecordingClient
from tests.helpers.rows import NOW, WORKFLOW
from workflow_core import clock
from workflow_core.contracts import StepDispatch
from workflow_core.ledger import NewStep, StepStatus
from workflow_core.runtime import Services
from workflow_core.transport import message_id_for

S = StepStatus


class SendCrashes:
    """The real transport, except that ``send`` dies before anything reaches the queue."""

    def __init__(self, real) -> None:
        self._real = real
        self.attempts = 0

    def send(self, queue, message) -> None:
        self.attempts += 1
        raise RuntimeError("process died between the ledger write and the send")

    def __getattr__(self, name):
        return getattr(self._real, name)


def _dispatch_payload(instance: str, deadline) -> dict:
    return StepDispatch(
        instance_id=instance,
        orchestration_id=instance,
        workflow=WORKFLOW,
        step_id="create_storage",
        attempt=1,
        deadline=deadline.isoformat(),
        input={"tenant_id": "t1", "region": "westeurope", "sku": "Standard_LRS"},
    ).model_dump()


def test_crash_between_ledger_write_and_send_is_healed_once(services, ledger):
    scheduling = pytest.importorskip("activities.scheduler.functions")
    instance = "wf-crash"
    ledger.create_steps(
        instance,
        WORKFLOW,
        [NewStep(step_id="create_storage", step_name="Create storage", agent="storage.create")],
        actor="scheduler",
    )
    deadline = NOW + timedelta(seconds=300)
    crashing = Services(services.settings)
    crashing.__dict__["ledger"] = ledger
    crashing.__dict__["transport"] = SendCrashes(services.transport)

    with clock.use_clock(lambda: NOW), pytest.raises(RuntimeError, match="process died"):
        scheduling.dispatch_step(_dispatch_payload(instance, deadline), crashing)
    record = ledger.get(instance, "create_storage")
    assert record.status is S.DISPATCHED and record.resent_at is None  # written, never sent
    assert drain(services.transport, services.settings.work_queue) == []

    client = RecordingClient({instance: "Running"})  # the orchestration still waits for it
    early = asyncio.run(run_tick(client, services, now=deadline - timedelta(seconds=1)))
    assert early.overdue == 0  # not before its deadline

    # Within the grace (30 s) the step is only noted: the orchestration's own timer would act.
    within = asyncio.run(run_tick(client, services, now=deadline + timedelta(seconds=1)))
    assert within.count(Action.NOTE_OVERRUN) == 1 and within.count(Action.RESEND) == 0
    assert drain(services.transport, services.settings.work_queue) == []

    healed_at = deadline + timedelta(seconds=31)
    report = asyncio.run(run_tick(client, services, now=healed_at))
    assert report.count(Action.RESEND) == 1
    healed = ledger.get(instance, "create_storage")
    assert healed.status is S.DISPATCHED and healed.resent_at == healed_at

    # The activity runs again (the durable engine retries it after the crash): it sees the
    # watchdog's re-send recorded and does not send again. Later ticks do nothing either.
    with clock.use_clock(lambda: healed_at + timedelta(seconds=1)):
        outcome = scheduling.dispatch_step(_dispatch_payload(instance, deadline), services)
    assert outcome["outcome"] == "already-dispatched" and outcome["sent"] is False
    asyncio.run(run_tick(client, services, now=healed_at + timedelta(seconds=60)))

    messages = drain(services.transport, services.settings.work_queue)
    assert [m.message_id for m in messages] == [message_id_for(instance, "create_storage", 1)]
    assert messages[0].body["attempt"] == 1 and messages[0].body["agent"] == "storage.create"
    assert client.events == [] and client.starts == []

    # The re-sent message has the shape of a first send (a normal dispatch of another instance).
    ledger.create_steps(
        "wf-normal",
        WORKFLOW,
        [NewStep(step_id="create_storage", step_name="Create storage", agent="storage.create")],
        actor="scheduler",
    )
    with clock.use_clock(lambda: NOW):
        scheduling.dispatch_step(_dispatch_payload("wf-normal", deadline), services)
    (normal,) = drain(services.transport, services.settings.work_queue)
    assert messages[0].subject == normal.subject == "storage.create"
    assert messages[0].application_properties.keys() == normal.application_properties.keys()
    # ...less the rows' versions a first send carries for a claim without a read (a re-send is
    # claimed after reading the row)
    assert "ledger" not in messages[0].body and "ledger" in normal.body
    assert messages[0].body.keys() == normal.body.keys() - {"ledger"}
    # per step; the expiry follows the attempt's deadline, which the re-send moved past the heal
    own = ("instance_id", "orchestration_id", "deadline", "expires_at", "reply_token", "idempotency_key")
    assert datetime.fromisoformat(messages[0].body["expires_at"]) > healed_at
    assert {k: v for k, v in messages[0].body.items() if k not in own} == {
        k: v for k, v in normal.body.items() if k not in (*own, "ledger")
    }

    # The agent acts on the healed message like on any other: the step completes and replies.
    worker = pytest.importorskip("activities.worker.agent_worker")
    with clock.use_clock(lambda: healed_at + timedelta(seconds=61)):
        worker.process_work_message(
            messages[0].body, delivery_count=1, services=services, worker_id="worker-t"
        )
    assert ledger.get(instance, "create_storage").status is S.SUCCEEDED
    (reply,) = drain(services.transport, services.settings.result_queue)
    assert reply.body["outcome"] == "succeeded" and reply.body["attempt"] == 1
