"""The workflow API's bodies: start, versions, status, steps, list and health. Plain
``async (req, client, services)`` functions that tests and the durable test host call directly;
``services`` may be a zero-argument callable, so that broken app settings become a readable 503.

A start (``POST /api/workflows/{name}/instances``) reads the instance id from the query string or the
body and hands the input to :func:`workflow_core.starter.start_instance`, the one path every starter
takes; what that refuses becomes the problem it names, a started instance the 202 with its status URLs.
It runs on the definition deployed now, unless ``?version=`` asks for a stored one (a deliberate
rollback); either way the definition is stored by its hash before the instance record names it, so it
is found even after the YAML moved on. ``GET /api/workflows/{name}/versions`` lists the stored versions.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC
from typing import Any

import azure.functions as func
from azure.durable_functions import OrchestrationRuntimeStatus
from azure.durable_functions.models.DurableOrchestrationStatus import DurableOrchestrationStatus

from api import views
from api.boundary import secure
from api.responses import (
    ApiError,
    ServicesSource,
    call_durable,
    call_ledger,
    check_instance_id,
    check_workflow_name,
    json_errors,
    json_object_body,
    json_response,
    ledger_errors,
    no_instance,
    resolve_services,
    route_base,
    status_url,
    steps_url,
)
from workflow_core.contracts import STEP_INFIX, compensation_instance_id
from workflow_core.runtime import Services
from workflow_core.starter import StartRefused, start_instance
from workflow_core.workflows import (
    PinnedDefinition,
    UnknownVersion,
    UnknownWorkflow,
    WorkflowDefinitionError,
    get_workflow,
    load_workflows,
    pin,
)
from workflow_core.workflows.store import resolve_reference, workflow_versions

log = logging.getLogger(__name__)
DEFAULT_TOP = 50
MAX_TOP = 500
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
    payload = views.decode_maybe_json(check.get_body().decode("utf-8"))
    base = route_base(req)
    payload.update(
        instanceId=instance_id,
        workflow=name,
        version=pinned.version,
        versionLabel=pinned.label,
        statusUrl=status_url(base, instance_id),
        ledgerUrl=steps_url(base, instance_id),
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
    if instance_id.endswith(COMPENSATION_SUFFIX):
        reserved = f"ids ending in {COMPENSATION_SUFFIX!r} are reserved for compensation orchestrations"
    elif STEP_INFIX in instance_id:
        reserved = f"ids containing {STEP_INFIX!r} are reserved for the steps of parallel groups"
    else:
        return instance_id
    raise ApiError(400, f"invalid instance id in {source}", [reserved], code="invalid-instance-id")


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


@json_errors
async def get_workflow_status(
    req: func.HttpRequest, client: Any, services: ServicesSource
) -> func.HttpResponse:
    """Orchestration status (and its compensation's, if any) merged with the ledger's steps."""
    instance_id = check_instance_id(req.route_params.get("instance_id", ""), "the URL")
    svc = resolve_services(services)
    status, compensation, (record, steps) = await asyncio.gather(
        call_durable(client.get_status(instance_id), "read the orchestration status"),
        call_durable(
            client.get_status(compensation_instance_id(instance_id)), "read the compensation status"
        ),
        call_ledger(svc, lambda ledger: ledger.read_instance_and_steps(instance_id)),
    )
    if not status and not steps:
        raise no_instance(instance_id, "neither the Durable task hub nor the step ledger knows this id")
    base = route_base(req)
    body = {
        "instanceId": instance_id,
        "workflow": views.workflow_name_of(status, steps),
        # the definition version the instance is pinned to, as its ledger record says
        "version": record.version if record is not None else None,
        "runtimeStatus": views.runtime_status_name(status) if status else None,
        "orchestration": views.orchestration_view(status),
        "compensation": views.orchestration_view(compensation),
        "stepCounts": views.step_counts(steps),
        "steps": [views.step_view(s) for s in steps],
        "links": {"self": status_url(base, instance_id), "steps": steps_url(base, instance_id)},
    }
    return json_response(body)


@json_errors
async def get_workflow_steps(
    req: func.HttpRequest, client: Any, services: ServicesSource
) -> func.HttpResponse:
    """The ledger's steps and the instance's audit timeline, oldest first."""
    instance_id = check_instance_id(req.route_params.get("instance_id", ""), "the URL")
    svc = resolve_services(services)
    steps, trail = await asyncio.gather(
        call_ledger(svc, lambda ledger: ledger.list_for_instance(instance_id)),
        call_ledger(svc, lambda ledger: ledger.audit_trail(instance_id)),
    )
    status: DurableOrchestrationStatus | None = None
    if not steps and not trail:
        # No rows yet: fine if the orchestration exists (it has not written its steps yet).
        status = await call_durable(client.get_status(instance_id), "read the orchestration status")
        if not status:
            raise no_instance(instance_id, "neither the step ledger nor the Durable task hub knows this id")
    base = route_base(req)
    body = {
        "instanceId": instance_id,
        "workflow": views.workflow_name_of(status, steps),
        "steps": [views.step_view(s) for s in steps],
        "timeline": [views.audit_view(a) for a in trail],
        "links": {"self": steps_url(base, instance_id), "status": status_url(base, instance_id)},
    }
    return json_response(body)


@json_errors
async def list_workflows(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    """Recent orchestration instances, newest first; ``?status=Running,Failed`` and ``?top=`` filter."""
    statuses = _status_filter(req.params.get("status"))
    top = _top(req.params.get("top"))
    query = client.get_status_by(runtime_status=statuses) if statuses else client.get_status_all()
    found = await call_durable(query, "list instances")
    found = sorted((s for s in found if s), key=_created_key, reverse=True)
    base = route_base(req)
    instances = [
        {k: v for k, v in (views.orchestration_view(s) or {}).items() if k != "output"}
        | {
            "workflow": views.workflow_name_of(s, []),
            "statusUrl": status_url(base, s.instance_id) if s.instance_id else None,
        }
        for s in found[:top]
    ]
    body = {
        "instances": instances,
        "count": len(instances),
        "top": top,
        "status": [s.value for s in statuses],
        "truncated": len(found) > top,
    }
    return json_response(body)


def _created_key(status: DurableOrchestrationStatus) -> float:
    created = status.created_time
    if created is None:
        return float("-inf")
    return (created if created.tzinfo else created.replace(tzinfo=UTC)).timestamp()


def _status_filter(raw: str | None) -> list[OrchestrationRuntimeStatus]:
    by_name = {s.value.lower(): s for s in OrchestrationRuntimeStatus}
    tokens = [part.strip() for part in (raw or "").split(",") if part.strip()]
    unknown = [token for token in tokens if token.lower() not in by_name]
    if unknown:
        raise ApiError(
            400,
            "invalid status filter",
            [
                f"unknown runtime status {', '.join(repr(u) for u in unknown)}; "
                f"known: {', '.join(s.value for s in OrchestrationRuntimeStatus)}"
            ],
            code="invalid-filter",
        )
    return list(dict.fromkeys(by_name[token.lower()] for token in tokens))


def _top(raw: str | None) -> int:
    if raw is None or raw.strip() == "":
        return DEFAULT_TOP
    try:
        top: int | None = int(raw.strip())
    except ValueError:
        top = None
    if top is None or not 1 <= top <= MAX_TOP:
        rule = f"top must be an integer from 1 to {MAX_TOP}, got {repr(raw) if top is None else top}"
        raise ApiError(400, "invalid top", [rule], code="invalid-filter")
    return top


async def health(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    """200 when the app settings and workflow definitions load, else 503 naming the problem. No identity
    check (probes call it) and no storage or Durable call: "is this deployment configured", cheaply."""
    try:
        svc = resolve_services(services)
        workflows = sorted(load_workflows())
    except WorkflowDefinitionError as exc:
        log.warning("health check failed: %s", exc)
        return _unhealthy("the workflow definitions do not load", [str(exc)])
    except ApiError as exc:
        return _unhealthy(exc.message, exc.details)
    body = {"status": "ok", "transport": svc.settings.transport.value, "workflows": workflows}
    return secure(json_response(body))


def _unhealthy(message: str, details: list[str]) -> func.HttpResponse:
    problem = ApiError(503, message, details, code="unhealthy", extra={"health": "unhealthy"})
    return secure(problem.to_response())
