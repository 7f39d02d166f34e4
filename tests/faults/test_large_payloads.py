"""Payloads over a ledger property travel by blob reference through the whole pattern: a large step
output reaches the next step's input through the scheduler, a compensator gets the step's large
input and output, and an output over the limit is one recorded failure, not a crash loop. Agents and
the scheduler only ever see values (``workflow_core.payloads``).

The example DNS agent is replaced by one whose answer is large, and the e-mail agent by one that
keeps nothing (the example agents keep their results in a table of their own, whose rows hold no
more than the ledger's)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from activities.worker.handlers import faults
from activities.worker.handlers.base import AGENT_HANDLERS
from tests.helpers.fault_matrix import verify
from workflow_core.payloads import is_reference

FQDN = "h" * 40_000 + ".example.net"  # the DNS agent's answer: over 32,000 characters
PLAN = "p" * 40_000  # the workflow input's free text: over 32,000 characters too


def stored(text: str | None):
    return json.loads(text) if text is not None else None


@pytest.fixture
def large_dns(monkeypatch):
    seen: dict[str, list] = {"register": [], "unregister": [], "welcome": []}

    def register(ctx):
        seen["register"].append(ctx.input)
        return {"fqdn": FQDN, "target": ctx.input["target"]}

    def unregister(ctx):
        seen["unregister"].append(ctx.input)
        return {"undone": True}

    def welcome(ctx):  # the example one keeps the whole e-mail in its effects table: too large there
        seen["welcome"].append(ctx.input)
        return {"sent": True}

    monkeypatch.setitem(AGENT_HANDLERS, "email.send_welcome", welcome)
    monkeypatch.setitem(AGENT_HANDLERS, "dns.register", register)
    monkeypatch.setitem(AGENT_HANDLERS, "dns.unregister", unregister)
    return seen


def start(h):
    return h.start_workflow(
        "provision-tenant", {"tenant_id": "big", "admin_email": "a@b.example", "plan": PLAN}
    )


def test_a_large_output_reaches_the_next_step_and_the_ledger_keeps_references(harness, large_dns):
    h = harness
    iid = start(h)
    h.run_until(lambda: h.ledger.get_instance(iid).status.value != "Running", timedelta(hours=2))

    record = h.ledger.get_instance(iid)
    assert record.status.value == "Succeeded", record.last_error
    assert is_reference(stored(record.input_ref))  # the 40,000-character workflow input
    steps = h.steps(iid)
    dns, welcome = steps["register_dns"], steps["send_welcome"]
    assert is_reference(stored(dns.result_ref))
    assert h.services.payloads.resolve(stored(dns.result_ref))["fqdn"] == FQDN
    # send_welcome's input was built by the scheduler from that output: it got the value
    assert is_reference(stored(welcome.input_ref))
    sent = h.services.payloads.resolve(stored(welcome.input_ref))
    assert sent["hostname"] == FQDN and sent["plan"] == PLAN
    assert large_dns["welcome"] == [sent]  # the agent was handed the value, once
    assert all(s.attempt == 1 for s in steps.values())  # nothing failed on the way
    verify(h, "large output", "register_dns answers 40,000 chars; a 40,000-char input", {iid: "succeeded"})


def test_a_compensator_gets_the_large_output_of_the_step_it_undoes(harness, large_dns):
    h = harness
    faults.inject("email.send_welcome", faults.Fail())  # the last step fails for good: compensate
    iid = start(h)
    h.run_until(lambda: h.ledger.get_instance(iid).status.value == "Compensated", timedelta(hours=2))

    [undo] = large_dns["unregister"]
    assert undo["output"]["fqdn"] == FQDN  # the value, not its reference
    assert undo["input"] == large_dns["register"][0]
    assert not h.ledger.get_instance(iid).needs_attention
    verify(h, "compensation of a large output", "register_dns answers 40,000 chars", {iid: "compensated"})


def test_an_output_over_the_limit_is_the_attempts_failure(harness, monkeypatch):
    h = harness
    monkeypatch.setitem(AGENT_HANDLERS, "dns.register", lambda ctx: {"fqdn": "h" * 1_048_576})
    iid = start(h)
    h.run_until(lambda: h.ledger.get_instance(iid).status.value == "Compensated", timedelta(hours=2))

    dns = h.steps(iid)["register_dns"]
    assert dns.attempt == 3  # each attempt failed once, recorded; then the step gave up
    assert "output is 1,048,5" in dns.last_error and "at most 1,048,576 bytes" in dns.last_error
    verify(h, "output over the limit", "register_dns answers over 1 MiB", {iid: "compensated"})


def test_a_resumed_scheduler_starts_from_the_large_input_and_outputs_it_kept_by_reference(harness, large_dns):
    h = harness
    faults.inject("email.send_welcome", faults.Stall(times=1))  # the first attempt never answers
    iid = start(h)
    h.run_until(lambda: h.steps(iid)["send_welcome"].status.value in ("Dispatched", "Running"))
    h.host.terminate(iid, "killed mid-step")  # the scheduler dies with the large values in its state
    h.run_until(lambda: h.ledger.get_instance(iid).status.value != "Running", timedelta(hours=2))

    record = h.ledger.get_instance(iid)
    assert record.status.value == "Succeeded" and record.resume_count == 1, (record.status, record.last_error)
    # the resumed scheduler rebuilt send_welcome's input from the workflow input and register_dns's
    # output, both read back from their blobs: the retry got the same values
    assert [w["hostname"] for w in large_dns["welcome"]] == [FQDN]
    assert large_dns["welcome"][0]["plan"] == PLAN
    verify(
        h,
        "resume with large payloads",
        "scheduler killed; input and an output by reference",
        {iid: "succeeded"},
    )
