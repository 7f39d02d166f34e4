"""The status API's bodies: plain ``async (req, client, services)`` functions that tests and the
durable test host call directly; ``services`` may be a zero-argument callable, so that broken app
settings become a readable 503, not a crash.
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
    json_errors,
    json_response,
    no_instance,
    resolve_services,
    route_base,
    status_url,
    steps_url,
)
from workflow_core.contracts import compensation_instance_id
from workflow_core.workflows import WorkflowDefinitionError, load_workflows

log = logging.getLogger(__name__)
DEFAULT_TOP = 50
MAX_TOP = 500


@json_errors
async def get_workflow_status(
    req: func.HttpRequest, client: Any, services: ServicesSource
) -> func.HttpResponse:
    """Orchestration status (and its compensation's, if any) merged with the ledger's steps."""
    instance_id = check_instance_id(req.route_params.get("instance_id", ""), "the URL")
    svc = resolve_services(services)
    status, compensation, steps, record = await asyncio.gather(
        call_durable(client.get_status(instance_id), "read the orchestration status"),
        call_durable(
            client.get_status(compensation_instance_id(instance_id)), "read the compensation status"
        ),
        call_ledger(svc, lambda ledger: ledger.list_for_instance(instance_id)),
        call_ledger(svc, lambda ledger: ledger.find_instance(instance_id)),
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
