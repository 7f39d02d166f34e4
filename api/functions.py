"""The Functions bindings of the HTTP API, each only adapting the host's arguments to a plain body.

Every API route is function-level (a function or host key in ``?code=`` or the ``x-functions-key``
header), except behind App Service Authentication, where the platform authenticates and the routes are
anonymous at the Functions level (api/boundary.py); the health probe (excluded from platform
authentication) always needs a key.

The web console is static HTML, CSS and JavaScript (``api/static/``, no framework, no build step),
served here at ``/api/console/``; the page calls the operator API from the browser. The files hold no
data, so that route is anonymous; in Azure the page forwards the ``code`` query parameter it was opened
with as the API's function key.
"""

# No ``from __future__ import annotations`` here: the Python worker reads these functions' annotations
# to bind the trigger and the durable client, so they must be real types, not strings.
import functools
from collections.abc import Awaitable, Callable
from pathlib import Path

import azure.durable_functions as df
import azure.functions as func

from api import boundary, canary, circuits_api, diagnostics, handlers, operations_api, operator_api
from api.responses import ApiError, json_errors
from workflow_core import runtime

STATIC = Path(__file__).resolve().parent / "static"
CONSOLE_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}
blueprint = df.Blueprint(http_auth_level=func.AuthLevel.FUNCTION)

AUTH = boundary.api_auth_level()  # read when the worker indexes the app


def _services() -> runtime.Services:
    # Looked up on each call (not bound at import) so tests and the durable test host can swap it.
    return runtime.get_services()


def _with_client(
    name: str, route: str, method: str, body: Callable[..., Awaitable[func.HttpResponse]]
) -> None:
    """Register the function ``name``: ``body`` called with the request and a Durable client."""

    async def function(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
        return await body(req, client, _services)

    function.__name__ = function.__qualname__ = name  # the host's function name
    with_client = blueprint.durable_client_input(client_name="client")(function)
    blueprint.route(route=route, methods=[method], auth_level=AUTH)(with_client)


for _name, _route, _method, _body in (
    ("http_start_workflow", "workflows/{name}/instances", "POST", handlers.start_workflow),
    ("http_list_workflows", "workflows", "GET", handlers.list_workflows),
    ("http_get_workflow", "workflows/{instance_id}", "GET", handlers.get_workflow_status),
    ("http_get_workflow_steps", "workflows/{instance_id}/steps", "GET", handlers.get_workflow_steps),
    ("http_list_workflow_versions", "workflows/{name}/versions", "GET", handlers.list_versions),
    # the operator API (api/operator_api.py)
    ("http_list_instances", "instances", "GET", operator_api.list_instances),
    ("http_get_instance", "instances/{instance_id}", "GET", operator_api.get_instance),
    (
        "http_step_action",
        "instances/{instance_id}/steps/{step_id}/{action}",
        "POST",
        operator_api.step_action,
    ),
    ("http_instance_action", "instances/{instance_id}/{action}", "POST", operator_api.instance_action),
    ("http_attention", "attention", "GET", operator_api.attention),
    ("http_diagnostics", "diagnostics", "GET", diagnostics.diagnostics),
    ("http_canary", "canary", "GET", canary.get_canary),
    ("http_canary_run", "canary/runs", "POST", canary.run_canary),
    ("http_list_circuits", "circuits", "GET", circuits_api.list_circuits),
    ("http_circuit_action", "circuits/{agent}/{action}", "POST", circuits_api.circuit_action),
    ("http_start_operation", "operations", "POST", operations_api.start_operation),
    ("http_get_operation", "operations/{operation_id}", "GET", operations_api.get_operation),
):
    _with_client(_name, _route, _method, _body)


@blueprint.route(route="health", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
async def http_health(req: func.HttpRequest) -> func.HttpResponse:
    return await handlers.health(req, None, _services)


@blueprint.route(route="console/{*path}", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
async def http_console(req: func.HttpRequest) -> func.HttpResponse:
    return await console_file(req)


@functools.partial(json_errors, public=True)
async def console_file(req: func.HttpRequest) -> func.HttpResponse:
    """``GET /api/console/{*path}``: one file of the console; the bare path is the page itself."""
    path = req.route_params.get("path") or ""
    name = path.strip("/") or "index.html"
    if "/" in name or "\\" in name or name.startswith("."):
        raise ApiError(
            404, f"no console file {path!r}", ["the console is one folder of files"], code="not-found"
        )
    target = STATIC / name
    if target.suffix not in CONSOLE_TYPES or not target.is_file():
        known = ", ".join(sorted(p.name for p in STATIC.iterdir() if p.suffix in CONSOLE_TYPES))
        raise ApiError(404, f"no console file {name!r}", [f"console files: {known}"], code="not-found")
    kind = CONSOLE_TYPES[target.suffix]
    headers = {"Content-Type": kind, "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
    response = func.HttpResponse(
        target.read_bytes(), status_code=200, headers=headers, mimetype=kind.split(";")[0]
    )
    return boundary.secure(response, boundary.CONSOLE_CSP)
