"""Workflow definition versions in the HTTP API: which one a start runs on, and the versions listing.

A start takes the definition deployed now, unless ``?version=`` asks for a stored one (a deliberate
rollback). Either way the definition is stored by its hash before the instance record names it, so
everything that later needs the instance's definition finds it even after the YAML moved on.
``GET /api/workflows/{name}/versions`` lists the stored versions with instance counts per version.
"""

from __future__ import annotations

import logging
from typing import Any

import azure.functions as func

from api.responses import (
    ApiError,
    ServicesSource,
    call_ledger,
    check_workflow_name,
    json_errors,
    json_response,
    resolve_services,
)
from workflow_core.runtime import Services
from workflow_core.workflows import (
    PinnedDefinition,
    UnknownVersion,
    UnknownWorkflow,
    WorkflowDefinitionError,
    get_workflow,
    pin,
)
from workflow_core.workflows.store import resolve_reference, workflow_versions

log = logging.getLogger(__name__)

VERSION_PARAM = "version"
MAX_REFERENCE = 200


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
