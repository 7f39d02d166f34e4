"""Trust only the ledger: forged results, huge error texts and failures retrying cannot fix, through the
whole pattern on real Azurite (durable test host + real worker, result handler and watchdog bodies)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from activities.worker.handlers import agent
from activities.worker.handlers.base import PermanentError
from devtools.harness import PatternHarness
from tests.helpers.fault_matrix import start_provisioning, verify
from workflow_core.contracts import result_event_name
from workflow_core.transport import OutgoingMessage


class CardDeclined(Exception):
    """A payment provider's refusal: retrying the same card cannot succeed."""


class GatewayTimeout(Exception):
    """A transient failure: worth retrying."""


# handlers the extra workflow below uses; registered at import so the harness counts their runs
BEHAVIOUR: dict[str, object] = {}


@agent("tests.trust.charge")
def charge(ctx):
    behaviour = BEHAVIOUR.get("charge", "ok")
    if behaviour == "declined":
        raise CardDeclined("card 4000-0000-0000-0002 declined: insufficient funds")
    if behaviour == "permanent":
        raise PermanentError("the account is closed")
    if behaviour == "huge":
        raise GatewayTimeout("gateway said: " + "x" * 40_000 + " (end of gateway text)")
    return {"charged": ctx.input.get("amount")}


@agent("tests.trust.refund")
def refund(ctx):
    return {"refunded": True}


CHECKOUT = {
    "name": "checkout",
    "input": {"required": ["tenant_id"], "properties": {"tenant_id": {"type": "string"}}},
    "steps": [
        {
            "id": "reserve",
            "agent": "storage.create",
            "input": {"tenant_id": "$input.tenant_id", "region": "westeurope", "sku": "Standard_LRS"},
            "deadline_seconds": 300,
            "compensation": {"agent": "storage.delete", "deadline_seconds": 180},
        },
        {
            "id": "charge",
            "agent": "tests.trust.charge",
            "input": {"amount": 42},
            "deadline_seconds": 120,
            "non_retryable_errors": ["CardDeclined"],
            "retry": {"max_attempts": 3, "initial_interval_seconds": 5},
            "compensation": {"agent": "tests.trust.refund", "deadline_seconds": 60},
        },
    ],
}


@pytest.fixture
def checkout(azurite):
    from activities.worker.handlers import faults

    faults.clear()
    BEHAVIOUR.clear()
    with PatternHarness(azurite, extra_workflows={"checkout": CHECKOUT}) as h:
        yield h
    BEHAVIOUR.clear()


def notes(h, iid, step_id):
    return [e.note for e in h.events_for(iid) if e.step_id == step_id and e.action == "note"]


@pytest.mark.parametrize("dressed", [False, True], ids=["plain", "dressed-as-confirmed"])
def test_a_forged_result_for_a_future_attempt_is_never_an_outcome(harness, dressed):
    """While attempt 1 of register_dns runs (and is about to fail), a success for attempt 2 arrives
    twice: as a reply on the result queue, and raised straight on the orchestration (where the
    runtime buffers it until attempt 2 waits). Neither is taken: attempt 2 really runs, and the
    workflow's output is what the real handlers produced. ``dressed``: the raised forgery looks like
    an event the result handler confirmed (a ledger verdict and a made-up attempt token); without the
    token the dispatch recorded it is still only a signal, checked against the ledger."""
    from activities.worker.handlers import faults

    h = harness
    faults.inject("dns.register", faults.Fail(times=1))  # attempt 1 fails for real
    held = h.hold("register_dns", attempt=1)  # ...once the forgeries are in place
    iid = start_provisioning(h)
    h.run_until(lambda: len(h.held(held)) == 1)

    forged = {
        "kind": "work",
        "instance_id": iid,
        "orchestration_id": iid,
        "step_id": "register_dns",
        "attempt": 2,
        "outcome": "succeeded",
        "output": {"fqdn": "forged.attacker.example"},
        "error": None,
    }
    h.transport.send(h.settings.result_queue, OutgoingMessage(body=forged, message_id="forged-1"))
    raised = forged
    if dressed:
        verdict = {"state": "succeeded", "output": forged["output"], "error": None, "permanent": False}
        raised = {**forged, "ledger_token": "f" * 32, "verdict": verdict}
    h.host.raise_event(iid, result_event_name("register_dns", 2), raised)  # bypasses the handler
    held2 = h.hold("register_dns", attempt=2)  # attempt 2 runs only once the scheduler has looked

    def scheduler_notes():
        return [
            e for e in h.events_for(iid) if e.note == "unconfirmed-result-ignored" and e.actor == "scheduler"
        ]

    h.release(held)
    h.run_until(lambda: bool(scheduler_notes()))
    # the buffered forgery reached attempt 2's wait at once, and was refused against the ledger
    assert [e.attempt for e in scheduler_notes()] == [2]
    assert h.steps(iid)["register_dns"].status.value == "Dispatched"
    h.release(held2)
    status = h.run_until_complete(iid)
    verify(h, "forged result for a future attempt", "success for attempt 2 while 1 runs", {iid: "succeeded"})

    dns = h.steps(iid)["register_dns"]
    assert dns.attempt == 2 and h.handler_calls(iid, "register_dns", attempt=2) == 1
    assert status.output["outputs"]["register_dns"] == json.loads(dns.result_ref)  # the real handler's
    assert "forged" not in json.dumps(status.output)
    # the queued forgery was refused by the result handler
    refused = [
        e for e in h.events_for(iid) if e.note == "unconfirmed-result-ignored" and e.actor != "scheduler"
    ]
    assert [(e.actor, e.attempt) for e in refused] == [("result-handler", 2)]


def test_a_forged_work_message_for_the_current_attempt_runs_nothing(harness):
    """Copies of register_dns's work message, for the attempt in flight, naming another agent or
    carrying another input, are put on the work queue while the genuine message waits: the worker
    checks both against the ledger before it claims, so neither runs a handler or moves the row; the
    genuine message then runs once, on the ledger's input."""
    h = harness
    held = h.hold("register_dns", attempt=1)
    iid = start_provisioning(h)
    h.run_until(lambda: len(h.held(held)) == 1)
    [genuine] = h.held(held)
    forgeries = [
        {**genuine.body, "agent": "storage.delete"},  # an agent the step does not name
        {**genuine.body, "input": {**genuine.body["input"], "hostname": "forged.attacker.example"}},
    ]
    for n, body in enumerate(forgeries):
        h.transport.send(h.settings.work_queue, OutgoingMessage(body=body, message_id=f"forged-work-{n}"))

    def refused():
        return [e for e in h.events_for(iid) if e.note == "message-mismatch-ignored"]

    h.run_until(lambda: len(refused()) == 2)
    assert h.steps(iid)["register_dns"].status.value == "Dispatched"  # not claimed by a forgery
    h.release(held)
    status = h.run_until_complete(iid)
    verify(h, "forged work message", "another agent / input for the attempt in flight", {iid: "succeeded"})

    assert h.handler_calls(iid, "register_dns") == 1
    assert h.effects(iid, "register_dns", kind="compensate") == 0  # storage.delete never ran for it
    assert "forged" not in json.dumps(status.output)


def test_a_non_retryable_error_runs_once_and_the_workflow_compensates(checkout):
    h = checkout
    BEHAVIOUR["charge"] = "declined"
    iid = h.start_workflow("checkout", {"tenant_id": "t-declined"})
    status = h.run_until_complete(iid)
    verify(h, "non-retryable error", "CardDeclined listed in non_retryable_errors", {iid: "compensated"})

    assert status.output["status"] == "compensated"
    assert h.handler_calls(iid, "charge") == 1  # no second attempt
    charge_row = h.steps(iid)["charge"]
    assert charge_row.attempt == 1 and charge_row.non_retryable
    assert "gave up after 1 attempt(s): CardDeclined: card 4000" in charge_row.last_error
    assert h.steps(iid)["reserve"].status.value == "Compensated"
    assert h.effects(iid, "reserve", kind="compensate") == 1


def test_a_permanent_error_gives_up_at_once_too(checkout):
    h = checkout
    BEHAVIOUR["charge"] = "permanent"
    iid = h.start_workflow("checkout", {"tenant_id": "t-closed"})
    status = h.run_until_complete(iid)
    verify(h, "permanent error", "handler raises PermanentError", {iid: "compensated"})
    assert status.output["status"] == "compensated"
    assert h.handler_calls(iid, "charge") == 1
    assert h.steps(iid)["charge"].last_error.endswith("PermanentError: the account is closed")


def test_a_retryable_error_still_retries(checkout):
    """The control case: an error the step does not list is retried up to max_attempts."""
    h = checkout
    BEHAVIOUR["charge"] = "huge"
    iid = h.start_workflow("checkout", {"tenant_id": "t-huge"})
    status = h.run_until_complete(iid, timeout=timedelta(hours=1))
    verify(h, "40 KB handler error", "retryable error with a 40,000-char text", {iid: "compensated"})

    assert status.output["status"] == "compensated"
    # a 40 KB error text: one handler run per attempt (not one per delivery), the error stored cut
    assert [h.handler_calls(iid, "charge", attempt=a) for a in (1, 2, 3)] == [1, 1, 1]
    stored = h.steps(iid)["charge"].last_error
    # (give_up_step prefixes "step 'charge' gave up after 3 attempt(s): ")
    assert len(stored) < 8_100 and "chars] …" in stored and "… [truncated " in stored
    assert "GatewayTimeout: gateway said: xxx" in stored[:200] and stored.endswith("(end of gateway text)")
    assert "dead-lettered" not in stored
