"""The Functions bindings of the HTTP API: a ``df.Blueprint`` that ``function_app.py`` registers.

Every API route is function-level (a function or host key in ``?code=`` or the ``x-functions-key``
header); only the console's static files (no data) are anonymous. Each binding only adapts the
host's arguments to the plain bodies in :mod:`api.handlers`, :mod:`api.start`, :mod:`api.operator_api` and
:mod:`api.console_site`.
"""

# No ``from __future__ import annotations`` here: the Python worker reads these functions' annotations
# to bind the trigger and the durable client, so they must be real types, not strings.
import azure.durable_functions as df
import azure.functions as func

from api import console_site, handlers, operator_api, start, versions
from workflow_core import runtime

blueprint = df.Blueprint(http_auth_level=func.AuthLevel.FUNCTION)

AUTH = func.AuthLevel.FUNCTION


def _services() -> runtime.Services:
    # Looked up on each call (not bound at import) so tests and the durable test host can swap it.
    return runtime.get_services()


@blueprint.route(route="workflows/{name}/instances", methods=["POST"], auth_level=AUTH)
@blueprint.durable_client_input(client_name="client")
async def http_start_workflow(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    return await start.start_workflow(req, client, _services)


@blueprint.route(route="workflows", methods=["GET"], auth_level=AUTH)
@blueprint.durable_client_input(client_name="client")
async def http_list_workflows(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    return await handlers.list_workflows(req, client, _services)


@blueprint.route(route="workflows/{instance_id}", methods=["GET"], auth_level=AUTH)
@blueprint.durable_client_input(client_name="client")
async def http_get_workflow(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    return await handlers.get_workflow_status(req, client, _services)


@blueprint.route(route="workflows/{instance_id}/steps", methods=["GET"], auth_level=AUTH)
@blueprint.durable_client_input(client_name="client")
async def http_get_workflow_steps(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    return await handlers.get_workflow_steps(req, client, _services)


@blueprint.route(route="workflows/{name}/versions", methods=["GET"], auth_level=AUTH)
@blueprint.durable_client_input(client_name="client")
async def http_list_workflow_versions(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    return await versions.list_versions(req, client, _services)


@blueprint.route(route="health", methods=["GET"], auth_level=AUTH)
async def http_health(req: func.HttpRequest) -> func.HttpResponse:
    return await handlers.health(req, None, _services)


# ---- the operator API (api/operator_api.py) and the web console (api/console_site.py) --------------


@blueprint.route(route="instances", methods=["GET"], auth_level=AUTH)
@blueprint.durable_client_input(client_name="client")
async def http_list_instances(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    return await operator_api.list_instances(req, client, _services)


@blueprint.route(route="instances/{instance_id}", methods=["GET"], auth_level=AUTH)
@blueprint.durable_client_input(client_name="client")
async def http_get_instance(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    return await operator_api.get_instance(req, client, _services)


@blueprint.route(route="instances/{instance_id}/steps/{step_id}/{action}", methods=["POST"], auth_level=AUTH)
@blueprint.durable_client_input(client_name="client")
async def http_step_action(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    return await operator_api.step_action(req, client, _services)


@blueprint.route(route="instances/{instance_id}/{action}", methods=["POST"], auth_level=AUTH)
@blueprint.durable_client_input(client_name="client")
async def http_instance_action(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    return await operator_api.instance_action(req, client, _services)


@blueprint.route(route="attention", methods=["GET"], auth_level=AUTH)
@blueprint.durable_client_input(client_name="client")
async def http_attention(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> func.HttpResponse:
    return await operator_api.attention(req, client, _services)


@blueprint.route(route="console/{*path}", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
async def http_console(req: func.HttpRequest) -> func.HttpResponse:
    return await console_site.console_file(req)
