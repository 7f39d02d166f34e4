"""The scheduler's activities against a real ledger and a real queue on Azurite."""

from __future__ import annotations

from datetime import timedelta

import pytest
from azure.storage.queue import QueueClient

from activities.scheduler import dispatch
from activities.scheduler import functions as scheduling
from activities.worker.handlers import faults
from tests.helpers.app import GRACE_SECONDS
from workflow_core import clock
from workflow_core.contracts import WorkMessage
from workflow_core.ledger import StepStatus, decode_json
from workflow_core.ledger.model import GIVEN_UP
from workflow_core.transport import TransportError, message_id_for
from workflow_core.workflows import get_workflow, version_of

S = StepStatus


def _transitions(harness, instance_id, step_id, to_status):
    return [
        a
        for a in harness.audit(instance_id, step_id)
        if a.action == "transition" and a.to_status == to_status
    ]


# ---- create_workflow_steps ------------------------------------------------------------------------


def test_create_workflow_steps_writes_every_step_pending_and_is_idempotent(harness):
    payload = {"instance_id": "inst-create-1", "workflow": "order-fulfilment"}
    first = scheduling.create_workflow_steps(payload, harness.services)
    second = scheduling.create_workflow_steps(payload, harness.services)

    assert first == second
    assert [s["step_id"] for s in first["steps"]] == ["reserve_stock", "charge_payment", "ship_order"]
    rows = harness.ledger.list_for_instance("inst-create-1")
    assert [(r.status, r.agent, r.compensator, r.max_attempts) for r in rows] == [
        (S.PENDING, "inventory.reserve", "inventory.release", 3),
        (S.PENDING, "payments.charge", "payments.refund", 3),
        (S.PENDING, "shipping.create_shipment", "shipping.cancel_shipment", 3),
    ]
    assert rows[2].heartbeat_timeout_seconds == 90


@pytest.mark.parametrize(("start_deadline_in", "moved"), [(90, False), (5, True)])
def test_adopting_the_instance_never_shortens_the_starters_promise(harness, start_deadline_in, moved):
    """The starter promised the orchestration would show up within ~90 s. Adopting it (with the steps'
    batch) keeps that later promise, so the instance's deadline-index row stays put (no insert and
    delete per workflow). A promise about to run out is moved on to now + grace; its row stays too
    (a row due early is moved forward by the watchdog, never on the hot path)."""
    ledger = harness.ledger
    instance_id = f"inst-adopt-{start_deadline_in}"
    started = ledger.create_instance(
        instance_id,
        "provision-tenant",
        actor="api:start",
        input_json="{}",
        scheduler_deadline=clock.utcnow() + timedelta(seconds=start_deadline_in),
        version=version_of(get_workflow("provision-tenant")),
    )
    scheduling.create_workflow_steps(
        {"instance_id": instance_id, "workflow": "provision-tenant", "orchestration_id": instance_id},
        harness.services,
    )
    adopted = ledger.get_instance(instance_id)
    assert adopted.orchestration_id == instance_id
    assert adopted.index_key == started.index_key
    if moved:
        assert adopted.scheduler_deadline > started.scheduler_deadline
    else:
        assert adopted.scheduler_deadline == started.scheduler_deadline


# ---- dispatch_step --------------------------------------------------------------------------------


def test_dispatch_writes_the_ledger_before_it_sends(harness, monkeypatch):
    monkeypatch.setattr(dispatch, "SEND_RETRY_DELAYS", (0.0, 0.0))
    instance = harness.start()
    work_queue = harness.services.settings.work_queue
    queue = QueueClient.from_connection_string(
        harness.services.settings.storage.connection_string, work_queue
    )
    harness.transport.ensure_queues(work_queue)
    queue.delete_queue()  # the send will fail for real: the queue is gone

    payload = harness.dispatch_payload(instance, "create_storage", input={"tenant_id": "contoso"})
    failed = scheduling.dispatch_step(payload, harness.services)
    # The activity does not fail (that would fail the orchestration): the deadline recovers it.
    assert (failed["outcome"], failed["sent"], failed["status"]) == ("dispatched", False, "Dispatched")
    assert "does not exist" in failed["error"]
    [note] = [a for a in harness.audit(instance, "create_storage") if a.action == "send-failed"]
    assert note.attempt == 1

    row = harness.ledger.get(instance, "create_storage")
    assert row.status is S.DISPATCHED
    assert row.attempt == 1
    assert row.owner == "agent:storage.create"
    assert row.deadline.isoformat() == payload["deadline"]
    assert row.orchestration_id == instance
    assert decode_json(row.input_ref) == {"tenant_id": "contoso"}
    assert row.resent_at is None

    queue.create_queue()
    again = scheduling.dispatch_step(payload, harness.services)
    assert (again["outcome"], again["sent"], again["error"]) == ("already-dispatched", True, None)
    # Nothing is written after a send: the row is the one the failed dispatch left.
    assert harness.ledger.get(instance, "create_storage").etag == row.etag
    messages = harness.work()
    assert len(messages) == 1
    assert messages[0].message_id == message_id_for(instance, "create_storage", 1) == again["message_id"]
    body = WorkMessage.model_validate(messages[0].body)
    assert (body.kind, body.agent, body.attempt, body.input) == (
        "work",
        "storage.create",
        1,
        {"tenant_id": "contoso"},
    )
    assert len(_transitions(harness, instance, "create_storage", "Dispatched")) == 1


class FlakyTransport:
    """The real transport, whose next ``failures`` sends raise first (a broker briefly unavailable)."""

    def __init__(self, real, failures):
        self.real, self.failures, self.attempts = real, failures, 0

    def send(self, queue, message):
        self.attempts += 1
        if self.failures:
            self.failures -= 1
            raise TransportError(f"Storage queue {queue!r}: could not send {message.message_id!r}: 503")
        self.real.send(queue, message)

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_a_briefly_failing_send_is_retried_within_the_dispatch(harness, monkeypatch):
    monkeypatch.setattr(dispatch, "SEND_RETRY_DELAYS", (0.0, 0.0))
    instance = harness.start()
    flaky = FlakyTransport(harness.transport, failures=2)
    monkeypatch.setitem(harness.services.__dict__, "transport", flaky)

    outcome = harness.dispatch(instance, "create_storage")

    assert (outcome["sent"], flaky.attempts) == (True, 3)
    assert [m.message_id for m in harness.work()] == [outcome["message_id"]]
    # one ledger write for the whole dispatch: the Dispatched transition; the send is not recorded
    assert [a.action for a in harness.audit(instance, "create_storage") if a.action != "created"] == [
        "transition"
    ]


def test_dispatch_twice_transitions_once_and_resends_with_the_same_message_id(harness):
    """The send is not recorded, so a re-run for an attempt nobody claimed yet sends again: the same
    MessageId and work, a duplicate the broker's deduplication or the worker's claim absorbs. Only the
    first carries the rows' versions (``ledger``): the re-run read the row, and its copy is claimed
    after a read."""
    instance = harness.start()
    payload = harness.dispatch_payload(instance, "create_storage")
    first = scheduling.dispatch_step(payload, harness.services)
    assert (first["outcome"], first["sent"], first["status"]) == ("dispatched", True, "Dispatched")

    second = scheduling.dispatch_step(payload, harness.services)
    assert (second["outcome"], second["sent"], second["status"]) == ("already-dispatched", True, "Dispatched")

    messages = harness.work()
    assert [m.message_id for m in messages] == [first["message_id"]] * 2
    first_body, second_body = sorted((m.body for m in messages), key=lambda body: "ledger" not in body)
    assert "ledger" in first_body and "ledger" not in second_body  # (a queue need not keep order)
    assert {k: v for k, v in first_body.items() if k != "ledger"} == second_body
    assert len(_transitions(harness, instance, "create_storage", "Dispatched")) == 1


def test_dispatch_rerun_after_the_watchdog_resent_sends_nothing(harness):
    instance = harness.start()
    payload = harness.dispatch_payload(instance, "create_storage")
    assert scheduling.dispatch_step(payload, harness.services)["sent"] is True
    row = harness.ledger.get(instance, "create_storage")
    harness.ledger.update(row, actor="supervisor:t1", reason="resend: test", resent_at=row.updated_at)

    again = scheduling.dispatch_step(payload, harness.services)
    assert (again["outcome"], again["sent"], again["status"]) == ("already-dispatched", False, "Dispatched")
    assert [m.message_id for m in harness.work()] == [again["message_id"]]  # the first send only


def test_dispatch_rerun_after_an_agent_claimed_sends_nothing(harness):
    instance = harness.start()
    payload = harness.dispatch_payload(instance, "create_storage")
    assert scheduling.dispatch_step(payload, harness.services)["sent"] is True
    row = harness.ledger.get(instance, "create_storage")
    harness.ledger.transition(row, S.RUNNING, actor="worker", owner="worker-1")

    again = scheduling.dispatch_step(payload, harness.services)
    assert (again["outcome"], again["sent"], again["status"]) == ("already-dispatched", False, "Running")
    assert [m.message_id for m in harness.work()] == [again["message_id"]]


def test_dispatch_of_an_older_attempt_is_stale_and_a_settled_step_is_not_resent(harness, vclock):
    instance = harness.start()
    harness.dispatch(instance, "create_storage", 1, deadline_in=10)
    harness.work()
    vclock.advance(11)
    assert (
        scheduling.check_step(
            {"instance_id": instance, "step_id": "create_storage", "attempt": 1}, harness.services
        )["state"]
        == "timed_out"
    )
    scheduling.schedule_retry(
        {
            "instance_id": instance,
            "step_id": "create_storage",
            "attempt": 1,
            "retry_at": (vclock.now + timedelta(seconds=5)).isoformat(),
        },
        harness.services,
    )
    assert harness.dispatch(instance, "create_storage", 2)["outcome"] == "dispatched"
    stale = harness.dispatch(instance, "create_storage", 1)
    assert (stale["outcome"], stale["sent"], stale["status"]) == ("stale", False, "Dispatched")
    assert [m.body["attempt"] for m in harness.work()] == [2]


def test_dispatch_compensation_requires_a_compensator(harness):
    instance = harness.start()
    harness.run_step(instance, "send_welcome", input={"to": "a@example.com"})
    outcome = scheduling.dispatch_compensation(
        harness.dispatch_payload(instance, "send_welcome"), harness.services
    )
    assert (outcome["outcome"], outcome["sent"], outcome["status"]) == (
        "not-dispatchable",
        False,
        "Succeeded",
    )


# ---- check_step -----------------------------------------------------------------------------------


def _check(harness, instance, step, attempt=1):
    return scheduling.check_step(
        {"instance_id": instance, "step_id": step, "attempt": attempt}, harness.services
    )


def test_check_step_reports_succeeded_and_failed_from_the_ledger(harness):
    instance = harness.start()
    harness.run_step(instance, "create_storage")
    check = _check(harness, instance, "create_storage")
    assert check["state"] == "succeeded"
    assert check["output"] == decode_json(harness.ledger.get(instance, "create_storage").result_ref)

    faults.inject("dns.register", faults.Fail(message="dns is down"))
    harness.run_step(instance, "register_dns")
    check = _check(harness, instance, "register_dns")
    assert check["state"] == "failed"
    assert "dns is down" in check["error"]


def test_check_step_extends_until_the_deadline_then_times_out(harness, vclock):
    instance = harness.start()
    harness.dispatch(instance, "create_storage", deadline_in=30)
    vclock.advance(10)  # the orchestration's timer fired early (clock skew): wait again
    check = _check(harness, instance, "create_storage")
    assert check["state"] == "extended"
    assert check["deadline"] == harness.ledger.get(instance, "create_storage").deadline.isoformat()

    vclock.advance(25)
    assert _check(harness, instance, "create_storage")["state"] == "timed_out"
    row = harness.ledger.get(instance, "create_storage")
    assert row.status is S.TIMED_OUT
    assert row.deadline == vclock.now + timedelta(seconds=GRACE_SECONDS)
    assert _check(harness, instance, "create_storage")["state"] == "timed_out"  # idempotent
    assert len(_transitions(harness, instance, "create_storage", "TimedOut")) == 1


def test_check_step_sees_a_success_of_a_later_attempt(harness, vclock):
    instance = harness.start()
    harness.dispatch(instance, "create_storage", 1, deadline_in=5)
    vclock.advance(6)
    _check(harness, instance, "create_storage", 1)
    scheduling.schedule_retry(
        {
            "instance_id": instance,
            "step_id": "create_storage",
            "attempt": 1,
            "retry_at": vclock.now.isoformat(),
        },
        harness.services,
    )
    harness.work()
    harness.run_step(instance, "create_storage", 2)
    assert _check(harness, instance, "create_storage", 1)["state"] == "succeeded"


# ---- schedule_retry / give_up_step ----------------------------------------------------------------


def test_schedule_retry_moves_a_failed_attempt_to_retrying_with_grace_once(harness, vclock):
    instance = harness.start()
    faults.inject("storage.create", faults.Fail(times=1))
    harness.run_step(instance, "create_storage")
    retry_at = vclock.now + timedelta(seconds=20)
    payload = {
        "instance_id": instance,
        "step_id": "create_storage",
        "attempt": 1,
        "retry_at": retry_at.isoformat(),
    }

    first = scheduling.schedule_retry(payload, harness.services)
    second = scheduling.schedule_retry(payload, harness.services)
    assert (first["status"], first["changed"]) == ("Retrying", True)
    assert (second["status"], second["changed"]) == ("Retrying", False)
    row = harness.ledger.get(instance, "create_storage")
    assert row.deadline == retry_at + timedelta(seconds=GRACE_SECONDS)

    replies = harness.run_step(instance, "create_storage", 2)
    assert [r.body["outcome"] for r in replies] == ["succeeded"]
    assert harness.ledger.get(instance, "create_storage").status is S.SUCCEEDED


def test_give_up_cancels_a_step_without_compensator_and_marks_one_with(harness):
    instance = harness.start()
    faults.inject("email.send_welcome", faults.Fail())
    harness.run_step(instance, "send_welcome", input={"to": "x@example.com"})
    result = scheduling.give_up_step(
        {"instance_id": instance, "step_id": "send_welcome", "reason": "3 attempts failed"}, harness.services
    )
    assert (result["status"], result["changed"]) == ("Cancelled", True)

    faults.inject("storage.create", faults.Fail())
    harness.run_step(instance, "create_storage")
    payload = {"instance_id": instance, "step_id": "create_storage", "reason": "3 attempts failed"}
    assert scheduling.give_up_step(payload, harness.services)["status"] == "Failed"
    assert scheduling.give_up_step(payload, harness.services)["changed"] is False
    row = harness.ledger.get(instance, "create_storage")
    assert (row.compensation_status, row.last_error) == (GIVEN_UP, "3 attempts failed")


# ---- compensation ---------------------------------------------------------------------------------


def _complete(harness, vclock, instance, step, workflow="order-fulfilment", input=None):
    vclock.advance(1)
    replies = harness.run_step(
        instance, step, workflow=workflow, input=input or {"order_id": "o-1", "amount": 10}
    )
    assert [r.body["outcome"] for r in replies] == ["succeeded"], replies


def test_plan_compensation_undoes_in_reverse_completion_order_given_up_step_first(harness, vclock):
    instance = harness.start("order-fulfilment")
    # Completion order differs from the workflow order: charge_payment, then reserve_stock.
    _complete(harness, vclock, instance, "charge_payment")
    _complete(harness, vclock, instance, "reserve_stock")
    faults.inject("shipping.create_shipment", faults.Fail())
    harness.run_step(instance, "ship_order", workflow="order-fulfilment", input={"order_id": "o-1"})
    scheduling.give_up_step(
        {"instance_id": instance, "step_id": "ship_order", "reason": "no carrier"}, harness.services
    )

    plan = scheduling.plan_compensation({"instance_id": instance}, harness.services)

    assert [s["step_id"] for s in plan["steps"]] == ["ship_order", "reserve_stock", "charge_payment"]
    assert plan["cancelled"] == []
    by_id = {s["step_id"]: s for s in plan["steps"]}
    assert by_id["charge_payment"]["compensator"] == "payments.refund"
    assert by_id["charge_payment"]["deadline_seconds"] == 180
    assert by_id["charge_payment"]["retry"]["max_attempts"] == 5
    assert by_id["charge_payment"]["output"]["payment_id"].startswith("pay_")
    assert by_id["charge_payment"]["input"] == {"order_id": "o-1", "amount": 10}
    assert by_id["ship_order"]["output"] is None
    # A re-run (the activity may run twice) plans the same.
    again = scheduling.plan_compensation({"instance_id": instance}, harness.services)
    assert [s["step_id"] for s in again["steps"]] == ["ship_order", "reserve_stock", "charge_payment"]


def test_plan_compensation_cancels_steps_that_never_ran(harness, vclock):
    instance = harness.start("provision-tenant")
    faults.inject("storage.create", faults.Stall())  # a dead agent: no reply at all
    harness.run_step(instance, "create_storage")
    scheduling.give_up_step(
        {"instance_id": instance, "step_id": "create_storage", "reason": "timed out"}, harness.services
    )

    plan = scheduling.plan_compensation({"instance_id": instance}, harness.services)

    assert [s["step_id"] for s in plan["steps"]] == ["create_storage"]
    assert plan["cancelled"] == ["register_dns", "send_welcome"]
    statuses = {r.step_id: r.status for r in harness.ledger.list_for_instance(instance)}
    assert statuses == {
        "create_storage": S.TIMED_OUT,
        "register_dns": S.CANCELLED,
        "send_welcome": S.CANCELLED,
    }


def test_compensation_dispatch_check_and_finish(harness, vclock):
    instance = harness.start("provision-tenant")
    _complete(
        harness, vclock, instance, "create_storage", workflow="provision-tenant", input={"tenant_id": "t1"}
    )
    payload = harness.dispatch_payload(instance, "create_storage", 1, kind="compensate", deadline_in=20)
    first = scheduling.dispatch_compensation(payload, harness.services)
    assert (first["outcome"], first["status"], first["sent"]) == ("dispatched", "Compensating", True)
    assert first["message_id"] == message_id_for(instance, "create_storage", 1, kind="compensate")
    # Not claimed yet: a re-run sends the same MessageId again (a duplicate, as for work).
    again = scheduling.dispatch_compensation(payload, harness.services)
    assert (again["outcome"], again["sent"]) == ("already-dispatched", True)
    messages = harness.work()
    assert [m.message_id for m in messages] == [first["message_id"]] * 2
    message = messages[0]
    assert messages[1].body == message.body
    assert (message.body["kind"], message.body["agent"]) == ("compensate", "storage.delete")

    check = {"instance_id": instance, "step_id": "create_storage", "attempt": 1}
    assert scheduling.check_compensation(check, harness.services)["state"] == "extended"
    vclock.advance(21)
    assert scheduling.check_compensation(check, harness.services)["state"] == "timed_out"
    row = harness.ledger.get(instance, "create_storage")
    assert (row.status, row.compensation_status) == (S.COMPENSATING, "TimedOut")

    finished = scheduling.finish_compensation(
        {"instance_id": instance, "step_id": "create_storage", "error": "storage.delete kept timing out"},
        harness.services,
    )
    assert (finished["status"], finished["changed"]) == ("CompensationFailed", True)
    attention = harness.ledger.needing_attention()
    assert [(r.instance_id, r.step_id, r.last_error) for r in attention] == [
        (instance, "create_storage", "storage.delete kept timing out")
    ]
    assert (
        scheduling.finish_compensation(
            {"instance_id": instance, "step_id": "create_storage", "error": "again"}, harness.services
        )["changed"]
        is False
    )
    assert scheduling.check_compensation(check, harness.services)["state"] == "failed"


def test_compensation_dispatch_rerun_after_the_compensator_ran_sends_nothing(harness, vclock):
    instance = harness.start("provision-tenant")
    _complete(
        harness, vclock, instance, "create_storage", workflow="provision-tenant", input={"tenant_id": "t3"}
    )
    payload = harness.dispatch_payload(instance, "create_storage", 1, kind="compensate")
    assert scheduling.dispatch_compensation(payload, harness.services)["sent"] is True
    for work in harness.work():
        harness.deliver(work)
    assert harness.ledger.get(instance, "create_storage").status is S.COMPENSATED

    again = scheduling.dispatch_compensation(payload, harness.services)
    assert (again["outcome"], again["sent"], again["status"]) == ("already-dispatched", False, "Compensated")
    assert harness.work() == []


def test_finish_compensation_of_a_step_whose_compensator_never_dispatched(harness, vclock):
    instance = harness.start("provision-tenant")
    _complete(
        harness, vclock, instance, "create_storage", workflow="provision-tenant", input={"tenant_id": "t2"}
    )
    result = scheduling.finish_compensation(
        {"instance_id": instance, "step_id": "create_storage", "error": "compensator unavailable"},
        harness.services,
    )
    assert result["status"] == "CompensationFailed"
    assert [r.step_id for r in harness.ledger.needing_attention() if r.instance_id == instance] == [
        "create_storage"
    ]


def test_activity_bodies_cover_every_contract_activity():
    import activities
    from workflow_core import contracts as c

    names = {getattr(c, n) for n in dir(c) if n.startswith("ACTIVITY_")}
    assert set(activities.ACTIVITY_BODIES) == names


def test_schedule_retry_of_a_compensator_moves_only_its_deadline(harness, vclock):
    instance = harness.start()
    harness.run_step(instance, "register_dns")
    faults.inject("dns.unregister", faults.Fail(times=1))
    scheduling.dispatch_compensation(
        harness.dispatch_payload(instance, "register_dns", 1, kind="compensate"), harness.services
    )
    for work in harness.work():
        harness.deliver(work)
    retry_at = vclock.now + timedelta(seconds=600)  # a backoff longer than the grace
    payload = {
        "instance_id": instance,
        "step_id": "register_dns",
        "attempt": 1,
        "retry_at": retry_at.isoformat(),
        "kind": "compensate",
    }

    first = scheduling.schedule_retry(payload, harness.services)
    second = scheduling.schedule_retry(payload, harness.services)

    assert (first["status"], first["changed"], second["changed"]) == ("Compensating", True, False)
    row = harness.ledger.get(instance, "register_dns")
    assert (row.compensation_status, row.deadline) == ("Failed", retry_at + timedelta(seconds=GRACE_SECONDS))
    assert instance not in [
        r.instance_id for r in harness.ledger.overdue(vclock.now + timedelta(seconds=300))
    ]
    nxt = harness.dispatch_payload(instance, "register_dns", 2, kind="compensate")
    assert scheduling.dispatch_compensation(nxt, harness.services)["outcome"] == "dispatched"


def test_dispatch_records_the_trace_context_and_sends_it_with_the_work_message(harness):
    """Without an exporting tracer in this process, the input's context is recorded and sent as is
    (with one, the dispatch span's own: tests/e2e/test_tracing.py); a malformed one is dropped."""
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    instance = harness.start()
    payload = {**harness.dispatch_payload(instance, "create_storage"), "trace": {"traceparent": parent}}
    assert scheduling.dispatch_step(payload, harness.services)["sent"] is True
    assert harness.ledger.get(instance, "create_storage").trace_parent == parent
    (message,) = harness.work()
    assert message.application_properties["traceparent"] == parent

    other = harness.start()
    bad = {**harness.dispatch_payload(other, "create_storage"), "trace": {"traceparent": "forged"}}
    assert scheduling.dispatch_step(bad, harness.services)["sent"] is True
    assert harness.ledger.get(other, "create_storage").trace_parent is None
    (message,) = harness.work()
    assert "traceparent" not in message.application_properties
