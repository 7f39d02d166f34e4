"""The registered Functions: routes, methods, auth levels, and the bindings calling the bodies.

The registered functions are called the way the Python worker calls them: ``req`` is an
``HttpRequest`` and ``client`` the binding's JSON string, which ``durable_client_input`` turns into
the real ``DurableOrchestrationClient``; the services come from the process's app settings.
"""

from __future__ import annotations

import azure.durable_functions as df
import azure.functions as func
import pytest

import api
from tests.api.support import http_request, json_of

EXPECTED_ROUTES = {
    "http_start_workflow": ("workflows/{name}/instances", {"POST"}, True),
    "http_list_workflows": ("workflows", {"GET"}, True),
    "http_get_workflow": ("workflows/{instance_id}", {"GET"}, True),
    "http_get_workflow_steps": ("workflows/{instance_id}/steps", {"GET"}, True),
    "http_list_workflow_versions": ("workflows/{name}/versions", {"GET"}, True),
    "http_health": ("health", {"GET"}, False),
    "http_list_instances": ("instances", {"GET"}, True),
    "http_get_instance": ("instances/{instance_id}", {"GET"}, True),
    "http_step_action": ("instances/{instance_id}/steps/{step_id}/{action}", {"POST"}, True),
    "http_instance_action": ("instances/{instance_id}/{action}", {"POST"}, True),
    "http_attention": ("attention", {"GET"}, True),
    "http_diagnostics": ("diagnostics", {"GET"}, True),
    "http_canary": ("canary", {"GET"}, True),
    "http_canary_run": ("canary/runs", {"POST"}, True),
    "http_list_circuits": ("circuits", {"GET"}, True),
    "http_circuit_action": ("circuits/{agent}/{action}", {"POST"}, True),
    "http_start_operation": ("operations", {"POST"}, True),
    "http_get_operation": ("operations/{operation_id}", {"GET"}, True),
    "http_console": ("console/{*path}", {"GET"}, False),
}
ANONYMOUS = {"http_console"}  # static files, no data: the page passes the function key to the API


@pytest.fixture(scope="module")
def functions() -> dict[str, func.decorators.function_app.Function]:
    app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)  # the blueprint must not inherit this
    app.register_blueprint(api.blueprint)
    return {f.get_function_name(): f for f in app.get_functions()}


def test_routes_methods_and_function_level_auth(functions):
    assert set(functions) == set(EXPECTED_ROUTES)
    for name, (route, methods, has_client) in EXPECTED_ROUTES.items():
        trigger = functions[name].get_trigger()
        assert trigger.route == route
        assert {m.value for m in trigger.methods} == methods
        expected = func.AuthLevel.ANONYMOUS if name in ANONYMOUS else func.AuthLevel.FUNCTION
        assert trigger.auth_level == expected, name
        binding_types = {b.type for b in functions[name].get_bindings()}
        assert ("durableClient" in binding_types) is has_client, name


def test_registered_start_function_runs_end_to_end(run, stub, functions, process_env, app_env):
    process_env(app_env)
    request = http_request(
        "POST",
        "/api/workflows/provision-tenant/instances",
        body={"tenant_id": "fabrikam", "admin_email": "ops@fabrikam.example"},
        params={"instance_id": "bound-1"},
        route_params={"name": "provision-tenant"},
    )

    response = run(functions["http_start_workflow"](req=request, client=stub.binding_json()))

    assert response.status_code == 202, response.get_body()
    assert stub.instances["bound-1"].input["input"]["tenant_id"] == "fabrikam"

    status_request = http_request("GET", "/api/workflows/bound-1", route_params={"instance_id": "bound-1"})
    status = run(functions["http_get_workflow"](req=status_request, client=stub.binding_json()))
    assert json_of(status)["runtimeStatus"] == "Pending"


def test_registered_health_function(run, functions, process_env, app_env):
    process_env(app_env)

    response = run(functions["http_health"](req=http_request("GET", "/api/health")))

    assert response.status_code == 200
    assert json_of(response)["status"] == "ok"


def test_registered_health_function_with_broken_settings(run, functions, process_env, app_env):
    process_env({**app_env, "AGENT_TRANSPORT": "bogus"})

    response = run(functions["http_health"](req=http_request("GET", "/api/health")))

    assert response.status_code == 503
    assert "AGENT_TRANSPORT" in json_of(response)["details"][0]
