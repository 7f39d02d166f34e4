"""The watchdog end to end: real orchestrators and activities in the durable test host (virtual
clock), real workers and result handler pumping real Azurite queues, the real ledger, and the
watchdog's timer function called every 30 s of host time with the host's Durable client."""

from __future__ import annotations

import json
from datetime import timedelta

import azure.durable_functions as df
import azure.functions as func
import pytest
from azure.functions.timer import TimerRequest

import api
import supervisor
from supervisor import watchdog
from tests.helpers.app import settings_env
from workflow_core.contracts import compensation_instance_id
from workflow_core.ledger import StepStatus
from workflow_core.runtime import get_services, reset_services
from workflow_core.transport import message_id_for, pump

durable_host = pytest.importorskip("devtools.durable_host")
activities = pytest.importorskip("activities")
orchestrators = pytest.importorskip("orchestrators")
faults = pytest.importorskip("activities.worker.handlers.faults")

S = StepStatus
Status = df.OrchestrationRuntimeStatus
TICK = timedelta(seconds=30)


class Stack:
    """Host + services + pumps + the watchdog timer, wired like the Function App."""

    def __init__(self, host, services) -> None:
        self.host = host
        self.services = services
        self.ledger = services.ledger
        settings = services.settings
        body = watchdog.supervisor_watchdog._function.get_user_function().__wrapped__  # the SDK client shim

        def worker() -> int:
            return len(
                pump(
                    services.transport,
                    settings.work_queue,
                    lambda m: activities.process_work_message(
                        m.body, delivery_count=m.delivery_count, services=services, worker_id="worker-e2e"
                    ),
                    max_delivery_count=settings.max_delivery_count,
                    max_messages=16,
                )
            )

        def results() -> int:
            return len(
                pump(
                    services.transport,
                    settings.result_queue,
                    lambda m: host.run_async(activities.handle_result(m.body, host.client, services)),
                    max_delivery_count=settings.max_delivery_count,
                    max_messages=16,
                )
            )

        def tick() -> None:
            host.call(body, timer=TimerRequest(), client=host.client)

        host.add_pump(worker, "agent_worker")
        host.add_pump(results, "agent_result_handler")
        host.add_periodic(tick, TICK, name="supervisor_watchdog")

    def supervisor_audit(self, instance_id: str):
        return [a for a in self.ledger.audit_trail(instance_id) if a.actor.startswith("supervisor:")]

    def status(self, instance_id: str):
        status = self.host.get_status(instance_id)
        return status.runtime_status if status else None


@pytest.fixture
def stack(azurite, unique_name, monkeypatch):
    env = settings_env(azurite, unique_name, WATCHDOG_SCHEDULE="*/30 * * * * *")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    reset_services()
    faults.clear()
    services = get_services()
    app = df.DFApp()
    for blueprint in (orchestrators.blueprint, activities.blueprint, supervisor.blueprint, api.blueprint):
        app.register_blueprint(blueprint)
    with durable_host.DurableTestHost(app) as host:
        yield Stack(host, services)
    faults.clear()
    reset_services()


def start_provisioning(stack: Stack, instance_id: str) -> str:
    """Through the real HTTP starter: the instance record and its Pending steps are written first."""
    workflow_input = {"tenant_id": instance_id, "admin_email": "a@example.net"}
    request = func.HttpRequest(
        "POST",
        f"{stack.host.base_url}/api/workflows/provision-tenant/instances",
        headers={"Content-Type": "application/json", "X-SAS-Client": "e2e-test"},
        params={"instance_id": instance_id},
        route_params={"name": "provision-tenant"},
        body=json.dumps(workflow_input).encode(),
    )
    response = stack.host.call("http_start_workflow", request, client=stack.host.client)
    assert response.status_code == 202, response.get_body()
    return instance_id


def test_a_healthy_run_is_left_alone(stack):
    iid = start_provisioning(stack, "e2e-healthy")
    faults.inject("dns.register", faults.Fail(times=1))  # one failure: the orchestration retries itself
    status = stack.host.run_until_complete(iid)
    assert status.runtime_status == Status.Completed and status.output["status"] == "succeeded"
    assert [s.status for s in stack.ledger.list_for_instance(iid)] == [S.SUCCEEDED] * 3
    assert stack.ledger.get(iid, "register_dns").attempt == 2
    # The orchestration handled everything itself: the watchdog never had to touch a step.
    assert stack.supervisor_audit(iid) == []


def test_operator_retry_of_a_failed_compensation_is_enacted_by_the_watchdog(stack):
    iid = start_provisioning(stack, "e2e-operator")
    faults.inject("email.send_welcome", faults.Fail())  # the last step always fails: give up
    faults.inject("dns.unregister", faults.Fail())  # and undoing DNS fails too
    host = stack.host
    status = host.run_until_complete(iid, timeout_virtual=timedelta(hours=2))
    assert status.output["status"] == "compensation_failed"
    stuck = stack.ledger.get(iid, "register_dns")
    assert stuck.status is S.COMPENSATION_FAILED
    assert [r.step_id for r in stack.ledger.needing_attention()] == ["register_dns"]

    # The DNS service is fixed; an operator asks for the compensation to be retried.
    faults.clear()
    from supervisor import operator

    operator.retry_step(stack.ledger, iid, "register_dns", user="ops", reason="dns api fixed")
    compensation = compensation_instance_id(iid)
    # Enacted at the next tick (at most 30 s away): the compensation is restarted and the
    # compensator runs again, as its next attempt, right away.
    host.run_until(
        lambda: stack.ledger.get(iid, "register_dns").status is S.COMPENSATED,
        timeout_virtual=timedelta(seconds=45),
    )
    assert stack.ledger.get(iid, "register_dns").compensation_attempt == stuck.compensation_attempt + 1
    host.run_until(lambda: stack.status(compensation) == Status.Completed)
    assert host.get_status(compensation).output["status"] == "compensated"
    assert stack.ledger.needing_attention() == []
    # the instance record (CompensationFailed, flagged) decided: the operator's retry answered it
    rows = [r for r in stack.supervisor_audit(iid) if r.reason.startswith("restart_compensation:")]
    assert len(rows) == 1 and "requested by operator:ops" in rows[0].reason


def test_crash_between_ledger_write_and_send_is_healed_by_the_watchdog_end_to_end(azurite):
    """The process running ``dispatch_step`` dies after the ledger write, before the send, and the
    Durable runtime redelivers the activity only after five minutes (its lease): the orchestration
    waits on the activity, so only the watchdog notices. It re-sends the same message once the
    step is past its deadline (120 s) and the grace; the workflow completes on attempt 1 and the
    message went out exactly once (the redelivered activity finds the step claimed or settled)."""
    harness = pytest.importorskip("devtools.harness")
    with harness.PatternHarness(azurite=azurite) as h:
        iid = h.start_workflow("provision-tenant", {"tenant_id": "t-crash", "admin_email": "a@example.net"})
        h.crash_dispatch_before_send("register_dns")
        status = h.run_until_complete(iid)

        assert status.output["status"] == "succeeded"
        assert h.transport.sent_ids[message_id_for(iid, "register_dns", 1)] == 1
        assert h.steps(iid)["register_dns"].attempt == 1  # healed without spending an attempt
        resends = [d for d in h.decisions(iid) if d.action == "resend"]
        assert [(d.step_id, d.status) for d in resends] == [("register_dns", "Dispatched")]
        assert h.handler_calls(iid, "register_dns") == 1 and h.double_effects() == {}


def test_an_operator_compensation_while_the_scheduler_runs_never_leaves_it_waiting(stack):
    """The watchdog starts the instance's compensation top-level; a scheduler still alive would later
    give register_dns up and call that same id as its sub-orchestration, a start the framework drops
    (duplicate start event): before the watchdog ended the scheduler first, the workflow stayed
    Running for good here (TimeoutError after 3 h of host time, with the dropped start in the
    timeline)."""
    from supervisor import operator

    iid = start_provisioning(stack, "e2e-op-live")
    faults.inject("dns.register", faults.Stall())  # register_dns never answers: the scheduler would give up
    faults.inject("storage.delete", faults.Stall())  # and the operator's compensation takes its time
    host = stack.host
    host.run_until(lambda: stack.ledger.get(iid, "create_storage").status is S.SUCCEEDED)
    operator.request_compensation(stack.ledger, iid, "create_storage", user="ops", reason="customer left")

    compensation = compensation_instance_id(iid)
    host.run_until(
        lambda: stack.status(iid) != Status.Running and stack.status(compensation) == Status.Completed,
        timeout_virtual=timedelta(hours=3),
    )

    assert stack.status(iid) == Status.Terminated
    assert host.get_status(compensation).output["status"] == "compensation_failed"  # storage.delete stalls
    assert "dropped" not in host.format_timeline()
    rows = [r.reason for r in stack.supervisor_audit(iid)]
    ended = [r for r in rows if r.startswith("end_scheduler:")]
    assert len(ended) == 1 and "terminated before the compensation starts" in ended[0]
    assert rows.index(ended[0]) < next(i for i, r in enumerate(rows) if r.startswith("restart_compensation:"))
