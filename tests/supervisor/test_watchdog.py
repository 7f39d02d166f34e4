"""The watchdog's decision table against a real ledger and a real storage-queue transport (Azurite).

The Durable client is the recording stand-in from conftest (decision-level tests); the end-to-end
tests with the real orchestrators are in test_end_to_end.py.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from supervisor.instances import InstanceAction
from supervisor.watchdog import run_tick
from supervisor.watchdog_model import (
    COMPENSATION_OVERRUN_ERROR,
    DEFAULT_LEASE_SECONDS,
    FLAGGED_LOOK_SECONDS,
    OVERRUN_ERROR,
    Action,
    runtime_status_name,
)
from tests.helpers.app import drain
from tests.helpers.durable import RecordingClient
from tests.helpers.rows import IS, NOW, WORKFLOW, make_instance, make_step
from workflow_core import clock
from workflow_core.contracts import COMPENSATION_ORCHESTRATOR, WorkMessage
from workflow_core.ledger import NewStep, StepStatus
from workflow_core.transport import message_id_for

S = StepStatus
LEASE = timedelta(seconds=DEFAULT_LEASE_SECONDS)


def tick(client, services, now=NOW, **kwargs):
    return asyncio.run(run_tick(client, services, now=now, **kwargs))


def supervisor_rows(ledger, instance_id):
    return [a for a in ledger.audit_trail(instance_id) if a.actor.startswith("supervisor:")]


# ---- detection ------------------------------------------------------------------------------------


def test_step_past_its_deadline_is_acted_on_in_the_next_tick(services, ledger, client):
    make_step(ledger, "wf-next", S.RUNNING, deadline=NOW + timedelta(minutes=1))
    client.statuses["wf-next"] = "Running"

    before = tick(client, services, now=NOW)
    assert (before.overdue, before.claimed, sum(before.actions.values())) == (0, 0, 0)
    assert client.status_calls == [] and client.events == []
    assert supervisor_rows(ledger, "wf-next") == []

    # Deadline passed (and the grace with it): the very next tick acts.
    after = tick(client, services, now=NOW + timedelta(minutes=2))
    assert after.claimed == 1 and after.count(Action.FAIL_STEP) == 1
    assert [(i, name) for i, name, _ in client.events] == [("wf-next", "result:create_storage:1")]
    payload = client.events[0][2]
    assert payload["outcome"] == "failed" and payload["error"] == OVERRUN_ERROR
    assert payload["attempt"] == 1 and payload["kind"] == "work"

    record = ledger.get("wf-next", "create_storage")
    assert record.status is S.TIMED_OUT and record.last_error == OVERRUN_ERROR
    assert record.deadline == NOW + timedelta(minutes=2) + LEASE  # followed up later, not every tick
    rows = supervisor_rows(ledger, "wf-next")
    # The decision is the claim: one ETag-guarded write of the step as the tick read it.
    assert [r.action for r in rows] == ["transition"]
    assert rows[0].reason.startswith("claimed by watchdog tick")
    assert "fail_step" in rows[0].reason and rows[0].to_status == "TimedOut"

    # Acted on once: the next tick has nothing to do.
    again = tick(client, services, now=NOW + timedelta(minutes=3))
    assert again.overdue == 0 and len(client.events) == 1


def test_short_overrun_is_noted_and_left_to_the_orchestration(services, ledger, client):
    deadline = NOW - timedelta(seconds=10)
    original = make_step(ledger, "wf-grace", S.RUNNING, deadline=deadline)
    client.statuses["wf-grace"] = "Running"

    report = tick(client, services)
    assert report.count(Action.NOTE_OVERRUN) == 1 and client.events == []
    record = ledger.get("wf-grace", "create_storage")
    assert (record.status, record.deadline, record.owner) == (S.RUNNING, deadline, original.owner)
    notes = [a for a in supervisor_rows(ledger, "wf-grace") if a.action == "recovery"]
    assert len(notes) == 1 and notes[0].reason.startswith("note_overrun:") and "grace" in notes[0].reason

    # Still overdue once the grace is over, and the orchestration did nothing: act.
    later = tick(client, services, now=NOW + timedelta(seconds=25))
    assert later.count(Action.FAIL_STEP) == 1
    assert ledger.get("wf-grace", "create_storage").status is S.TIMED_OUT


def test_unclaimed_dispatched_step_is_noted_then_resent_once_then_failed(services, ledger, client):
    """A Dispatched attempt nobody claimed: within the grace only noted (the orchestration's own
    timer acts); past it, its message re-sent once with the same MessageId; overdue again past the
    grace of the new deadline, failed like any other attempt, with no second send."""
    deadline = NOW - timedelta(seconds=1)
    make_step(ledger, "wf-lost", S.DISPATCHED, attempt=2, deadline=deadline)
    client.statuses["wf-lost"] = "Running"

    within = tick(client, services)  # 1 s late, grace 30 s
    assert within.count(Action.NOTE_OVERRUN) == 1 and within.count(Action.RESEND) == 0
    assert drain(services.transport, services.settings.work_queue) == []
    record = ledger.get("wf-lost", "create_storage")
    assert (record.status, record.deadline, record.resent_at) == (S.DISPATCHED, deadline, None)
    assert record.owner == "agent:storage.create"  # handed back as it was

    beyond = NOW + timedelta(seconds=30)  # 31 s late
    report = tick(client, services, now=beyond)
    assert report.count(Action.RESEND) == 1 and client.events == [] and client.starts == []

    (message,) = drain(services.transport, services.settings.work_queue)
    assert message.message_id == message_id_for("wf-lost", "create_storage", 2)
    body = WorkMessage.model_validate(message.body)
    assert (body.kind, body.attempt, body.agent, body.workflow) == ("work", 2, "storage.create", WORKFLOW)
    assert body.input == {"tenant_id": "t1", "region": "westeurope", "sku": "Standard_LRS"}

    record = ledger.get("wf-lost", "create_storage")
    assert record.status is S.DISPATCHED and record.attempt == 2
    assert record.resent_at == beyond
    assert record.deadline == beyond + timedelta(seconds=300)  # create_storage's deadline_seconds
    assert record.owner == "agent:storage.create"  # the dispatch owner, not the watchdog

    assert tick(client, services, now=beyond + timedelta(seconds=60)).overdue == 0  # new deadline
    # Unclaimed again, past the grace of the new deadline: re-sent already, so failed, not re-sent.
    again = tick(client, services, now=record.deadline + timedelta(seconds=30))
    assert again.count(Action.FAIL_STEP) == 1 and again.count(Action.RESEND) == 0
    assert drain(services.transport, services.settings.work_queue) == []
    assert [(i, name) for i, name, _ in client.events] == [("wf-lost", "result:create_storage:2")]
    failed = ledger.get("wf-lost", "create_storage")
    assert failed.status is S.TIMED_OUT and failed.last_error == OVERRUN_ERROR


def test_a_dispatched_step_without_an_attempt_token_is_failed_not_resent(services, ledger, client):
    """A row written before work messages carried a reply token has no valid message to send again
    (the token is required): past the grace its attempt fails, and a retry dispatches one that does."""
    record = make_step(ledger, "wf-old", S.DISPATCHED)  # 5 min late
    ledger.update(record, actor="test", attempt_token=None)
    client.statuses["wf-old"] = "Running"

    report = tick(client, services)
    assert report.count(Action.FAIL_STEP) == 1 and report.count(Action.RESEND) == 0 and report.errors == 0
    assert drain(services.transport, services.settings.work_queue) == []
    assert ledger.get("wf-old", "create_storage").status is S.TIMED_OUT


def test_resent_dispatched_step_past_the_grace_is_failed_without_a_send(services, ledger, client):
    make_step(ledger, "wf-resent", S.DISPATCHED, resent=True)  # 5 min late, re-sent before
    client.statuses["wf-resent"] = "Running"

    report = tick(client, services)
    assert report.count(Action.FAIL_STEP) == 1 and report.count(Action.RESEND) == 0
    assert drain(services.transport, services.settings.work_queue) == []
    assert [(i, name) for i, name, _ in client.events] == [("wf-resent", "result:create_storage:1")]
    assert ledger.get("wf-resent", "create_storage").status is S.TIMED_OUT


@pytest.mark.parametrize("orchestration", ["Failed", "Terminated", "Completed", None])
def test_orchestration_gone_starts_compensation(services, ledger, client, orchestration):
    make_step(ledger, "wf-gone", S.RUNNING)  # its instance's policy: compensate a lost scheduler
    if orchestration:
        client.statuses["wf-gone"] = orchestration

    report = tick(client, services)
    assert report.count(InstanceAction.COMPENSATE) == 1  # the instance record decided, once
    assert ledger.get_instance("wf-gone").status is IS.COMPENSATING
    ((name, instance, payload),) = client.starts
    assert (name, instance) == (COMPENSATION_ORCHESTRATOR, "wf-gone:compensation")
    assert payload["instance_id"] == "wf-gone" and payload["workflow"] == WORKFLOW
    assert (orchestration or "Unknown") in payload["reason"]
    record = ledger.get("wf-gone", "create_storage")
    assert record.status is S.TIMED_OUT  # nobody waits for the attempt any more
    assert record.deadline == NOW + LEASE


@pytest.mark.parametrize("status", [S.RUNNING, S.COMPENSATING])
def test_a_step_without_an_instance_record_is_noted_once_and_left(services, ledger, client, status):
    """Every instance's record is written at the door with its steps: a step without one breaks an
    invariant. Only the record may decide (exactly once per instance) to resume or compensate, so
    nothing is started, ended or resumed for it; the step is noted and looked at again only a day
    later, not every lease."""
    make_step(ledger, "wf-norec", status, instance=None)
    client.statuses["wf-norec"] = "Running" if status is S.COMPENSATING else "Failed"

    report = tick(client, services)

    assert report.count(Action.NOTE_NO_INSTANCE_RECORD) == 1 and report.errors == 0
    assert client.starts == [] and client.terminations == [] and client.events == []
    assert ledger.find_instance("wf-norec") is None
    record = ledger.get("wf-norec", "create_storage")
    assert record.deadline == NOW + timedelta(seconds=FLAGGED_LOOK_SECONDS)
    notes = [a for a in supervisor_rows(ledger, "wf-norec") if "note_no_instance_record" in a.reason]
    assert len(notes) == 1 and "has no record" in notes[0].reason

    again = tick(client, services, now=NOW + LEASE + timedelta(seconds=1))  # not hammered
    assert again.overdue == 0 and client.starts == []


def test_compensation_already_running_is_not_started_again(services, ledger, client):
    make_step(ledger, "wf-comp", S.TIMED_OUT, instance=IS.COMPENSATING)
    client.statuses.update({"wf-comp": "Failed", "wf-comp:compensation": "Running"})
    report = tick(client, services)
    assert report.count(Action.NOTE_COMPENSATION_RUNNING) == 1 and client.starts == []


def test_finished_compensation_is_restarted(services, ledger, client):
    make_step(ledger, "wf-re", S.FAILED, instance=IS.COMPENSATING)
    client.statuses.update({"wf-re": "Completed", "wf-re:compensation": "Completed"})
    report = tick(client, services)
    assert report.count(InstanceAction.RESTART_COMPENSATION) == 1
    ((_, _, _, detail),) = report.instance_decisions
    assert "compensation wf-re:compensation is Completed" in detail
    assert ledger.get_instance("wf-re").compensation_restarts == 1  # counted against its budget
    assert ledger.get("wf-re", "create_storage").status is S.FAILED  # plan_compensation decides


def test_one_compensation_start_per_instance_per_tick(services, ledger, client):
    make_instance(ledger, "wf-two")
    steps = ledger.create_steps(
        "wf-two",
        WORKFLOW,
        [NewStep(step_id=s, step_name=s, agent="storage.create") for s in ("create_storage", "register_dns")],
        actor="test",
    )
    for r in steps:
        ledger.transition(r, S.DISPATCHED, actor="scheduler", deadline=NOW - timedelta(minutes=1), attempt=1)
    client.statuses["wf-two"] = "Failed"
    report = tick(client, services)
    assert report.claimed == 2
    assert (
        report.count(InstanceAction.COMPENSATE) == 1
        and report.count(InstanceAction.NOTE_COMPENSATION_RUNNING) == 1
    )
    assert len(client.starts) == 1


def test_retrying_past_its_backoff_is_noted_while_the_orchestration_lives(services, ledger, client):
    make_step(ledger, "wf-retry", S.RETRYING)
    client.statuses["wf-retry"] = "Running"
    report = tick(client, services)
    assert report.count(Action.NOTE_RETRY_OVERRUN) == 1
    assert client.events == [] and client.starts == []
    record = ledger.get("wf-retry", "create_storage")
    assert record.status is S.RETRYING and record.deadline == NOW + LEASE

    client.statuses["wf-retry"] = "Failed"
    gone = tick(client, services, now=NOW + LEASE + timedelta(seconds=1))
    assert gone.count(InstanceAction.COMPENSATE) == 1


def test_failed_step_the_orchestration_did_not_act_on_gets_its_result_raised(services, ledger, client):
    make_step(ledger, "wf-failed", S.FAILED, last_error="remote said no")
    client.statuses["wf-failed"] = "Running"
    report = tick(client, services)
    assert report.count(Action.FAIL_STEP) == 1
    ((_, name, payload),) = client.events
    assert name == "result:create_storage:1" and payload["error"] == "remote said no"
    assert ledger.get("wf-failed", "create_storage").status is S.FAILED


def test_given_up_step_waits_for_the_schedulers_compensation(services, ledger, client):
    make_step(ledger, "wf-given", S.TIMED_OUT, compensation_status="GivenUp")
    client.statuses["wf-given"] = "Running"
    report = tick(client, services)
    assert report.count(Action.NOTE_COMPENSATION_RUNNING) == 1
    assert client.starts == [] and client.events == []


def test_compensation_attempt_overrun_raises_its_failed_result(services, ledger, client):
    make_step(ledger, "wf-undo", S.COMPENSATING, compensation_attempt=2, compensation_status="Running")
    client.statuses["wf-undo:compensation"] = "Running"
    report = tick(client, services)
    assert report.count(Action.FAIL_COMPENSATION) == 1
    ((instance, name, payload),) = client.events
    assert (instance, name) == ("wf-undo:compensation", "compensation-result:create_storage:2")
    assert payload["kind"] == "compensate" and payload["attempt"] == 2
    assert payload["error"] == COMPENSATION_OVERRUN_ERROR
    record = ledger.get("wf-undo", "create_storage")
    assert record.status is S.COMPENSATING and record.compensation_status == "TimedOut"


def test_compensation_attempt_short_overrun_is_noted(services, ledger, client):
    make_step(
        ledger,
        "wf-undo2",
        S.COMPENSATING,
        compensation_status="Dispatched",
        deadline=NOW - timedelta(seconds=5),
    )
    client.statuses["wf-undo2:compensation"] = "Running"
    report = tick(client, services)
    assert report.count(Action.NOTE_OVERRUN) == 1 and client.events == []
    assert ledger.get("wf-undo2", "create_storage").deadline == NOW - timedelta(seconds=5)


def test_compensating_without_a_compensation_running_restarts_it(services, ledger, client):
    make_step(ledger, "wf-undo3", S.COMPENSATING)
    client.statuses["wf-undo3:compensation"] = "Failed"
    report = tick(client, services)
    assert report.count(InstanceAction.RESTART_COMPENSATION) == 1
    assert client.starts[0][1] == "wf-undo3:compensation"


def test_compensating_while_the_scheduler_lives_ends_the_scheduler_before_starting_it(
    services, ledger, client
):
    """A compensation started here runs top-level; the live scheduler's own later call of the same id
    as a sub-orchestration would be dropped by the framework, leaving it waiting forever."""
    make_step(ledger, "wf-live", S.COMPENSATING)
    client.statuses["wf-live"] = "Running"

    report = tick(client, services)

    assert report.count(Action.END_SCHEDULER) == 1
    assert report.count(InstanceAction.RESTART_COMPENSATION) == 1
    assert [i for i, _ in client.terminations] == ["wf-live"]
    assert client.starts[0][1] == "wf-live:compensation"
    reasons = [a.reason for a in supervisor_rows(ledger, "wf-live") if a.action == "recovery"]
    assert [r.split(":")[0] for r in reasons] == ["end_scheduler", "restart_compensation"]


def test_one_failing_step_does_not_stop_the_tick(services, ledger, client):
    for name in ("wf-a", "wf-b", "wf-c"):
        make_step(ledger, name, S.RUNNING)
        client.statuses[name] = "Running"
    client.fail_status_for.add("wf-b")

    report = tick(client, services)
    assert report.errors == 1 and report.claimed == 3
    assert report.count(Action.FAIL_STEP) == 2
    assert sorted(i for i, _, _ in client.events) == ["wf-a", "wf-c"]
    # The failed one stays claimed for the lease (retried then), with the error on record.
    record = ledger.get("wf-b", "create_storage")
    assert record.status is S.RUNNING and record.deadline == NOW + LEASE
    assert any("RuntimeError" in a.reason for a in supervisor_rows(ledger, "wf-b"))

    client.fail_status_for.clear()
    retried = tick(client, services, now=NOW + LEASE + timedelta(seconds=31))
    assert retried.errors == 0
    # wf-b now; wf-a and wf-c again, their follow-up being due (the orchestration never reacted).
    assert sorted(d.instance_id for d in retried.decisions if d.action == "fail_step") == [
        "wf-a",
        "wf-b",
        "wf-c",
    ]
    assert ledger.get("wf-b", "create_storage").status is S.TIMED_OUT


def test_batch_size_bounds_a_tick(services, ledger, client):
    for i in range(5):
        make_step(ledger, f"wf-batch-{i}", S.RUNNING, deadline=NOW - timedelta(minutes=10 - i))
        client.statuses[f"wf-batch-{i}"] = "Running"
    first = tick(client, services, batch_size=3)
    second = tick(client, services, batch_size=3)
    assert (first.claimed, second.claimed) == (3, 2)
    # Earliest deadlines first.
    assert [d.instance_id for d in first.decisions] == ["wf-batch-0", "wf-batch-1", "wf-batch-2"]
    assert first.index_entities_read <= 4  # index rows up to the page, not the table


# ---- heartbeats -----------------------------------------------------------------------------------


def test_heartbeating_step_is_left_alone_until_heartbeats_stop(services, ledger, client):
    start = NOW - timedelta(minutes=10)
    with clock.use_clock(lambda: start):
        record = make_step(
            ledger, "wf-hb", S.RUNNING, deadline=start + timedelta(seconds=60), heartbeat_timeout=60
        )
    client.statuses["wf-hb"] = "Running"

    # The agent heartbeats every 20 s for 5 minutes, well past its original 60 s deadline.
    beat = start
    for i in range(1, 16):
        beat = start + timedelta(seconds=20 * i)
        with clock.use_clock(lambda beat=beat: beat):
            record = ledger.extend_deadline(record, record.heartbeat_timeout_seconds, actor="worker-1")
        if i % 5 == 0:
            report = tick(client, services, now=beat + timedelta(seconds=1))
            assert report.overdue == 0 and client.status_calls == []
    last_heartbeat = beat
    stored = ledger.get("wf-hb", "create_storage")
    assert stored.last_heartbeat == last_heartbeat
    assert stored.deadline == last_heartbeat + timedelta(seconds=60)

    # Heartbeats stop: not overdue until last heartbeat + heartbeat timeout...
    quiet = tick(client, services, now=last_heartbeat + timedelta(seconds=59))
    assert quiet.overdue == 0
    # ...then overdue (noted within the grace), and acted on once the grace is over too.
    noticed = tick(client, services, now=last_heartbeat + timedelta(seconds=61))
    assert noticed.count(Action.NOTE_OVERRUN) == 1
    acted = tick(client, services, now=last_heartbeat + timedelta(seconds=95))
    assert acted.count(Action.FAIL_STEP) == 1
    assert ledger.get("wf-hb", "create_storage").status is S.TIMED_OUT


# ---- odds and ends --------------------------------------------------------------------------------


def test_runtime_status_name_reads_every_shape():
    from azure.durable_functions.models.DurableOrchestrationStatus import DurableOrchestrationStatus

    assert runtime_status_name(None) == "Unknown"
    assert runtime_status_name(DurableOrchestrationStatus.from_json("not found")) == "Unknown"
    assert runtime_status_name(DurableOrchestrationStatus(runtimeStatus="Failed")) == "Failed"
    assert runtime_status_name({"runtimeStatus": "Running"}) == "Running"


def test_report_summary_names_the_counts(services, ledger):
    make_step(ledger, "wf-sum", S.RUNNING)
    report = tick(RecordingClient({"wf-sum": "Running"}), services, tick_id="t-1")
    text = report.summary()
    assert "t-1" in text and "1 claimed" in text and "fail_step=1" in text


def test_compensation_sub_states_match_what_the_agents_write():
    pytest.importorskip("activities.common")
    from activities.scheduler import dispatch, retries
    from activities.worker import delivery
    from supervisor import step_decisions
    from supervisor import watchdog_model as watchdog

    assert {dispatch.COMP_DISPATCHED, delivery.COMP_RUNNING} == watchdog.COMP_IN_FLIGHT
    assert (step_decisions.COMP_FAILED, step_decisions.COMP_TIMED_OUT) == (
        retries.COMP_FAILED,
        retries.COMP_TIMED_OUT,
    )
    assert step_decisions.GIVEN_UP == retries.GIVEN_UP


def test_an_orphaned_step_of_a_failed_instance_waits_for_an_operator(services, ledger, client):
    """A Failed instance is flagged: it could neither finish, resume nor compensate on its own. A step
    of it still in flight whose orchestration is gone must not start a compensation behind the
    operator's back (nothing restarts a flagged instance without an operator); it is noted and looked
    at again only a day later."""
    make_step(ledger, "wf-failed", S.RUNNING, instance=IS.FAILED)
    client.statuses["wf-failed"] = "Failed"

    report = tick(client, services)

    assert client.starts == [] and client.terminations == [] and client.events == [], client.starts
    assert report.count(Action.START_COMPENSATION) == 0 and report.errors == 0
    assert ledger.get_instance("wf-failed").status is IS.FAILED
    record = ledger.get("wf-failed", "create_storage")
    assert record.deadline == NOW + timedelta(seconds=FLAGGED_LOOK_SECONDS)
    again = tick(client, services, now=NOW + LEASE + timedelta(seconds=1))  # not hammered
    assert again.overdue == 0 and client.starts == []
