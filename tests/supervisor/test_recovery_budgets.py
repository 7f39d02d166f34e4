"""Every recovery loop of the watchdog has a budget and an end (issue: bounded recovery).

A live scheduler that stopped moving is noted, then terminated, and the next tick resumes it. When
the termination does not take (the request is refused or lost, and the scheduler is still alive at
the next look) the watchdog terminated it again on every tick, forever, with nobody told. Now the
terminations are counted on the instance record and, once ``MAX_SCHEDULER_TERMINATIONS`` are spent,
the instance is flagged with the cause, parked in the operators' inbox, and left alone.

The whole pattern runs here (durable test host, real Azurite, real watchdog); the one fault is at
the Durable client boundary: its ``terminate`` is refused, as the management API may refuse it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from devtools.harness import PatternHarness
from supervisor.watchdog_model import DEFAULT_LEASE_SECONDS

LOOK = timedelta(seconds=DEFAULT_LEASE_SECONDS + 1)  # each tick a lease after the last


@pytest.fixture
def harness_options():
    return {"watchdog_every": None}


def instance_decisions(h: PatternHarness, iid: str) -> list[str]:
    return [d[2] for r in h.tick_reports for d in r.instance_decisions if d[0] == iid]


def refuse_terminations(h: PatternHarness, monkeypatch) -> list[str]:
    refused: list[str] = []

    async def terminate(instance_id: str, reason: str) -> None:
        refused.append(instance_id)
        raise RuntimeError(f"409 Conflict: cannot terminate {instance_id} now")

    monkeypatch.setattr(h.host.client, "terminate", terminate)
    return refused


def test_a_stalled_scheduler_that_cannot_be_terminated_is_flagged_not_terminated_forever(
    harness, monkeypatch
):
    h = harness
    h.pause_agents()  # the step's message waits in the queue: the scheduler waits on its timer
    iid = h.start_workflow("provision-tenant", {"tenant_id": "t-stuck", "admin_email": "a@b.example"})
    h.host.run_until_idle()
    assert h.host.get_status(iid).runtime_status.value == "Running"
    refused = refuse_terminations(h, monkeypatch)

    # The host never runs again: the scheduler is alive but does not move (a wedged worker), while
    # the watchdog looks every lease, from an hour past its promise on.
    now = h.now() + timedelta(hours=1)
    for _ in range(12):
        h.watchdog_tick(now=now)
        now += LOOK

    budget = h.services.settings.max_scheduler_terminations
    assert refused == [iid] * budget, refused  # not once per tick, forever
    decided = instance_decisions(h, iid)
    assert decided.count("terminate_stalled_scheduler") == budget
    assert decided.count("give_up_scheduler") == 1, decided
    record = h.ledger.get_instance(iid)
    assert record.status.value == "Running" and record.needs_attention
    # the cause where operators look: what the watchdog tried, and why it did not take
    assert "MAX_SCHEDULER_TERMINATIONS" in record.attention_reason
    assert "409 Conflict" in record.last_error and "409 Conflict" in record.attention_reason
    flagged, _ = h.ledger.list_instances(needs_attention=True)
    assert iid in [r.instance_id for r in flagged]

    # ...and nothing more is done to it: the audit trail stops growing
    trail = len(h.ledger.audit_trail(iid))
    for _ in range(6):
        h.watchdog_tick(now=now)
        now += LOOK
    assert len(h.ledger.audit_trail(iid)) == trail
    assert refused == [iid] * budget


def test_a_compensation_that_runs_but_never_moves_is_ended_and_restarted_within_budget(harness):
    """A compensation orchestration that is alive but never moves (a wedged worker) was noted
    ('compensation running') on every look, and its steps' failed results raised again every lease,
    forever. Now it is terminated after a lease without progress (counted), restarted against
    MAX_COMPENSATION_RESTARTS, and the instance ends CompensationFailed, flagged, and left alone."""
    from activities.worker.handlers import faults

    h = harness
    faults.clear()
    faults.inject("email.send_welcome", faults.Fail())  # the last step fails for good: compensate
    faults.inject("storage.delete", faults.Stall())  # the compensation then waits on its timer
    try:
        iid = h.start_workflow("provision-tenant", {"tenant_id": "t-comp", "admin_email": "a@b.example"})
        h.run_until(lambda: h.ledger.get_instance(iid).status.value == "Compensating", timedelta(hours=2))
        # The host never runs again: the compensation is alive but does not move.
        now = h.now() + timedelta(hours=1)
        for _ in range(24):
            h.watchdog_tick(now=now)
            now += LOOK

        decided = instance_decisions(h, iid)
        budget = h.services.settings.max_compensation_restarts
        assert decided.count("restart_compensation") == budget, decided
        assert decided.count("give_up_compensation") == 1, decided
        record = h.ledger.get_instance(iid)
        assert record.status.value == "CompensationFailed" and record.needs_attention
        assert "compensation gave up" in record.attention_reason
        trail = len(h.ledger.audit_trail(iid))
        for _ in range(6):
            h.watchdog_tick(now=now)
            now += LOOK
        assert len(h.ledger.audit_trail(iid)) == trail
    finally:
        faults.clear()


def test_an_operators_resume_answers_the_flag_and_renews_the_termination_budget(harness, monkeypatch):
    from supervisor import operator

    h = harness
    h.pause_agents()
    iid = h.start_workflow("provision-tenant", {"tenant_id": "t-ops", "admin_email": "a@b.example"})
    h.host.run_until_idle()
    refused = refuse_terminations(h, monkeypatch)
    now = h.now() + timedelta(hours=1)
    while not h.ledger.get_instance(iid).needs_attention:
        h.watchdog_tick(now=now)
        now += LOOK
    operator.resume_instance(h.ledger, iid, reason="the worker was replaced", user="ops", now=now)
    h.watchdog_tick(now=now)
    record = h.ledger.get_instance(iid)
    assert not record.needs_attention and record.stalls == 0 and record.scheduler_deadline is not None
    assert instance_decisions(h, iid)[-1] == "note_scheduler_late"  # alive: handed back, watched again
    budget = h.services.settings.max_scheduler_terminations
    for _ in range(2 + budget):
        now += LOOK
        h.watchdog_tick(now=now)
    assert len(refused) == 2 * budget  # a new budget, spent again, then flagged again
    assert h.ledger.get_instance(iid).needs_attention
