"""An operator resumes a stranded instance: the intent goes to the ledger, the watchdog enacts it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from devtools.harness import PatternHarness
from supervisor import operator, run_tick
from tests.helpers.fault_matrix import start_provisioning, storage_queue_only
from tests.test_telemetry_instruments import custom_events, events  # noqa: F401 - fixture
from workflow_core import telemetry


@pytest.fixture
def quiet_harness(azurite):
    from activities.worker.handlers import faults

    faults.clear()
    with PatternHarness(azurite, watchdog_every=None) as h:
        yield h
    faults.clear()


@storage_queue_only
def test_operator_resume_of_a_stranded_instance_finishes_it_past_its_policy(quiet_harness, events):  # noqa: F811
    h = quiet_harness
    held = h.hold("register_dns")
    iid = start_provisioning(h)
    # this instance would be compensated by the watchdog on its own: no resumes allowed
    h.ledger.update_instance(h.ledger.get_instance(iid), actor="test", max_resumes=0)
    h.run_until(lambda: len(h.held(held)) == 1)
    h.host.terminate(iid, "killed by a bad deployment")
    h.run_until(lambda: h.host.get_status(iid).runtime_status.value == "Terminated")

    requested = operator.resume_instance(h.ledger, iid, user="alice", reason="DNS fixed, carry on")
    assert requested.owner == "operator:alice"
    report = h.host.run_async(run_tick(h.host.client, h.services))

    assert [(i, a) for i, _, a, _ in report.instance_decisions] == [(iid, "resume_instance")]
    stalled = [
        e.log_record.attributes
        for e in custom_events(events)
        if e.log_record.attributes[telemetry.CUSTOM_EVENT_ATTRIBUTE] == telemetry.INSTANCE_STALLED_EVENT
    ]
    assert [(a["instance_id"], a["action"]) for a in stalled] == [(iid, "resume_instance")]
    h.release(held)
    status = h.run_until_complete(iid, timeout=timedelta(hours=1))
    assert status.output["status"] == "succeeded"
    assert h.handler_calls(iid, "create_storage") == 1
    # each completion took the instance's next completion number, in the completion's transaction
    assert [(s.step_id, s.completion_seq) for s in h.ledger.list_for_instance(iid)] == [
        ("create_storage", 1),
        ("register_dns", 2),
        ("send_welcome", 3),
    ]
    record = h.ledger.get_instance(iid)
    assert (record.status.value, record.resume_count) == ("Succeeded", 1)
    trail = [a.reason for a in h.ledger.audit_trail(iid) if a.actor == "operator:alice"]
    assert trail == ["operator resume: DNS fixed, carry on"]


def test_operator_resume_refuses_a_settled_instance_and_requires_a_reason(quiet_harness):
    h = quiet_harness
    iid = start_provisioning(h)
    h.run_until_complete(iid)
    with pytest.raises(operator.OperatorError, match="Succeeded; only Running, Failed"):
        operator.resume_instance(h.ledger, iid, user="bob", reason="again")
    with pytest.raises(operator.OperatorError, match="reason is required"):
        operator.resume_instance(h.ledger, iid, user="bob", reason=" ")
    with pytest.raises(operator.UnknownInstance):
        operator.resume_instance(h.ledger, "no-such-instance", user="bob", reason="x")
