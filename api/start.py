"""``POST /api/workflows/{name}/instances``: the HTTP starter.

It reads the request (the definition version ``?version=`` pins, the instance id from the query
string or the body, the input) and hands it to :func:`workflow_core.starter.start_instance`, the one
path every starter takes; what that refuses becomes the problem it names, and a started instance the
202 with its status URLs.
"""

from __future__ import annotations

from typing import Any

import azure.functions as func

from api.responses import (
    ApiError,
    ServicesSource,
    check_instance_id,
    json_errors,
    json_object_body,
    json_response,
    ledger_errors,
    resolve_services,
    route_base,
    status_url,
    steps_url,
)
from api.versions import definition_to_start
from api.views import decode_maybe_json
from workflow_core.contracts import STEP_INFIX, compensation_instance_id
from workflow_core.starter import StartRefused, start_instance

INSTANCE_ID_FIELD = "instance_id"
COMPENSATION_SUFFIX = compensation_instance_id("")  # ":compensation"
STATUS_OF = {"invalid-input": 400, "input-too-large": 413, "instance-exists": 409, "durable-unavailable": 502}


def refused(exc: StartRefused) -> ApiError:
    return ApiError(STATUS_OF[exc.code], exc.message, exc.details, code=exc.code, extra=exc.extra)


@json_errors
async def start_workflow(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    """Validate the request, start ``workflow_orchestrator`` and answer 202 with the status URLs."""
    name = req.route_params.get("name", "")
    pinned, svc = await definition_to_start(req, name, services)
    body = json_object_body(req)
    chosen = _requested_instance_id(req, body)
    with ledger_errors():
        try:
            instance_id = await start_instance(
                client,
                svc or resolve_services(services),
                pinned,
                body,
                instance_id=chosen,
                trace_parent=dict(req.headers or {}),
                attributes={"http.request.method": req.method},
            )
        except StartRefused as exc:
            raise refused(exc) from None
    check = client.create_check_status_response(req, instance_id)
    payload = decode_maybe_json(check.get_body().decode("utf-8"))
    base = route_base(req)
    payload.update(
        {
            "instanceId": instance_id,
            "workflow": name,
            "version": pinned.version,
            "versionLabel": pinned.label,
            "statusUrl": status_url(base, instance_id),
            "ledgerUrl": steps_url(base, instance_id),
        }
    )
    headers = {"Location": check.headers.get("Location") or payload["statusQueryGetUri"]}
    if check.headers.get("Retry-After"):
        headers["Retry-After"] = check.headers["Retry-After"]
    return json_response(payload, 202, headers)


def _requested_instance_id(req: func.HttpRequest, body: dict[str, Any]) -> str | None:
    """``instance_id`` from the query string or the body (taken out of the input), or None (a fresh one)."""
    from_query = req.params.get(INSTANCE_ID_FIELD)
    from_body = body.pop(INSTANCE_ID_FIELD, None)
    if from_query is not None and from_body is not None and from_query != from_body:
        raise ApiError(
            400,
            "conflicting instance ids",
            [f"query string says {from_query!r}, body says {from_body!r}; send one of them"],
            code="invalid-instance-id",
        )
    if from_query is None and from_body is None:
        return None
    source = "the query string" if from_query is not None else "the request body"
    instance_id = check_instance_id(from_query if from_query is not None else from_body, source)
    reserved = (
        f"ids ending in {COMPENSATION_SUFFIX!r} are reserved for compensation orchestrations"
        if instance_id.endswith(COMPENSATION_SUFFIX)
        else f"ids containing {STEP_INFIX!r} are reserved for the steps of parallel groups"
        if STEP_INFIX in instance_id
        else None
    )
    if reserved:
        raise ApiError(400, f"invalid instance id in {source}", [reserved], code="invalid-instance-id")
    return instance_id
