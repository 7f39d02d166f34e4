"""Bounded recovery: a compensation that can never finish is restarted a bounded number of times,
then the instance is flagged with the real cause where operators look, and nothing restarts it
until an operator acts. (It was restarted every few virtual minutes, forever, unflagged.) And what
made such loops before, a payload over a ledger property, no longer fails: it goes by reference."""

from __future__ import annotations

import io
import json
import re
from datetime import timedelta

from activities.worker.handlers import faults
from operator_cli.cli import main as sas
from tests.helpers.fault_matrix import verify
from workflow_core.payloads import is_reference

HUGE_REGION = "r" * 30_000  # under a ledger property (32,000 characters): the step input stays inline


def sas_show(h, iid: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    env = h.services.settings
    argv = ["--connection-string", h.azurite.connection_string, "--ledger-table", env.ledger_table]
    assert sas([*argv, "--index-table", env.deadline_index_table, "show", iid], stdout=out, stderr=err) == 0
    return " ".join(out.getvalue().split())


def restarts(h, iid: str) -> list[str]:
    return [d[2] for r in h.tick_reports for d in r.instance_decisions if d[0] == iid]


def test_a_compensation_of_a_huge_input_is_sent_by_reference_and_undoes_the_steps(harness):
    """The 30,000-character region that made every compensation message too large (restarted, then
    flagged): the compensation's input now travels as a blob reference, so the instance compensates
    at once, with no restart and nothing flagged."""
    h = harness
    faults.inject("email.send_welcome", faults.Fail())  # the last step fails for good: compensate
    iid = h.start_workflow(
        "provision-tenant", {"tenant_id": "t-huge", "admin_email": "a@b.example", "region": HUGE_REGION}
    )
    h.run_until(lambda: h.ledger.get_instance(iid).status.value == "Compensated", timedelta(hours=8))

    record = h.ledger.get_instance(iid)
    assert not record.needs_attention, record.attention_reason
    assert restarts(h, iid).count("restart_compensation") == 0
    steps = h.steps(iid)
    assert steps["create_storage"].status.value == "Compensated"
    assert steps["register_dns"].status.value == "Compensated"
    verify(
        h,
        "compensation of a huge input",
        "30,000-char input, last step fails: the compensation message is over 32,000 chars",
        {iid: "compensated"},
    )


def test_a_compensation_that_can_never_be_sent_is_flagged_with_its_cause_not_restarted_forever(harness):
    """Its large input cannot be stored: the payload container is gone (deleted by hand, or never
    provisioned), so every dispatch of the compensation fails the same way. It is restarted a bounded
    number of times, then the instance is flagged with the real cause, and nothing restarts it."""
    h = harness
    faults.inject("email.send_welcome", faults.Fail())  # the last step fails for good: compensate
    h.services.payloads.container.delete_container()  # made (locally) on first use, then removed
    iid = h.start_workflow(
        "provision-tenant", {"tenant_id": "t-huge", "admin_email": "a@b.example", "region": HUGE_REGION}
    )
    # create_storage's compensation message carries its 30,000-character input twice: to a blob
    h.run_until(lambda: h.ledger.get_instance(iid).status.value == "CompensationFailed", timedelta(hours=8))

    record = h.ledger.get_instance(iid)
    assert record.needs_attention
    # the real cause, where operators look: which activity, and what failed
    cause = re.compile(r"dispatch_compensation.*(ContainerNotFound|container does not exist)", re.I)
    assert cause.search(record.attention_reason) and cause.search(record.last_error), record.attention_reason
    assert iid in [r.instance_id for r in h.ledger.list_instances(needs_attention=True)[0]]
    shown = sas_show(h, iid)  # the operator's view shows the whole cause, not a cut note
    assert "Needs attention: compensation gave up" in shown and cause.search(shown)
    decided = restarts(h, iid)
    budget = h.services.settings.max_compensation_restarts
    assert 1 <= decided.count("restart_compensation") <= budget
    assert decided.count("give_up_compensation") == 1
    # the payload is written before any row or message names it: the step never moved
    assert h.steps(iid)["create_storage"].status.value == "Succeeded"
    assert "at step create_storage" in record.attention_reason

    # ...and stays flagged: hours later (24 leases of 300 s), nothing was restarted and the audit
    # trail stopped growing
    trail = len(h.ledger.audit_trail(iid))
    h.host.advance(timedelta(hours=2))
    assert restarts(h, iid).count("restart_compensation") == decided.count("restart_compensation")
    assert len(h.ledger.audit_trail(iid)) == trail
    assert h.ledger.get_instance(iid).status.value == "CompensationFailed"
    verify(
        h,
        "compensation that can never be sent",
        "30,000-char input, last step fails, the payload container is gone",
        {iid: "compensation_failed"},
    )


def test_a_derived_step_input_over_a_ledger_property_runs_to_completion(harness):
    """Each field under the old 32,000-character limit, send_welcome's derived input (45,000
    characters) over it: every dispatch of it failed, the scheduler was resumed, and the instance was
    compensated and flagged. Now the input is stored once in Blob Storage and the ledger row and the
    work message carry its reference: the workflow succeeds, and the agent got the whole input."""
    h = harness
    tenant, email = "t" * 14_000, "e" * 17_000 + "@b.example"
    iid = h.start_workflow("provision-tenant", {"tenant_id": tenant, "admin_email": email})
    h.run_until(lambda: h.ledger.get_instance(iid).status.value != "Running", timedelta(hours=8))

    record = h.ledger.get_instance(iid)
    assert record.status.value == "Succeeded", (record.status, record.last_error)
    assert not record.needs_attention and not record.last_error
    assert restarts(h, iid) == []  # nothing resumed, restarted or compensated
    welcome = h.steps(iid)["send_welcome"]
    assert welcome.attempt == 1
    stored = json.loads(welcome.input_ref)
    assert is_reference(stored) and stored["size"] > 45_000  # the row holds the reference...
    sent = h.services.payloads.resolve(stored)  # ...to the input the agent was given, whole
    assert sent["to"] == email and sent["tenant_id"] == tenant
    verify(
        h,
        "derived step input over a ledger property",
        "each field under 32,000 chars, send_welcome's derived input 45,000",
        {iid: "succeeded"},
    )
