"""Faults in the infrastructure: the storage emulator restarting, the broker refusing a send."""

from __future__ import annotations

from datetime import timedelta

import pytest

from activities.worker.handlers import faults
from devtools.azurite import Azurite
from devtools.harness import PatternHarness
from tests.helpers.fault_matrix import start_provisioning, verify
from workflow_core.transport import TransportError, message_id_for

STEPS = ("create_storage", "register_dns", "send_welcome")


@pytest.fixture
def own_azurite():
    """A dedicated Azurite: this test restarts it, which the session's instance must not see."""
    with Azurite() as instance:
        yield instance


def test_azurite_restarted_mid_workflow(own_azurite):
    """Azurite stops and starts again (same ports, same --location) while a work message waits in
    its queue and the ledger holds a finished and an in-flight step: all of it survives."""
    faults.clear()

    def pause_when_dns_is_dispatched(event):
        if (
            event.step_id == "register_dns"
            and event.to_status == "Dispatched"
            and event.action == "transition"
        ):
            h.pause_agents()

    with PatternHarness(own_azurite, on_event=pause_when_dns_is_dispatched) as h:
        iid = start_provisioning(h)
        # the work message is in the queue (the send is not recorded in the ledger: count it)
        h.run_until(lambda: h.transport.sent_ids[message_id_for(iid, "register_dns", 1)] == 1)
        before = h.steps(iid)

        own_azurite.restart()

        after = h.steps(iid)
        assert {s: r.status for s, r in after.items()} == {s: r.status for s, r in before.items()}
        assert after["create_storage"].result_ref == before["create_storage"].result_ref
        h.resume_agents()
        status = h.run_until_complete(iid)
        verify(
            h,
            "Azurite restarted mid-workflow",
            "stop + start, same --location, work message in queue",
            {iid: "succeeded"},
        )

        assert status.output["status"] == "succeeded"
        assert h.statuses(iid) == dict.fromkeys(STEPS, "Succeeded")
        # The message sent before the restart is the one the agent ran, once, on its first delivery.
        assert h.handler_calls(iid, "register_dns") == 1
        assert h.steps(iid)["register_dns"].attempt == 1
        for step in STEPS:
            assert h.effects(iid, step) == 1


@pytest.mark.parametrize("refusals", [1, "all"], ids=["once", "every-try"])
def test_broker_refuses_sends_in_dispatch(harness, refusals):
    """The ledger says Dispatched but the send raised (broker unavailable). One refusal is retried
    inside the activity; when every try of the activity fails, the step is left Dispatched and the
    deadline recovers it (the orchestration's timer retries the step; past the grace the watchdog
    would re-send it once). Either way the workflow completes, with one effect."""
    from activities.scheduler import dispatch

    h = harness
    tries = 1 if refusals == 1 else len(dispatch.SEND_RETRY_DELAYS) + 1
    error = TransportError("Storage queue 'work': could not send: 503 Server Busy")
    h.fail_send("register_dns", attempt=1, exc=error, times=tries)
    iid = start_provisioning(h)
    status = h.run_until_complete(iid)
    verify(
        h,
        f"broker refuses {'one send' if refusals == 1 else 'every send'} in dispatch",
        f"TransportError on {tries} send(s) of register_dns attempt 1",
        {iid: "succeeded"},
    )

    assert status.output["status"] == "succeeded"
    assert h.statuses(iid) == dict.fromkeys(STEPS, "Succeeded")
    assert h.effects(iid, "register_dns") == 1
    send_failed = [e for e in h.events_for(iid) if e.note == "send-failed"]
    if refusals == 1:
        assert send_failed == [] and h.steps(iid)["register_dns"].attempt == 1
        assert h.elapsed() < timedelta(seconds=30)  # no deadline had to pass
    else:
        assert [e.step_id for e in send_failed] == ["register_dns"]
        assert h.elapsed() >= timedelta(seconds=120)  # recovered at the step's deadline
