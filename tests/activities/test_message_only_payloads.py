"""Work for a message-only pool is inline only: a step input that needs a blob reference is never
sent to such an agent (it holds no storage rights to read it); the attempt fails for good with the
reason, and the workflow compensates."""

from __future__ import annotations

from devtools.harness import PatternHarness

POOLS = "pools:\n  mail:\n    agents: [email.send_welcome]\n    message_only: true\n"


def test_a_blob_input_for_a_message_only_agent_fails_the_attempt_and_sends_nothing(azurite):
    with PatternHarness(azurite, extra_workflows={"pools": POOLS}) as h:
        tenant = {"tenant_id": "bigco", "admin_email": "a" * 40_000 + "@bigco.example"}
        iid = h.start_workflow("provision-tenant", tenant)
        assert h.run_until_complete(iid).output["status"] == "compensated"
        row = h.ledger.get(iid, "send_welcome")
        assert (row.attempt, row.non_retryable) == (1, True)  # failed for good, then Cancelled
        events = [e for e in h.events_for(iid) if e.step_id == "send_welcome"]
        assert [e.actor for e in events if e.to_status == "Failed"] == ["scheduler"]
        assert "message-only" in row.last_error and "blob reference" in row.last_error
        assert h.handler_calls(iid, "send_welcome") == 0
        assert h.statuses(iid)["create_storage"] == "Compensated"


STORAGE_POOL = "pools:\n  storage:\n    agents: [storage.create, storage.delete]\n    message_only: true\n"


def test_a_never_sent_step_with_a_compensator_is_cancelled_and_the_instance_compensates_cleanly(azurite):
    """Its work was never sent, so there is nothing to undo: no compensation message (which would need
    the same blob), no CompensationFailed, no flag."""
    with PatternHarness(azurite, extra_workflows={"pools": STORAGE_POOL}) as h:
        iid = h.start_workflow("provision-tenant", {"tenant_id": "t" * 40_000, "admin_email": "a@b.example"})
        assert h.run_until_complete(iid).output["status"] == "compensated"
        row = h.ledger.get(iid, "create_storage")
        assert (row.attempt, row.non_retryable, row.compensation_attempt) == (1, True, 0)
        assert "message-only" in row.last_error
        assert h.statuses(iid)["create_storage"] == "Cancelled"
        assert h.handler_calls(iid, "create_storage") == 0
