"""Faults on the agent side: crashes, hangs, duplicates, poison messages, late replies."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from activities.worker.handlers import faults
from tests.helpers.fault_matrix import start_provisioning, storage_queue_only, verify
from workflow_core.contracts import result_event_name

STEPS = ("create_storage", "register_dns", "send_welcome")
ALL_SUCCEEDED = dict.fromkeys(STEPS, "Succeeded")


def notes(h, iid, step_id):
    return [e.note for e in h.events_for(iid) if e.step_id == step_id and e.action == "note"]


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param("killed-before-effect", marks=storage_queue_only),
        pytest.param("killed-after-effect", marks=storage_queue_only),
        "crash-abandoned",
        "stall-no-reply",
    ],
)
def test_agent_crash_mid_step(harness, mode):
    """The DNS agent dies (or hangs) while working on its step; the step still completes, once."""
    h = harness
    if mode == "killed-before-effect":
        h.kill_agent("dns.register")  # process dies, nothing settled: back after the lock expires
        injected = "agent process killed before its effect; message unsettled"
    elif mode == "killed-after-effect":
        h.kill_agent("dns.register", after_effect=True)
        injected = "agent process killed after its effect, before replying"
    elif mode == "crash-abandoned":
        faults.inject("dns.register", faults.CrashAfterEffect())  # the host catches it and abandons
        injected = "handler crashes after its effect; host abandons the message"
    else:
        faults.inject("dns.register", faults.Stall(times=1))
        injected = "agent takes the message and never replies (attempt 1)"
    iid = start_provisioning(h)
    status = h.run_until_complete(iid)
    verify(h, f"agent crash mid-step ({mode})", injected, {iid: "succeeded"})

    dns = h.steps(iid)["register_dns"]
    if mode == "stall-no-reply":
        # Only the deadline can notice a silent agent: the orchestration's own timer times the attempt
        # out (the watchdog, ticking at the same instant, leaves it alone within its grace).
        assert dns.attempt == 2
        timed_out = [e for e in h.events_for(iid) if e.to_status == "TimedOut" and e.action == "transition"]
        assert [(e.step_id, e.attempt, e.actor) for e in timed_out] == [("register_dns", 1, "scheduler")]
        assert {d.action for d in h.decisions(iid)} <= {"note_overrun"}
    else:
        # Redelivered on the same attempt: the next worker takes the Running step over and finishes it.
        assert dns.attempt == 1
        assert h.handler_calls(iid, "register_dns", attempt=1) == 2
        takeovers = [e for e in h.events_for(iid) if e.step_id == "register_dns" and "took over" in e.reason]
        assert len(takeovers) == 1
    assert h.effects(iid, "register_dns") == 1
    assert h.statuses(iid) == ALL_SUCCEEDED and status.output["status"] == "succeeded"


@storage_queue_only
def test_duplicate_delivery_of_a_work_message_after_the_first_finished(harness):
    h = harness
    h.duplicate_send("register_dns", queue="work")  # Storage Queues deliver both copies
    iid = start_provisioning(h)
    h.run_until_complete(iid)
    verify(
        h,
        "duplicate work delivery (sequential)",
        "work message sent twice, same MessageId",
        {iid: "succeeded"},
    )

    assert h.transport.sent_ids[f"work:{iid}:register_dns:1"] == 2
    assert h.handler_calls(iid, "register_dns") == 1  # the copy found the attempt done...
    assert "result-resent" in notes(h, iid, "register_dns")  # ...and re-sent its recorded reply
    assert h.effects(iid, "register_dns") == 1


@storage_queue_only
def test_duplicate_delivery_to_two_competing_workers_at_once(harness):
    """Two workers receive copies of the same message and read the ledger at the same moment: the
    ETag claim lets exactly one of them run the handler."""
    h = harness
    entry = h.hold("register_dns", times=2)
    h.duplicate_send("register_dns", queue="work")
    iid = start_provisioning(h)
    h.run_until(lambda: len(h.held(entry)) == 2)
    copies = h.take_held(entry)

    both_read = threading.Barrier(2, timeout=20)
    first_read = threading.local()
    real_get = h.ledger.get

    def get(instance_id, step_id):
        record = real_get(instance_id, step_id)
        if step_id == "register_dns" and not getattr(first_read, "done", False):
            first_read.done = True
            both_read.wait()  # both workers hold the same (Dispatched) record before either writes
        return record

    h.ledger.get = get
    errors = []

    def deliver(message):
        try:
            h.deliver("work", message)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=deliver, args=(m,)) for m in copies]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    h.ledger.get = real_get
    assert errors == []

    h.run_until_complete(iid)
    verify(
        h,
        "duplicate work delivery (concurrent)",
        "two workers claim the same attempt at once",
        {iid: "succeeded"},
    )
    assert h.handler_calls(iid, "register_dns", attempt=1) == 1
    # The loser of the claim re-read the step: still Running (copy ignored) or already Succeeded (its
    # recorded reply re-sent), depending on how far the winner got; never a second run.
    assert sorted(notes(h, iid, "register_dns")) in (["duplicate-delivery-ignored"], ["result-resent"])


@storage_queue_only
def test_duplicate_result_message(harness):
    h = harness
    h.duplicate_send("register_dns", queue="results")
    iid = start_provisioning(h)
    h.run_until_complete(iid)
    verify(h, "duplicate result message", "agent reply sent twice", {iid: "succeeded"})

    event = result_event_name("register_dns", 1)
    raised = [e for e in h.host.history(iid) if e.get("EventType") == 15 and e.get("Name") == event]
    assert len(raised) == 2  # both copies reached the orchestration; the second changed nothing
    assert h.steps(iid)["register_dns"].attempt == 1
    assert h.handler_calls(iid, "register_dns") == 1


def test_poison_message_is_dead_lettered_and_fails_its_step(harness):
    """A work message that crashes its worker on every delivery is dead-lettered after
    MAX_DELIVERY_COUNT deliveries; the dead-letter handler fails the attempt at once and the
    orchestration retries (attempt 2) instead of waiting for the deadline."""
    h = harness
    limit = h.settings.max_delivery_count
    faults.inject("dns.register", faults.CrashAfterEffect(times=limit))
    iid = start_provisioning(h)
    status = h.run_until_complete(iid)
    verify(
        h,
        "poison work message",
        f"worker crashes on all {limit} deliveries -> dead-letter",
        {iid: "succeeded"},
    )

    failed = [e for e in h.events_for(iid) if e.to_status == "Failed" and e.action == "transition"]
    assert [(e.step_id, e.attempt, e.actor) for e in failed] == [("register_dns", 1, "dead-letter-handler")]
    assert failed[0].reason.startswith("dead-lettered: MaxDeliveryCountExceeded")
    assert failed[0].at == h.events_for(iid)[0].at  # at once, not at the 120 s deadline
    assert h.handler_calls(iid, "register_dns", attempt=1) == limit
    assert h.steps(iid)["register_dns"].attempt == 2
    assert h.effects(iid, "register_dns") == 1  # five crashed deliveries and a retry: one DNS record
    assert status.output["status"] == "succeeded"


@storage_queue_only
def test_late_result_after_the_step_was_compensated_is_ignored_and_audited(harness):
    h = harness
    late = h.hold("create_storage", queue="results")  # the storage agent's reply is delayed
    faults.inject("email.send_welcome", faults.Fail())  # the last step gives up: compensate
    iid = start_provisioning(h)
    status = h.run_until_complete(iid, timeout=timedelta(hours=2))
    assert status.output["status"] == "compensated"
    assert h.steps(iid)["create_storage"].status.value == "Compensated"
    assert len(h.held(late)) == 1

    h.release(late)  # the reply finally arrives, after the compensation
    h.host.run_until_idle()
    verify(
        h,
        "late result after compensation",
        "step reply held until the workflow was compensated",
        {iid: "compensated"},
    )

    assert "late-result-ignored" in notes(h, iid, "create_storage")
    storage = h.steps(iid)["create_storage"]
    assert storage.status.value == "Compensated"  # the late reply changed nothing
    assert [row["State"] for row in h.remote_effects(iid, "create_storage")] == ["undone"]
    assert h.effects(iid, "create_storage") == 1 and h.effects(iid, "create_storage", kind="compensate") == 1
