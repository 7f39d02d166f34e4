"""Bounded recovery: a compensation that can never finish is restarted a bounded number of times,
then the instance is flagged with the real cause where operators look, and nothing restarts it
until an operator acts. (It was restarted every few virtual minutes, forever, unflagged.)"""

from __future__ import annotations

import io
import re
from datetime import timedelta

from activities.handlers import faults
from operator_cli.cli import main as sas
from tests.faults.conftest import verify

HUGE_REGION = "r" * 30_000  # under the starter's 32,000-character field limit


def sas_show(h, iid: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    env = h.services.settings
    argv = ["--connection-string", h.azurite.connection_string, "--ledger-table", env.ledger_table]
    assert sas([*argv, "--index-table", env.deadline_index_table, "show", iid], stdout=out, stderr=err) == 0
    return " ".join(out.getvalue().split())


def restarts(h, iid: str) -> list[str]:
    return [d[2] for r in h.tick_reports for d in r.instance_decisions if d[0] == iid]


def test_a_compensation_that_can_never_be_sent_is_flagged_with_its_cause_not_restarted_forever(harness):
    h = harness
    faults.inject("email.send_welcome", faults.Fail())  # the last step fails for good: compensate
    iid = h.start_workflow(
        "provision-tenant", {"tenant_id": "t-huge", "admin_email": "a@b.example", "region": HUGE_REGION}
    )
    # create_storage's compensation message carries its 30,000-character input twice: over the limit
    h.run_until(lambda: h.ledger.get_instance(iid).status.value == "CompensationFailed", timedelta(hours=8))

    record = h.ledger.get_instance(iid)
    assert record.needs_attention
    # the real cause, where operators look: which activity, which size, which limit
    cause = re.compile(r"dispatch_compensation.*is 6\d{4} characters as JSON; the ledger holds at most 32000")
    assert cause.search(record.attention_reason) and cause.search(record.last_error), record.attention_reason
    assert iid in [r.instance_id for r in h.ledger.instances_needing_attention()]
    shown = sas_show(h, iid)  # the operator's view shows the whole cause, not a cut note
    assert "Needs attention: compensation gave up" in shown and cause.search(shown)
    decided = restarts(h, iid)
    budget = h.services.settings.max_compensation_restarts
    assert 1 <= decided.count("restart_compensation") <= budget
    assert decided.count("give_up_compensation") == 1
    # the step its compensation never reached is in the operators' inbox too, with the cause
    step = h.steps(iid)["create_storage"]
    h.run_until(
        lambda: h.steps(iid)["create_storage"].status.value == "CompensationFailed", timedelta(hours=1)
    )
    assert (iid, "create_storage") in [(s.instance_id, s.step_id) for s in h.ledger.needing_attention()]
    del step

    # ...and stays flagged: hours later, nothing was restarted and the audit trail stopped growing
    trail = len(h.ledger.audit_trail(iid))
    h.host.advance(timedelta(hours=8))
    assert restarts(h, iid).count("restart_compensation") == decided.count("restart_compensation")
    assert len(h.ledger.audit_trail(iid)) == trail
    assert h.ledger.get_instance(iid).status.value == "CompensationFailed"
    verify(
        h,
        "compensation that can never be sent",
        "30,000-char input, last step fails: the compensation message is over the limit",
        {iid: "compensation_failed"},
    )


def test_a_step_input_that_can_never_be_stored_is_not_resumed_again_and_again(harness):
    """Each field under the starter's limit, send_welcome's derived input over it: every dispatch of
    it fails the same way. It was resumed max_resumes times before anything else happened; now one
    resume shows the failure is the same, and the instance is compensated at once, flagged with it."""
    h = harness
    iid = h.start_workflow(
        "provision-tenant", {"tenant_id": "t" * 14_000, "admin_email": "e" * 17_000 + "@b.example"}
    )
    h.run_until(lambda: h.ledger.get_instance(iid).status.value != "Running", timedelta(hours=8))
    h.run_until(lambda: not h.ledger.get_instance(iid).supervised, timedelta(hours=8))

    decided = restarts(h, iid)
    assert decided.count("resume_instance") <= 1, decided  # once, to see the failure again
    record = h.ledger.get_instance(iid)
    # the real cause: which activity, which size, which limit, which step
    cause = re.compile(
        r"dispatch_step.*text of 4\d{4} characters exceeds the ledger's 32000.*at step send_welcome"
    )
    assert record.needs_attention and cause.search(record.last_error or ""), record.last_error
    assert cause.search(record.attention_reason), record.attention_reason
    assert record.status.value == "Compensated", record.status  # create_storage, register_dns undone
    verify(
        h,
        "step input that can never be stored",
        "each field under the limit, send_welcome's derived input over it",
        {iid: "failed"},  # the scheduler's orchestration failed; the watchdog compensated the instance
    )
