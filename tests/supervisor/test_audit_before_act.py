"""Audit before act, for the operator's intents (retry, skip, compensate, resume): the move and its
audit row are one ledger write, and the watchdog acts only from that write. A write that fails
leaves no audit row and nothing acts on it; an act that fails (the Durable call) happens after the
audit row naming the operator exists, and the next tick carries it out once."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from azure.core.exceptions import ServiceRequestError

from supervisor import operator
from supervisor.watchdog import run_tick
from tests.helpers.durable import RecordingClient
from tests.helpers.rows import NOW, make_step
from workflow_core import clock
from workflow_core.ledger import InstanceStatus, StepStatus
from workflow_core.workflows import get_workflow, version_of

S = StepStatus
IS = InstanceStatus
LATER = NOW + timedelta(minutes=1)
FUTURE = NOW + timedelta(hours=1)  # the set-up's steps are not due: only an operator's move makes them


def resumable(ledger, instance_id, max_resumes=3):
    """A Failed instance (its scheduler gave up) with one failed step."""
    record = ledger.create_instance(
        instance_id,
        "provision-tenant",
        actor="test",
        input_json="{}",
        scheduler_deadline=NOW,
        max_resumes=max_resumes,
        version=version_of(get_workflow("provision-tenant")),
    )
    ledger.transition_instance(record, InstanceStatus.FAILED, actor="test", reason="gave up")
    return make_step(ledger, instance_id, S.FAILED, last_error="flaky", deadline=FUTURE)


INTENTS = {
    # action: (set-up, the operator's call)
    "retry": (
        lambda ledger, iid: make_step(ledger, iid, S.FAILED, last_error="flaky", deadline=FUTURE),
        lambda ledger, iid: operator.retry_step(ledger, iid, "create_storage", user="alice", reason="why"),
    ),
    "skip": (
        lambda ledger, iid: make_step(ledger, iid, S.TIMED_OUT, deadline=FUTURE),
        lambda ledger, iid: operator.skip_step(ledger, iid, "create_storage", user="alice", reason="why"),
    ),
    "compensate": (  # of an instance that succeeded: its record cannot move, the step's start decides
        lambda ledger, iid: make_step(ledger, iid, S.SUCCEEDED, deadline=FUTURE, instance=IS.SUCCEEDED),
        lambda ledger, iid: operator.request_compensation(
            ledger, iid, "create_storage", user="alice", reason="why"
        ),
    ),
    "resume": (
        resumable,
        lambda ledger, iid: operator.resume_instance(ledger, iid, actor="operator:alice", reason="why"),
    ),
}
# An operator's resume is not bound by the resume budget: with none left, a failed act must not turn
# it into the policy's compensation.
INTENTS["resume-with-no-budget"] = (
    lambda ledger, iid: resumable(ledger, iid, max_resumes=0),
    INTENTS["resume"][1],
)
EXPECTED = {"retry": "result:create_storage:1", "compensate": "compensation_orchestrator"}


def operator_rows(ledger, instance_id):
    return [a for a in ledger.audit_trail(instance_id) if a.actor == "operator:alice"]


def durable_calls(client, instance_id):
    return [e for e in client.events if e[0] == instance_id] + [
        s for s in client.starts if s[1] and s[1].startswith(instance_id)
    ]


@pytest.mark.parametrize("action", ["retry", "skip", "compensate", "resume"])
def test_a_failed_write_leaves_no_audit_row_and_nothing_acts(ledger, services, monkeypatch, action):
    set_up, act = INTENTS[action]
    iid = f"aba-w-{action}"
    with clock.use_clock(lambda: NOW):
        before = set_up(ledger, iid)
    table = ledger._steps
    real = table.submit_transaction

    def unreachable(operations, **kwargs):
        raise ServiceRequestError("the storage account did not answer")

    monkeypatch.setattr(table, "submit_transaction", unreachable)
    with clock.use_clock(lambda: LATER), pytest.raises(ServiceRequestError):
        act(ledger, iid)
    monkeypatch.setattr(table, "submit_transaction", real)

    assert operator_rows(ledger, iid) == []
    assert ledger.get(iid, "create_storage").status is before.status
    client = RecordingClient({iid: "Completed"})
    asyncio.run(run_tick(client, services, now=LATER + timedelta(seconds=1)))
    assert durable_calls(client, iid) == []  # the watchdog found no intent to act on


class FailingOnce(RecordingClient):
    """The Durable client's first raise_event / start_new fails (the task hub was unreachable)."""

    failed = 0

    async def raise_event(self, *args, **kwargs):
        if not self.failed:
            self.failed += 1
            raise RuntimeError("the task hub is unreachable")
        return await super().raise_event(*args, **kwargs)

    async def start_new(self, *args, **kwargs):
        if not self.failed:
            self.failed += 1
            raise RuntimeError("the task hub is unreachable")
        return await super().start_new(*args, **kwargs)


@pytest.mark.parametrize("action", ["retry", "compensate", "resume", "resume-with-no-budget"])
def test_an_act_that_fails_is_already_audited_and_the_next_tick_carries_it_out_once(ledger, services, action):
    set_up, act = INTENTS[action]
    iid = f"aba-a-{action}"
    with clock.use_clock(lambda: NOW):
        set_up(ledger, iid)
    with clock.use_clock(lambda: LATER):
        act(ledger, iid)
    (row,) = operator_rows(ledger, iid)
    assert row.reason == f"operator {action.split('-')[0]}: why"

    client = FailingOnce({iid: "Running" if action == "retry" else "Completed"})
    ticks = [LATER + timedelta(seconds=1) + timedelta(minutes=10) * n for n in range(4)]  # past each lease
    for at in ticks:
        asyncio.run(run_tick(client, services, now=at))
        assert len(operator_rows(ledger, iid)) == 1  # the intent stays recorded, once

    assert client.failed == 1
    (call,) = durable_calls(client, iid)  # carried out once
    assert call[1] == EXPECTED.get(action, iid) or call[0] == EXPECTED.get(action), call
    if action.startswith("resume"):
        assert call[0] == "workflow_orchestrator", call  # resumed, not compensated
