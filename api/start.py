"""``POST /api/workflows/{name}/instances``, the HTTP starter, and ``GET /api/workflows/{name}/versions``.

A start reads the request (the instance id from the query string or the body, the input) and hands it
to :func:`workflow_core.starter.start_instance`, the one path every starter takes; what that refuses
becomes the problem it names, and a started instance the 202 with its status URLs. It runs on the
definition deployed now, unless ``?version=`` asks for a stored one (a deliberate rollback); either way
the definition is stored by its hash before the instance record names it, so it is found even after the
YAML moved on. The versions listing shows the stored versions with instance counts per version.
"""

from __future__ import annotations

import logging
from typing import Any

import azure.functions as func

from api.responses import (
    ApiError,
    ServicesSource,
    call_ledger,
    check_instance_id,
    check_workflow_name,
    json_errors,
    json_object_body,
    json_response,
    ledger_errors,
    resolve_services,
    route_base,
    status_url,
    steps_url,
)
from api.views import decode_maybe_json
from workflow_core.contracts import STEP_INFIX, compensation_instance_id
from workflow_core.runtime import Services
from workflow_core.starter import StartRefused, start_instance
from workflow_core.workflows import (
    PinnedDefinition,
    UnknownVersion,
    UnknownWorkflow,
    WorkflowDefinitionError,
    get_workflow,
    pin,
)
from workflow_core.workflows.inventory import workflow_versions
from workflow_core.workflows.store import resolve_reference

log = logging.getLogger(__name__)

VERSION_PARAM = "version"
MAX_REFERENCE = 200
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


def _unknown_workflow(name: str, exc: UnknownWorkflow) -> ApiError:
    return ApiError(
        404,
        f"unknown workflow {name!r}",
        [f"known workflows: {', '.join(exc.known) if exc.known else '(none)'}"],
        code="unknown-workflow",
        extra={"knownWorkflows": exc.known},
    )


async def definition_to_start(
    req: func.HttpRequest, name: str, services: ServicesSource
) -> tuple[PinnedDefinition, Services | None]:
    """The pinned definition a start request runs on (and the services, if they were needed).

    404 ``unknown-workflow`` for a name nobody knows; 404 ``unknown-version`` (listing the stored
    versions) for a ``?version=`` that names no stored version.
    """
    check_workflow_name(name, "the URL")
    current, unknown = None, None
    try:
        current = pin(get_workflow(name))
    except UnknownWorkflow as exc:
        unknown = exc
    except WorkflowDefinitionError as exc:  # a broken definitions folder is a 500, as before versions
        log.error("workflow definitions do not load: %s", exc)
        raise ApiError(
            500, "the workflow definitions do not load", [str(exc)], code="workflows-invalid"
        ) from None
    reference = req.params.get(VERSION_PARAM)
    if reference is None or not reference.strip():
        if unknown is not None:
            raise _unknown_workflow(name, unknown)
        return current, None
    if len(reference) > MAX_REFERENCE:
        raise ApiError(
            400,
            "invalid version",
            [f"a version reference has at most {MAX_REFERENCE} characters"],
            code="invalid-request",
        )
    svc = resolve_services(services)
    try:
        definition = await call_ledger(
            svc, lambda _: resolve_reference(name, reference, svc.definitions, current)
        )
    except UnknownVersion as exc:
        if unknown is not None and not exc.known:
            raise _unknown_workflow(name, unknown) from None
        raise ApiError(
            404,
            f"workflow {name!r} has no stored version {reference!r}",
            [
                "ask for a version id (name@digest), a digest prefix of at least 6 characters or a "
                f"label that names one version; stored versions: {', '.join(exc.known) or '(none)'}"
            ],
            code="unknown-version",
            extra={"workflow": name, "knownVersions": exc.known},
        ) from None
    return pin(definition), svc


@json_errors
async def list_versions(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    """``GET /api/workflows/{name}/versions``: stored versions, the current one, instance counts."""
    name = check_workflow_name(req.route_params.get("name", ""), "the URL")
    svc = resolve_services(services)
    try:
        summaries = await call_ledger(svc, lambda ledger: workflow_versions(name, ledger, svc.definitions))
    except UnknownWorkflow as exc:
        raise _unknown_workflow(name, exc) from None
    versions = [s.as_dict() for s in summaries]
    current = next((v["version"] for v in versions if v["current"]), None)
    return json_response({"workflow": name, "current": current, "versions": versions})
