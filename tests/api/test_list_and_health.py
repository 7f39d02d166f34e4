"""GET /api/workflows (recent instances) and GET /api/health."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from api.handlers import get_workflow_status, health, list_workflows
from tests.api.support import HOST, http_request, json_of
from workflow_core.runtime import get_services
from workflow_core.workflows import load_workflows

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def list_request(**params: str):
    return http_request("GET", "/api/workflows", params=params)


@pytest.fixture
def seeded(stub):
    def workflow(name: str) -> dict:
        return {"workflow": name, "input": {}}

    stub.add_instance("old-run", input=workflow("provision-tenant"), runtime_status="Running", created=T0)
    stub.add_instance(
        "done",
        input=workflow("order-fulfilment"),
        runtime_status="Completed",
        created=T0 + timedelta(minutes=1),
    )
    stub.add_instance(
        "new-run",
        input=workflow("provision-tenant"),
        runtime_status="Running",
        created=T0 + timedelta(minutes=2),
    )
    stub.add_instance(
        "broken",
        input=workflow("order-fulfilment"),
        runtime_status="Failed",
        created=T0 + timedelta(minutes=3),
    )
    return stub


def test_lists_recent_instances_newest_first(run, seeded, client, services):
    response = run(list_workflows(list_request(), client, services))

    assert response.status_code == 200
    body = json_of(response)
    assert [i["instanceId"] for i in body["instances"]] == ["broken", "new-run", "done", "old-run"]
    first = body["instances"][0]
    assert first == {
        "instanceId": "broken",
        "name": "workflow_orchestrator",
        "workflow": "order-fulfilment",
        "runtimeStatus": "Failed",
        "customStatus": None,
        "createdTime": "2025-03-01T09:03:00Z",
        "lastUpdatedTime": "2025-03-01T09:03:00Z",
        "statusUrl": f"{HOST}/api/workflows/broken",
    }
    assert body["count"] == 4 and body["top"] == 50 and body["status"] == [] and body["truncated"] is False
    (listing,) = seeded.requests_to("GET", "/instances")
    assert listing.query == {}


def test_status_filter_is_passed_to_the_durable_api(run, seeded, client, services):
    response = run(list_workflows(list_request(status="running,Failed"), client, services))

    body = json_of(response)
    assert [i["instanceId"] for i in body["instances"]] == ["broken", "new-run", "old-run"]
    assert body["status"] == ["Running", "Failed"]
    (listing,) = seeded.requests_to("GET", "/instances")
    assert listing.query == {"runtimeStatus": "Running,Failed"}


def test_top_limits_the_list(run, seeded, client, services):
    body = json_of(run(list_workflows(list_request(top="2"), client, services)))

    assert [i["instanceId"] for i in body["instances"]] == ["broken", "new-run"]
    assert body["truncated"] is True


@pytest.mark.parametrize(
    ("params", "error", "detail"),
    [
        ({"status": "Runing"}, "invalid status filter", "unknown runtime status 'Runing'"),
        ({"top": "0"}, "invalid top", "from 1 to 500, got 0"),
        ({"top": "501"}, "invalid top", "got 501"),
        ({"top": "ten"}, "invalid top", "got 'ten'"),
    ],
)
def test_invalid_list_parameters_are_a_400(run, stub, client, services, params, error, detail):
    response = run(list_workflows(list_request(**params), client, services))

    assert response.status_code == 400
    body = json_of(response)
    assert body["error"] == error
    assert detail in body["details"][0]
    assert stub.requests == []


def test_health_is_ok_when_settings_and_definitions_load(run, services):
    response = run(health(http_request("GET", "/api/health"), None, services))

    assert response.status_code == 200
    assert json_of(response) == {
        "status": "ok",
        "transport": "storage-queue",
        "workflows": sorted(load_workflows()),  # whatever is in workflows/
    }


def test_health_is_503_naming_the_broken_setting(run, process_env, app_env):
    process_env({**app_env, "AGENT_TRANSPORT": "bogus"})

    response = run(health(http_request("GET", "/api/health"), None, get_services))

    assert response.status_code == 503
    body = json_of(response)
    assert body["health"] == "unhealthy" and body["code"] == "unhealthy"
    assert body["error"] == "the app settings are invalid"
    assert body["details"] == ["AGENT_TRANSPORT must be one of servicebus, storage-queue; got 'bogus'"]


def test_broken_settings_are_a_503_on_every_endpoint(run, process_env, app_env, client):
    process_env({**app_env, "WATCHDOG_BATCH_SIZE": "lots"})
    request = http_request("GET", "/api/workflows/x-1", route_params={"instance_id": "x-1"})

    response = run(get_workflow_status(request, client, get_services))

    assert response.status_code == 503
    assert json_of(response)["details"] == ["WATCHDOG_BATCH_SIZE must be an integer, got 'lots'"]
