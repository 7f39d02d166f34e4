"""Sequential successes raised unread and proven by the scheduler's next write, end to end on the
durable test host and Azurite (the forgeries are in ``tests/faults/test_provisional_results.py``)."""

from __future__ import annotations

import json

from tests.faults.test_provisional_results import basis_rows
from tests.helpers.fault_matrix import start_provisioning

EVENT_RAISED, TASK_SCHEDULED = 15, 4  # history event types, as the Durable extension numbers them


def test_genuine_successes_are_raised_unread_and_proven_by_the_next_write(harness):
    """The happy path: every success of a sequential workflow is keyed, raised without a read, and
    its basis row is gone once the next write proved it; nothing is refused."""
    h = harness
    iid = start_provisioning(h)
    status = h.run_until_complete(iid)

    assert status.output["status"] == "succeeded"
    assert set(h.statuses(iid).values()) == {"Succeeded"} and h.double_effects([iid]) == {}
    notes = {e.note for e in h.events_for(iid)}
    assert "provisional-result-refused" not in notes
    assert "unconfirmed-result-ignored" not in notes
    assert basis_rows(h, iid) == []  # each deleted by the write that proved it
    # every result event the orchestration got was the worker's keyed reply, not a ledger verdict
    raised = [json.loads(e["Input"]) for e in h.host.history(iid) if e["EventType"] == EVENT_RAISED]
    assert len(raised) == 3
    assert all(e["ledger"]["etags"]["instance"] and "ledger_token" not in e for e in raised)
    names = [e.get("Name") for e in h.host.history(iid) if e["EventType"] == TASK_SCHEDULED]
    assert "verify_result" not in names and "check_step" not in names  # nothing asked again
