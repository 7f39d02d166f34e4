"""GET /api/workflows/{instance_id} and /steps: orchestration status merged with the step ledger."""

from __future__ import annotations

from datetime import timedelta

import pytest

from api.handlers import get_workflow_status, get_workflow_steps
from tests.api.support import HOST, http_request, json_of
from workflow_core import clock
from workflow_core.contracts import compensation_instance_id
from workflow_core.ledger import NewStep, StepLedger, StepStatus

WORKFLOW_INPUT = {
    "workflow": "provision-tenant",
    "input": {"tenant_id": "contoso", "admin_email": "a@b.example"},
}
STEPS = [
    NewStep(
        step_id="create_storage",
        step_name="Create storage account",
        agent="storage.create",
        compensator="storage.delete",
        max_attempts=3,
    ),
    NewStep(
        step_id="register_dns",
        step_name="Register DNS name",
        agent="dns.register",
        compensator="dns.unregister",
        max_attempts=3,
    ),
    NewStep(
        step_id="send_welcome", step_name="Send welcome e-mail", agent="email.send_welcome", max_attempts=3
    ),
]


def get_status(instance_id: str):
    return http_request("GET", f"/api/workflows/{instance_id}", route_params={"instance_id": instance_id})


def get_steps(instance_id: str):
    return http_request(
        "GET", f"/api/workflows/{instance_id}/steps", route_params={"instance_id": instance_id}
    )


def write_history(ledger: StepLedger, instance_id: str) -> None:
    """create_storage succeeded; register_dns failed on attempt 1 and was re-dispatched."""
    ledger.create_steps(instance_id, "provision-tenant", STEPS, actor="scheduler")
    deadline = clock.utcnow() + timedelta(minutes=5)
    step = ledger.get(instance_id, "create_storage")
    step = ledger.transition(
        step,
        StepStatus.DISPATCHED,
        actor="scheduler",
        reason="attempt 1",
        attempt=1,
        deadline=deadline,
        owner="scheduler",
    )
    step = ledger.transition(step, StepStatus.RUNNING, actor="worker-7", owner="worker-7")
    ledger.transition(step, StepStatus.SUCCEEDED, actor="worker-7", result_ref='{"account": "stcontoso"}')
    step = ledger.get(instance_id, "register_dns")
    step = ledger.transition(
        step, StepStatus.DISPATCHED, actor="scheduler", attempt=1, deadline=deadline, owner="scheduler"
    )
    step = ledger.transition(step, StepStatus.FAILED, actor="worker-3", last_error="DNS zone is locked")
    step = ledger.transition(
        step, StepStatus.RETRYING, actor="scheduler", reason="backoff 5s", deadline=deadline
    )
    ledger.transition(
        step, StepStatus.DISPATCHED, actor="scheduler", attempt=2, deadline=deadline, owner="scheduler"
    )


def test_status_merges_the_orchestration_with_the_ledger_rows(run, stub, client, services, ledger):
    custom = {"step": "register_dns", "attempt": 2}
    stub.add_instance("tenant-42", input=WORKFLOW_INPUT, runtime_status="Running", custom_status=custom)
    write_history(ledger, "tenant-42")

    response = run(get_workflow_status(get_status("tenant-42"), client, services))

    assert response.status_code == 200, response.get_body()
    body = json_of(response)
    assert body["instanceId"] == "tenant-42"
    assert body["workflow"] == "provision-tenant"
    assert body["runtimeStatus"] == "Running"
    orchestration = body["orchestration"]
    assert orchestration["runtimeStatus"] == "Running"
    assert orchestration["customStatus"] == custom
    assert orchestration["output"] is None
    assert orchestration["createdTime"].endswith("Z") and orchestration["lastUpdatedTime"].endswith("Z")
    assert body["compensation"] is None
    assert body["stepCounts"] == {"Dispatched": 1, "Pending": 1, "Succeeded": 1}
    storage, dns, welcome = body["steps"]
    assert [s["id"] for s in body["steps"]] == ["create_storage", "register_dns", "send_welcome"]
    assert storage["status"] == "Succeeded" and storage["output"] == {"account": "stcontoso"}
    assert storage["agent"] == "storage.create" and storage["owner"] == "worker-7"
    assert storage["completedAt"] is not None
    assert dns["status"] == "Dispatched" and dns["attempt"] == 2 and dns["maxAttempts"] == 3
    assert dns["deadline"].endswith("Z")
    assert dns["lastError"] == "DNS zone is locked"
    assert dns["compensation"] == {"compensator": "dns.unregister", "status": None, "attempt": 0}
    assert welcome["status"] == "Pending" and welcome["attempt"] == 0 and welcome["deadline"] is None
    assert body["links"] == {
        "self": f"{HOST}/api/workflows/tenant-42",
        "steps": f"{HOST}/api/workflows/tenant-42/steps",
    }
    # The client asked the Durable host about the instance and its compensation orchestration.
    paths = {r.path for r in stub.requests_to("GET", "/instances/")}
    assert paths == {
        "/durabletask/instances/tenant-42",
        f"/durabletask/instances/{compensation_instance_id('tenant-42')}",
    }


def test_status_shows_the_compensation_orchestration(run, stub, client, services, ledger):
    stub.add_instance(
        "tenant-43", input=WORKFLOW_INPUT, runtime_status="Completed", output={"outcome": "compensated"}
    )
    stub.add_instance(
        compensation_instance_id("tenant-43"), name="compensation_orchestrator", runtime_status="Completed"
    )
    write_history(ledger, "tenant-43")

    body = json_of(run(get_workflow_status(get_status("tenant-43"), client, services)))

    assert body["orchestration"]["output"] == {"outcome": "compensated"}
    assert body["compensation"]["name"] == "compensation_orchestrator"
    assert body["compensation"]["runtimeStatus"] == "Completed"


def test_status_with_only_ledger_rows(run, stub, client, services, ledger):
    """The orchestration's history was purged, but the ledger still tells what happened."""
    write_history(ledger, "purged-1")

    body = json_of(run(get_workflow_status(get_status("purged-1"), client, services)))

    assert body["orchestration"] is None and body["runtimeStatus"] is None
    assert body["workflow"] == "provision-tenant"
    assert len(body["steps"]) == 3


def test_status_before_the_steps_are_written(run, stub, client, services):
    stub.add_instance("fresh-1", input=WORKFLOW_INPUT, runtime_status="Pending")

    body = json_of(run(get_workflow_status(get_status("fresh-1"), client, services)))

    assert body["runtimeStatus"] == "Pending"
    assert body["workflow"] == "provision-tenant"  # from the orchestration's input
    assert body["steps"] == [] and body["stepCounts"] == {}


def test_unknown_instance_is_a_404(run, stub, client, services):
    response = run(get_workflow_status(get_status("nobody-1"), client, services))

    assert response.status_code == 404
    body = json_of(response)
    assert body["error"] == "no workflow instance 'nobody-1'"
    assert body["details"]


@pytest.mark.parametrize("handler", [get_workflow_status, get_workflow_steps])
@pytest.mark.parametrize("instance_id", ["bad id", "a#b", "", "_x"])
def test_malformed_instance_id_in_the_url_is_a_400(run, stub, client, services, handler, instance_id):
    request = http_request("GET", "/api/workflows/x", route_params={"instance_id": instance_id})

    response = run(handler(request, client, services))

    assert response.status_code == 400
    body = json_of(response)
    assert body["error"] == "invalid instance id in the URL"
    assert body["details"][0].startswith("instance id")
    assert stub.requests == []


def test_steps_returns_the_audit_timeline_oldest_first(run, stub, client, services, ledger):
    write_history(ledger, "tenant-44")

    response = run(get_workflow_steps(get_steps("tenant-44"), client, services))

    assert response.status_code == 200, response.get_body()
    body = json_of(response)
    assert body["workflow"] == "provision-tenant"
    assert [s["status"] for s in body["steps"]] == ["Succeeded", "Dispatched", "Pending"]
    timeline = body["timeline"]
    assert [(t["step"], t["action"], t["from"], t["to"]) for t in timeline] == [
        ("*", "created", None, "Pending"),
        ("create_storage", "transition", "Pending", "Dispatched"),
        ("create_storage", "transition", "Dispatched", "Running"),
        ("create_storage", "transition", "Running", "Succeeded"),
        ("register_dns", "transition", "Pending", "Dispatched"),
        ("register_dns", "transition", "Dispatched", "Failed"),
        ("register_dns", "transition", "Failed", "Retrying"),
        ("register_dns", "transition", "Retrying", "Dispatched"),
    ]
    assert [t["at"] for t in timeline] == sorted(t["at"] for t in timeline)
    assert timeline[0]["reason"] == "workflow provision-tenant with 3 steps"
    assert (
        timeline[1]["actor"] == "scheduler"
        and timeline[1]["attempt"] == 1
        and timeline[1]["reason"] == "attempt 1"
    )
    assert timeline[2]["actor"] == "worker-7"
    assert timeline[-1]["attempt"] == 2
    assert body["links"]["status"] == f"{HOST}/api/workflows/tenant-44"
    assert stub.requests == []  # the ledger answered; no Durable call needed


def test_steps_of_an_orchestration_that_has_not_written_them_yet(run, stub, client, services):
    stub.add_instance("fresh-2", input=WORKFLOW_INPUT, runtime_status="Running")

    response = run(get_workflow_steps(get_steps("fresh-2"), client, services))

    assert response.status_code == 200
    body = json_of(response)
    assert body["steps"] == [] and body["timeline"] == []
    assert body["workflow"] == "provision-tenant"


def test_steps_of_an_unknown_instance_is_a_404(run, stub, client, services):
    response = run(get_workflow_steps(get_steps("nobody-2"), client, services))

    assert response.status_code == 404
    assert json_of(response)["error"] == "no workflow instance 'nobody-2'"


def test_the_instance_page_shows_the_last_error_as_of_the_current_attempt(
    run, stub, client, services, ledger
):
    """register_dns failed in attempt 1 and attempt 2 is out: the console's "Last error" must not
    present attempt 1's error as attempt 2's; it is named as attempt 1's instead."""
    from api.operator_api import get_instance

    write_history(ledger, "tenant-43")
    request = http_request("GET", "/api/instances/tenant-43", route_params={"instance_id": "tenant-43"})

    body = json_of(run(get_instance(request, client, services)))

    dns = {s["id"]: s for s in body["steps"]}["register_dns"]
    assert dns["attempt"] == 2 and dns["lastError"] is None
    assert dns["earlierError"] == {"attempt": 1, "error": "DNS zone is locked"}
    storage = {s["id"]: s for s in body["steps"]}["create_storage"]
    assert "earlierError" not in storage
