"""POST /api/workflows/{name}/instances: validation, instance ids, conflicts and the 202 with status URLs."""

from __future__ import annotations

import asyncio
import re

import pytest
from azure.durable_functions import DurableOrchestrationClient

from api.handlers import start_workflow
from tests.api.support import HOST, http_request, json_of
from workflow_core.contracts import WORKFLOW_ORCHESTRATOR
from workflow_core.ledger import NewStep
from workflow_core.workflows import get_workflow, load_workflows, pin

GOOD_INPUT = {"tenant_id": "contoso", "admin_email": "admin@contoso.example"}


def post(name: str, body=b"", params=None):
    return http_request(
        "POST", f"/api/workflows/{name}/instances", body=body, params=params, route_params={"name": name}
    )


def test_starts_the_orchestrator_with_the_validated_input_and_returns_status_urls(
    run, stub, client, services
):
    response = run(
        start_workflow(
            post("provision-tenant", GOOD_INPUT, {"instance_id": "tenant-contoso-1"}), client, services
        )
    )

    assert response.status_code == 202, response.get_body()
    body = json_of(response)
    # The stub (the Durable extension's HTTP API) received exactly one start, for our orchestrator,
    # with the input validated and its defaults filled in.
    starts = stub.requests_to("POST", "/orchestrators/")
    assert [r.path for r in starts] == [
        f"/durabletask/orchestrators/{WORKFLOW_ORCHESTRATOR}/tenant-contoso-1"
    ]
    current = pin(get_workflow("provision-tenant"))
    started = dict(stub.instances["tenant-contoso-1"].input)
    rows = started.pop("rows")
    assert started == {
        "workflow": "provision-tenant",
        "input": {**GOOD_INPUT, "region": "westeurope", "plan": "standard"},
        # pinned: the definition travels with the input, verified against its version
        "version": current.version,
        "definition": current.data,
        # the starter created the steps with the instance record: the orchestration starts at step 0
        "state": {"position": 0, "completed": [], "outputs": {}, "generation": 0},
    }
    steps = services.ledger.list_for_instance("tenant-contoso-1")
    assert [(r.step_id, r.status.value, r.workflow_version) for r in steps] == [
        (step.id, "Pending", current.version) for step in current.definition.steps
    ]
    # ... and the versions it wrote, for the first dispatches to write against unread: each step's
    # ETag and the instance record's snapshot (its ETag, without the workflow input it carries)
    assert rows["steps"] == {r.step_id: r.etag for r in steps}
    record = services.ledger.get_instance("tenant-contoso-1")
    assert rows["instance"]["etag"] == record.etag and rows["instance"]["status"] == "Running"
    assert "input_ref" not in rows["instance"] and record.input_ref is not None
    assert body["version"] == current.version
    # Durable's management URLs, rebased on the caller's host, plus our own views.
    assert body["id"] == body["instanceId"] == "tenant-contoso-1"
    assert body["workflow"] == "provision-tenant"
    webhooks = f"{HOST}/runtime/webhooks/durabletask/instances/tenant-contoso-1"
    assert body["statusQueryGetUri"].startswith(webhooks + "?taskHub=")
    assert body["sendEventPostUri"].startswith(webhooks + "/raiseEvent/{eventName}?")
    assert body["terminatePostUri"].startswith(webhooks + "/terminate?")
    assert body["purgeHistoryDeleteUri"].startswith(webhooks + "?")
    assert body["statusUrl"] == f"{HOST}/api/workflows/tenant-contoso-1"
    assert body["ledgerUrl"] == f"{HOST}/api/workflows/tenant-contoso-1/steps"
    assert response.headers["Location"] == body["statusQueryGetUri"]
    assert response.headers["Retry-After"] == "10"


def test_generates_an_instance_id_when_none_is_given(run, stub, client, services):
    response = run(start_workflow(post("provision-tenant", GOOD_INPUT), client, services))

    assert response.status_code == 202
    instance_id = json_of(response)["instanceId"]
    assert re.fullmatch(r"[0-9a-f]{32}", instance_id)
    assert list(stub.instances) == [instance_id]
    # an id made here is new: no status look-up before the start (a chosen id gets one, below)
    assert stub.requests_to("GET", instance_id) == []


def test_a_chosen_instance_id_is_looked_up_before_the_start(run, stub, client, services):
    response = run(
        start_workflow(post("provision-tenant", GOOD_INPUT, {"instance_id": "chosen-1"}), client, services)
    )

    assert response.status_code == 202
    assert len(stub.requests_to("GET", "chosen-1")) == 1


def test_instance_id_in_the_body_is_not_part_of_the_input(run, stub, client, services):
    body = {**GOOD_INPUT, "instance_id": "from-body-1"}
    response = run(start_workflow(post("provision-tenant", body), client, services))

    assert response.status_code == 202, response.get_body()
    assert json_of(response)["instanceId"] == "from-body-1"
    assert "instance_id" not in stub.instances["from-body-1"].input["input"]


@pytest.mark.parametrize(
    ("raw", "detail"),
    [
        (b'{"tenant_id": "contoso",', "line 1"),
        (b"\xff\xfe", "JSON object"),
        (b'{"tenant_id": NaN}', "NaN"),
    ],
)
def test_invalid_json_is_a_readable_400(run, stub, client, services, raw, detail):
    response = run(start_workflow(post("provision-tenant", raw), client, services))

    assert response.status_code == 400
    body = json_of(response)
    assert body["error"].startswith("request body is not valid")
    assert any(detail in d for d in body["details"]), body
    assert stub.requests == []  # nothing reached the Durable host


@pytest.mark.parametrize(("raw", "kind"), [(b"[1, 2]", "array"), (b'"text"', "string"), (b"42", "number")])
def test_a_body_that_is_not_an_object_is_a_400(run, stub, client, services, raw, kind):
    response = run(start_workflow(post("provision-tenant", raw), client, services))

    assert response.status_code == 400
    body = json_of(response)
    assert body["error"] == "request body must be a JSON object"
    assert f"got a JSON {kind}" in body["details"][0]


def test_missing_required_field_is_a_400_naming_it(run, stub, client, services):
    response = run(start_workflow(post("provision-tenant", {"tenant_id": "contoso"}), client, services))

    assert response.status_code == 400
    body = json_of(response)
    assert body["error"] == "invalid input for workflow 'provision-tenant'"
    assert body["details"] == ["missing required field 'admin_email'"]
    assert stub.requests == []


def test_every_input_problem_is_listed_at_once(run, stub, client, services):
    bad = {"tenant_id": 7, "admin_email": "a@b.example", "colour": "blue"}
    response = run(start_workflow(post("provision-tenant", bad), client, services))

    assert response.status_code == 400
    details = json_of(response)["details"]
    assert "field 'tenant_id' must be a string, got integer" in details
    assert any(d.startswith("unknown field 'colour'") for d in details)


def test_an_empty_body_is_an_empty_input(run, stub, client, services):
    response = run(start_workflow(post("provision-tenant", b""), client, services))

    assert response.status_code == 400
    assert "missing required field 'tenant_id'" in json_of(response)["details"]


def test_unknown_workflow_is_a_404_listing_the_known_ones(run, stub, client, services):
    response = run(start_workflow(post("provision-tenants", GOOD_INPUT), client, services))

    assert response.status_code == 404
    body = json_of(response)
    assert body["error"] == "unknown workflow 'provision-tenants'"
    known = sorted(load_workflows())  # whatever is in workflows/
    assert body["knownWorkflows"] == known
    assert body["details"] == [f"known workflows: {', '.join(known)}"]
    assert stub.requests == []


@pytest.mark.parametrize(
    ("instance_id", "detail"),
    [
        ("bad/id", "forbid"),
        ("has space", "must match"),
        ("-leading-dash", "must match"),
        ("x" * 201, "at most 200"),
        ("tenant-1:compensation", "reserved for compensation"),
        ("tenant-1:step:create_storage", "reserved for the steps of parallel groups"),
    ],
)
def test_malformed_instance_id_is_a_400(run, stub, client, services, instance_id, detail):
    response = run(
        start_workflow(post("provision-tenant", GOOD_INPUT, {"instance_id": instance_id}), client, services)
    )

    assert response.status_code == 400
    body = json_of(response)
    assert body["error"] == "invalid instance id in the query string"
    assert detail in body["details"][0]
    assert stub.requests == []


def test_instance_id_in_query_and_body_must_agree(run, stub, client, services):
    request = post("provision-tenant", {**GOOD_INPUT, "instance_id": "a-1"}, {"instance_id": "b-2"})
    response = run(start_workflow(request, client, services))

    assert response.status_code == 400
    assert json_of(response)["error"] == "conflicting instance ids"


def test_a_non_string_instance_id_in_the_body_is_a_400(run, stub, client, services):
    response = run(
        start_workflow(post("provision-tenant", {**GOOD_INPUT, "instance_id": 12}), client, services)
    )

    assert response.status_code == 400
    assert json_of(response)["details"] == ["instance id must be a string, got int"]


def test_starting_a_running_instance_again_is_a_409(run, stub, client, services):
    first = run(
        start_workflow(post("provision-tenant", GOOD_INPUT, {"instance_id": "dup-1"}), client, services)
    )
    second = run(
        start_workflow(post("provision-tenant", GOOD_INPUT, {"instance_id": "dup-1"}), client, services)
    )

    assert first.status_code == 202
    assert second.status_code == 409
    body = json_of(second)
    assert body["error"] == "workflow instance 'dup-1' already exists"
    assert body["runtimeStatus"] == "Pending"
    assert "still running" in body["details"][0]
    assert len(stub.requests_to("POST", "/orchestrators/")) == 1


def test_a_finished_instance_id_is_not_reused(run, stub, client, services):
    stub.add_instance(
        "done-1", runtime_status="Completed", input={"workflow": "provision-tenant", "input": {}}
    )

    response = run(
        start_workflow(post("provision-tenant", GOOD_INPUT, {"instance_id": "done-1"}), client, services)
    )

    assert response.status_code == 409
    assert json_of(response)["runtimeStatus"] == "Completed"
    assert stub.requests_to("POST", "/orchestrators/") == []


def test_an_id_the_ledger_already_knows_is_a_409(run, stub, client, services, ledger):
    ledger.create_steps(
        "ledger-only-1", "provision-tenant", [NewStep(step_id="a", step_name="A", agent="x.y")], actor="test"
    )

    response = run(
        start_workflow(
            post("provision-tenant", GOOD_INPUT, {"instance_id": "ledger-only-1"}), client, services
        )
    )

    assert response.status_code == 409
    assert "step ledger already holds 1 steps" in json_of(response)["details"][0]
    assert stub.requests_to("POST", "/orchestrators/") == []


def test_two_concurrent_starts_of_one_id_give_one_202_and_one_409(run, stub, client, services):
    async def both():
        return await asyncio.gather(
            start_workflow(post("provision-tenant", GOOD_INPUT, {"instance_id": "race-1"}), client, services),
            start_workflow(post("provision-tenant", GOOD_INPUT, {"instance_id": "race-1"}), client, services),
        )

    responses = run(both())

    assert sorted(r.status_code for r in responses) == [202, 409]
    assert list(stub.instances) == ["race-1"]


def test_an_unreachable_durable_host_is_a_502(run, stub, services):
    binding = stub.binding_json().replace(stub.rpc_base_url, "http://127.0.0.1:9/durabletask/")
    unreachable = DurableOrchestrationClient(binding)

    response = run(
        start_workflow(post("provision-tenant", GOOD_INPUT, {"instance_id": "down-1"}), unreachable, services)
    )

    assert response.status_code == 502
    assert "Durable Functions host call failed" in json_of(response)["error"]


def test_a_start_the_host_refuses_cancels_the_record_and_the_steps_written_with_it(run, client, services):
    """The record and its steps are written before the start; when the host then refuses it, nothing is
    left for the watchdog to start behind the caller's back, nor shown as waiting."""

    class Refusing:
        def __getattr__(self, name):
            return getattr(client, name)

        async def start_new(self, *args, **kwargs):
            raise RuntimeError("the task hub is unavailable")

    response = run(start_workflow(post("provision-tenant", GOOD_INPUT), Refusing(), services))

    assert response.status_code == 502, response.get_body()
    (record,), _ = services.ledger.list_instances(workflow="provision-tenant")
    assert record.status.value == "Cancelled"
    steps = services.ledger.list_for_instance(record.instance_id)
    assert len(steps) == 3 and {r.status.value for r in steps} == {"Cancelled"}
