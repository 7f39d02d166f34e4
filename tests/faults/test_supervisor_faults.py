"""Faults only the supervisor can heal, and faults in the supervisor itself."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from datetime import timedelta

import pytest

from devtools.harness import PatternHarness
from supervisor import run_tick
from tests.helpers.fault_matrix import start_provisioning, storage_queue_only, verify
from workflow_core.transport import message_id_for

STEPS = ("create_storage", "register_dns", "send_welcome")


def test_crash_between_ledger_write_and_send_is_healed_by_one_watchdog_resend(harness):
    """The process running ``dispatch_step`` dies after writing Dispatched, before sending. The
    orchestration keeps waiting on the activity (redelivered only after its five-minute lease), so
    nobody but the watchdog sees the step pass its deadline: it re-sends the same message, once."""
    h = harness
    h.crash_dispatch_before_send("register_dns", redeliver_after=timedelta(minutes=5))
    iid = start_provisioning(h)
    status = h.run_until_complete(iid)
    verify(
        h,
        "crash between ledger write and send",
        "dispatch dies before its send; activity back after 5 min",
        {iid: "succeeded"},
    )

    resends = [d for d in h.decisions(iid) if d.action == "resend"]
    assert [(d.step_id, d.status) for d in resends] == [("register_dns", "Dispatched")]
    # The same MessageId went out exactly once: by the watchdog. The activity, redelivered later,
    # found the step claimed or settled and sent nothing.
    assert h.transport.sent_ids[f"work:{iid}:register_dns:1"] == 1
    # The watchdog re-sent only once the step was past its deadline by the grace: the send is not
    # recorded, and within the grace a Dispatched step is left to the orchestration's timer.
    trail = h.ledger.audit_trail(iid)
    (resend_row,) = [a for a in trail if a.reason.startswith("resend:")]
    (claim_row,) = [
        a
        for a in trail
        if (a.actor, a.step_id) == (resend_row.actor, "register_dns") and a.reason.startswith("claimed")
    ]
    overdue_by = int(claim_row.reason.rsplit("overdue by ", 1)[1].rstrip("s"))
    assert overdue_by >= h.services.settings.watchdog_grace_seconds
    dns = h.steps(iid)["register_dns"]
    assert (dns.status.value, dns.attempt) == ("Succeeded", 1)
    assert h.handler_calls(iid, "register_dns") == 1
    assert status.output["status"] == "succeeded"


@storage_queue_only
def test_two_watchdog_ticks_at_once_act_on_each_dead_instance_once(harness_without_watchdog):
    """Three workflows lose their orchestration while a step is out; two watchdog ticks run at the
    same moment and read the same overdue instances and steps: the ETag claim of the *instance*
    record lets exactly one tick resume each instance, and the steps defer to it."""
    h = harness_without_watchdog
    held = h.hold("register_dns", times=3)  # the DNS agent takes each message and hangs
    iids = [start_provisioning(h, tenant=f"t{n}") for n in range(3)]
    h.run_until(lambda: len(h.held(held)) == 3)
    for iid in iids:
        h.host.terminate(iid, "killed by a bad deployment")
    h.host.advance(timedelta(minutes=5))  # well past the 120 s deadline and the 30 s grace

    both_read = threading.Barrier(2, timeout=20)
    real_overdue = h.ledger.overdue_instances

    def overdue_instances(now, limit=100):
        found = real_overdue(now, limit)
        both_read.wait()  # each tick has its list of overdue instances before either claims one
        return found

    h.ledger.overdue_instances = overdue_instances

    async def two_ticks():
        return await asyncio.gather(run_tick(h.host.client, h.services), run_tick(h.host.client, h.services))

    reports = h.host.run_async(two_ticks())
    h.ledger.overdue_instances = real_overdue

    assert [r.overdue_instances for r in reports] == [3, 3]  # both saw all three
    resumes = Counter(
        i for r in reports for i, _, action, _ in r.instance_decisions if action == "resume_instance"
    )
    assert resumes == {iid: 1 for iid in iids}
    assert not [d for r in reports for d in r.decisions if d.action == "start_compensation"]
    assert sum(r.conflicts for r in reports) >= 3  # every lost instance claim was a clean ETag conflict
    for iid in iids:
        assert h.ledger.get_instance(iid).resume_count == 1

    h.release(held)  # the hung agents wake up: their attempts were timed out when the scheduler died
    for iid in iids:
        status = h.run_until_complete(iid, timeout=timedelta(hours=2))
        assert status.output["status"] == "succeeded"
        assert set(h.statuses(iid).values()) == {"Succeeded"}
        assert h.handler_calls(iid, "create_storage") == 1  # completed before the death: never re-run
        assert h.ledger.get_instance(iid).status.value == "Succeeded"
    verify(
        h,
        "two watchdogs at once",
        "2 concurrent ticks over the same 3 dead instances",
        dict.fromkeys(iids, "succeeded"),
    )


@pytest.fixture
def harness_without_watchdog(azurite):
    from activities.worker.handlers import faults

    faults.clear()
    with PatternHarness(azurite, watchdog_every=None) as h:
        yield h
    faults.clear()


@storage_queue_only
def test_orchestration_terminated_mid_flow_is_compensated_by_the_watchdog(harness):
    h = harness
    held = h.hold("register_dns")  # the step is out with the agent when the orchestration dies
    iid = start_provisioning(h)
    # this instance's policy says compensate when its scheduler is lost (the shipped default resumes)
    h.ledger.update_instance(h.ledger.get_instance(iid), actor="test", on_scheduler_lost="compensate")
    h.run_until(lambda: len(h.held(held)) == 1)
    h.host.terminate(iid, "operator terminated the instance")
    h.run_until(
        lambda: (
            (s := h.host.get_status(f"{iid}:compensation")) is not None
            and s.runtime_status.value == "Completed"
        ),
        timeout=timedelta(hours=1),
    )

    started = [d for r in h.tick_reports for d in r.instance_decisions if d[0] == iid]
    assert [d[2] for d in started] == ["compensate_instance"] and "Terminated" in started[0][3]
    assert h.statuses(iid) == {
        "create_storage": "Compensated",  # its remote effect was undone
        "register_dns": "Compensated",  # a timed-out attempt may have taken effect: undone too
        "send_welcome": "Cancelled",  # never ran
    }
    assert [row["State"] for row in h.remote_effects(iid, "create_storage")] == ["undone"]
    h.release(held)
    h.host.run_until_idle()
    verify(
        h,
        "orchestration terminated mid-flow",
        "terminate while register_dns is out",
        {iid: "terminated, then compensated"},
    )
    assert h.handler_calls(iid, "register_dns") == 0  # the released message found the step settled


@pytest.mark.parametrize(
    ("skew_seconds", "acts"), [(20, False), (45, True)], ids=["within-grace", "beyond-grace"]
)
def test_watchdog_clock_ahead_of_the_agents(azurite, skew_seconds, acts):
    """The watchdog's clock runs ahead. A reply that arrives 5 s before the deadline (by everyone
    else's clock) is not pre-empted while the skew is within the 30 s grace; beyond it, the watchdog
    acts early, and even then nothing is lost or done twice. The slow agent holds the message
    without claiming it, so the step is still Dispatched: acting early means re-sending the same
    message once (the send is not recorded, so "late" and "never sent" look alike), not failing
    the attempt."""
    from activities.worker.handlers import faults

    faults.clear()
    skew = timedelta(seconds=skew_seconds)
    with PatternHarness(azurite, watchdog_every=timedelta(seconds=10), watchdog_skew=skew) as h:
        slow = h.hold("register_dns", attempt=1)  # a slow agent: answers 115 s into a 120 s deadline
        iid = start_provisioning(h)
        h.run_until(lambda: len(h.held(slow)) == 1)
        deadline = h.steps(iid)["register_dns"].deadline
        h.host.advance(deadline - timedelta(seconds=5) - h.now())
        h.release(slow)
        status = h.run_until_complete(iid)
        verify(
            h,
            f"clock skew ({skew_seconds} s, grace 30 s)",
            f"watchdog clock {skew_seconds} s ahead; reply 5 s before deadline",
            {iid: "succeeded"},
        )

        actions = Counter(d.action for d in h.decisions(iid) if d.step_id == "register_dns")
        dns = h.steps(iid)["register_dns"]
        if acts:
            # 35 s "late" by its clock and still unclaimed: it re-sent the same MessageId, once
            assert actions["resend"] == 1 and set(actions) == {"note_overrun", "resend"}
            assert h.transport.sent_ids[message_id_for(iid, "register_dns", 1)] == 2
            # the held message ran; the copy found the step settled and only re-sent the reply
            assert (dns.attempt, h.handler_calls(iid, "register_dns")) == (1, 1)
            assert [e.note for e in h.events_for(iid) if e.note == "result-resent"] == ["result-resent"]
            assert not [e for e in h.events_for(iid) if e.to_status == "TimedOut"]
        else:
            assert actions["note_overrun"] >= 1 and set(actions) == {"note_overrun"}
            assert (dns.attempt, h.handler_calls(iid, "register_dns")) == (1, 1)
            assert not [e for e in h.events_for(iid) if e.to_status == "TimedOut"]
        assert status.output["status"] == "succeeded"
        assert h.effects(iid, "register_dns") == 1
    faults.clear()


def test_watchdog_claim_and_deadline_timer_at_the_same_instant(harness_without_watchdog):
    """The step's deadline timer fires while a watchdog tick holds its short claim on the step. The
    orchestration must still time the attempt out at its deadline, not a lease later."""
    h = harness_without_watchdog
    faults_module = pytest.importorskip("activities.worker.handlers.faults")
    faults_module.inject("dns.register", faults_module.Stall(times=1))
    iid = start_provisioning(h)
    h.run_until(lambda: h.steps(iid)["register_dns"].status.value == "Running")
    deadline = h.steps(iid)["register_dns"].deadline
    h.host.advance(deadline - h.now() - timedelta(microseconds=1))  # just before the timer fires

    claimed, go_on = threading.Event(), threading.Event()
    real_update = h.ledger.update

    def update(record, **kwargs):
        updated = real_update(record, **kwargs)
        if kwargs.get("owner", "").startswith("supervisor:") and record.step_id == "register_dns":
            claimed.set()
            go_on.wait(20)  # the tick holds its claim while the orchestration's timer fires
        return updated

    h.ledger.update = update
    tick = threading.Thread(target=lambda: asyncio.run(run_tick(h.host.client, h.services, now=deadline)))
    tick.start()
    assert claimed.wait(20)
    h.host.advance(timedelta(microseconds=1))  # the deadline timer fires: check_step runs now
    go_on.set()
    tick.join(20)
    h.ledger.update = real_update

    h.start_watchdog()
    h.run_until_complete(iid)
    verify(
        h,
        "watchdog claim + deadline timer at once",
        "check_step runs while a tick holds its claim",
        {iid: "succeeded"},
    )
    retried = next(e for e in h.events_for(iid) if e.to_status == "Dispatched" and e.attempt == 2)
    assert retried.at - deadline < timedelta(seconds=20), (
        f"attempt 2 only {retried.at - deadline} after the deadline"
    )
