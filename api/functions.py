"""The Functions bindings of the HTTP API: a ``df.Blueprint`` that ``function_app.py`` registers.

Every route is function-level (a function or host key in ``?code=`` or the ``x-functions-key``
header); nothing here is anonymous. Each binding only adapts the host's arguments to the plain
bodies in :mod:`api.handlers`.
"""

# No ``from __future__ import annotations`` here: the Python worker reads these functions' annotations
# to bind the trigger and the durable client, so they must be real types, not strings.
import azure.durable_functions as df
import azure.functions as func

from api import handlers
from workflow_core import runtime

blueprint = df.Blueprint(http_auth_level=func.AuthLevel.FUNCTION)

AUTH = func.AuthLevel.FUNCTION


def _services() -> runtime.Services:
    # Looked up on each call (not bound at import) so tests and the durable test host can swap it.
    return runtime.get_services()


@blueprint.route(route="workflows/{name}", methods=["POST"], auth_level=AUTH)
@blueprint.durable_client_input(client_name="client")
async def http_start_workflow(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    return await handlers.start_workflow(req, client, _services)


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


@blueprint.route(route="health", methods=["GET"], auth_level=AUTH)
async def http_health(req: func.HttpRequest) -> func.HttpResponse:
    return await handlers.health(req, None, _services)
