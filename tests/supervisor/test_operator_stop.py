"""Stop means stop, cancel means undo: an operator's stop or cancel marks the instance record (who,
why) before the orchestration is terminated, and the watchdog, ticking, never resumes it."""

from __future__ import annotations

from datetime import timedelta

from api.operator_api import instance_action
from tests.api.support import http_request, json_of
from tests.helpers.fault_matrix import start_provisioning, storage_queue_only

# Long enough for everything a watchdog would do to an instance it ignored the stop of: provision-tenant's
# longest step (300 s, three attempts, backoff up to 120 s) times out twice over, its instance would be
# resumed (max_resumes 3) and a lease (300 s) expires 12 times. Each virtual half minute is a real tick.
HOURS_OF_TICKS = timedelta(hours=1)


def post(instance_id, action, body):
    return http_request(
        "POST",
        f"/api/instances/{instance_id}/{action}",
        body=body,
        route_params={"instance_id": instance_id, "action": action},
    )


def act(h, iid, action, client=None, **body):
    request = post(iid, action, {"reason": "customer withdrew", **body})
    return h.host.run_async(instance_action(request, client or h.host.client, h.services))


@storage_queue_only
def test_a_stopped_provisioning_is_never_resumed_and_send_welcome_never_runs(harness):
    h = harness
    held = h.hold("register_dns")
    iid = start_provisioning(h)
    h.run_until(lambda: len(h.held(held)) == 1)

    response = act(h, iid, "stop")

    assert response.status_code == 200, response.get_body()
    body = json_of(response)
    assert body["terminated"] is True and body["instance"]["status"] == "Stopped"
    assert body["instance"]["needsAttention"] is True
    assert "stopped by operator:" in body["instance"]["attentionReason"]
    h.release(held)
    # hours of watchdog ticks: the shipped policy (on_scheduler_lost: resume) would resume a
    # terminated instance; a stopped one stays stopped
    h.run_until(lambda: h.elapsed() >= HOURS_OF_TICKS, timeout=HOURS_OF_TICKS * 2)
    assert h.handler_calls(iid, "send_welcome") == 0
    assert "send_welcome" not in h.statuses(iid) or h.statuses(iid)["send_welcome"] != "Succeeded"
    record = h.ledger.get_instance(iid)
    assert record.status.value == "Stopped" and record.resume_count == 0
    flagged, _ = h.ledger.list_instances(needs_attention=True)
    assert iid in [r.instance_id for r in flagged]  # its done steps wait in the operators' inbox
    moves = [(a.actor, a.reason) for a in h.ledger.audit_trail(iid) if a.actor.startswith("operator:")]
    assert moves and moves[0][1] == "operator stop: customer withdrew"
    assert h.steps(iid)["create_storage"].status.value == "Succeeded"  # done steps are left as they are


@storage_queue_only
def test_a_cancelled_provisioning_is_compensated_in_reverse_order(harness):
    h = harness
    held = h.hold("send_welcome")
    iid = start_provisioning(h)
    h.run_until(lambda: len(h.held(held)) == 1)

    response = act(h, iid, "cancel", expectedStatus="Running")

    assert response.status_code == 200, response.get_body()
    h.release(held)
    h.run_until(lambda: h.ledger.get_instance(iid).status.value in ("Compensated", "CompensationFailed"))
    assert h.ledger.get_instance(iid).status.value == "Compensated"
    undone = [
        a.step_id for a in h.ledger.audit_trail(iid) if a.to_status == "Compensated" and a.step_id != "*"
    ]
    assert undone == ["register_dns", "create_storage"]
    assert h.handler_calls(iid, "send_welcome", kind="work") <= 1
    moves = [a.reason for a in h.ledger.audit_trail(iid) if a.actor.startswith("operator:")]
    assert moves[0] == "operator cancel: customer withdrew"


class FailingTerminate:
    """A Durable client whose terminate fails: the audit row must already be there."""

    def __init__(self, inner):
        self.inner = inner

    async def get_status(self, *args, **kwargs):
        return await self.inner.get_status(*args, **kwargs)

    async def terminate(self, instance_id, reason):
        raise RuntimeError("the task hub is unreachable")


@storage_queue_only
def test_the_stop_is_audited_before_the_terminate_even_when_the_terminate_fails(harness):
    h = harness
    held = h.hold("register_dns")
    iid = start_provisioning(h)
    h.run_until(lambda: len(h.held(held)) == 1)

    response = act(h, iid, "stop", client=FailingTerminate(h.host.client))

    assert response.status_code >= 500
    moves = [a.reason for a in h.ledger.audit_trail(iid) if a.actor.startswith("operator:")]
    assert moves == ["operator stop: customer withdrew"]
    assert h.ledger.get_instance(iid).status.value == "Stopped"


@storage_queue_only
def test_a_stop_that_names_a_status_the_instance_left_is_refused(harness):
    h = harness
    iid = start_provisioning(h)
    h.run_until_complete(iid)

    response = act(h, iid, "stop", expectedStatus="Running")

    assert response.status_code == 409
    assert "Succeeded now, not Running" in json_of(response)["error"]


@storage_queue_only
def test_a_stop_while_a_step_never_answers_undoes_nothing_and_runs_nothing_later(harness):
    """The step out with its agent at the stop never answers: hours of ticks neither compensate the
    done steps nor run the later ones (a stop is not a cancel)."""
    h = harness
    held = h.hold("register_dns")
    iid = start_provisioning(h)
    h.run_until(lambda: len(h.held(held)) == 1)
    assert act(h, iid, "stop").status_code == 200
    h.run_until(lambda: h.elapsed() >= HOURS_OF_TICKS, timeout=HOURS_OF_TICKS * 2)
    statuses = h.statuses(iid)
    assert statuses["create_storage"] == "Succeeded" and statuses["send_welcome"] == "Pending", statuses
    assert h.ledger.get_instance(iid).status.value == "Stopped"


@storage_queue_only
def test_a_stopped_instance_cancelled_later_is_compensated_and_leaves_the_inbox(harness):
    h = harness
    held = h.hold("send_welcome")
    iid = start_provisioning(h)
    h.run_until(lambda: len(h.held(held)) == 1)
    assert act(h, iid, "stop").status_code == 200
    h.release(held)
    h.run_until(lambda: h.elapsed() >= timedelta(hours=1), timeout=timedelta(hours=2))
    assert h.ledger.get_instance(iid).status.value == "Stopped"

    response = act(h, iid, "cancel", expectedStatus="Stopped")

    assert response.status_code == 200, response.get_body()
    assert json_of(response)["terminated"] is False  # its orchestration ended at the stop
    h.run_until(lambda: h.ledger.get_instance(iid).status.value in ("Compensated", "CompensationFailed"))
    record = h.ledger.get_instance(iid)
    assert record.status.value == "Compensated" and not record.needs_attention
    undone = [
        a.step_id for a in h.ledger.audit_trail(iid) if a.to_status == "Compensated" and a.step_id != "*"
    ]
    assert undone == ["register_dns", "create_storage"]


@storage_queue_only
def test_a_stopped_instance_is_not_noted_again_every_lease(harness):
    """The step out at the stop is let go once: hours of ticks write a bounded audit trail."""
    h = harness
    held = h.hold("register_dns")
    iid = start_provisioning(h)
    h.run_until(lambda: len(h.held(held)) == 1)
    assert act(h, iid, "stop").status_code == 200
    h.run_until(lambda: h.elapsed() >= timedelta(hours=1), timeout=timedelta(hours=2))
    first = len(h.ledger.audit_trail(iid))
    h.run_until(lambda: h.elapsed() >= timedelta(hours=1) + HOURS_OF_TICKS, timeout=HOURS_OF_TICKS * 3)
    assert len(h.ledger.audit_trail(iid)) == first


@storage_queue_only
def test_a_stop_from_sas_fences_the_scheduler_off_through_the_ledger_alone(harness):
    """``sas`` holds no Durable client: its stop only writes the ledger. The scheduler, still running,
    is refused its next dispatch, and nothing resumes or compensates the instance."""
    from supervisor import operator

    h = harness
    held = h.hold("register_dns")
    iid = start_provisioning(h)
    h.run_until(lambda: len(h.held(held)) == 1)

    operator.move_instance(h.ledger, iid, "stop", reason="wrong tenant", user="alice")
    h.release(held)
    h.run_until(lambda: h.elapsed() >= HOURS_OF_TICKS, timeout=HOURS_OF_TICKS * 2)

    assert h.handler_calls(iid, "send_welcome") == 0
    statuses = h.statuses(iid)
    # the scheduler, refused every dispatch of send_welcome, gave it up; nothing was undone
    assert statuses == {
        "create_storage": "Succeeded",
        "register_dns": "Succeeded",
        "send_welcome": "Cancelled",
    }, statuses
    record = h.ledger.get_instance(iid)
    assert record.status.value == "Stopped" and record.resume_count == 0 and record.needs_attention
