"""The HTTP API's function bodies: plain ``async (req, client, services)`` functions.

``req`` is an ``azure.functions.HttpRequest``, ``client`` an
``azure.durable_functions.DurableOrchestrationClient`` (or anything with the same methods) and
``services`` a :class:`workflow_core.runtime.Services` or a zero-argument callable returning one
(the bindings pass ``get_services`` so that broken app settings become a readable 503, not a crash).
The Functions bindings in :mod:`api.functions` only adapt these; tests and the in-process durable
test host call them directly.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, timedelta
from typing import Any, TypeVar

import azure.functions as func
from azure.core.exceptions import AzureError
from azure.durable_functions import OrchestrationRuntimeStatus
from azure.durable_functions.models.DurableOrchestrationStatus import DurableOrchestrationStatus
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from api.responses import ApiError, iso, json_errors, json_object_body, json_response, route_base
from api.views import (
    audit_view,
    decode_maybe_json,
    orchestration_view,
    runtime_status_name,
    step_counts,
    step_view,
    workflow_name_of,
)
from workflow_core import clock, tracing
from workflow_core.contracts import WORKFLOW_ORCHESTRATOR, compensation_instance_id, step_instance_id
from workflow_core.ledger import (
    InstanceAlreadyExists,
    InstanceStatus,
    InvalidLedgerInput,
    StepLedger,
    encode_json,
    outcome_json,
)
from workflow_core.ledger.model import MAX_TEXT, validate_instance_id
from workflow_core.runtime import Services
from workflow_core.settings import SettingsError
from workflow_core.workflows import (
    WorkflowDefinitionError,
    WorkflowInputError,
    load_workflows,
)

log = logging.getLogger(__name__)

ServicesSource = Services | Callable[[], Services]
T = TypeVar("T")

INSTANCE_ID_FIELD = "instance_id"
COMPENSATION_SUFFIX = compensation_instance_id("")  # ":compensation"
STEP_INFIX = step_instance_id("", "")  # ":step:", the ids of a parallel group's step orchestrations
DEFAULT_TOP = 50
MAX_TOP = 500
# Runtime statuses in which an orchestration still holds its instance id.
ACTIVE_STATUSES = frozenset(
    {
        OrchestrationRuntimeStatus.Pending,
        OrchestrationRuntimeStatus.Running,
        OrchestrationRuntimeStatus.Suspended,
        OrchestrationRuntimeStatus.ContinuedAsNew,
    }
)


# ---- shared helpers -------------------------------------------------------------------------------


def resolve_services(source: ServicesSource) -> Services:
    """The services to use; settings that do not load become a 503 naming the bad setting."""
    try:
        return source if isinstance(source, Services) else source()
    except SettingsError as exc:
        raise ApiError(503, "the app settings are invalid", [str(exc)], code="settings-invalid") from None


async def call_durable(awaitable: Awaitable[T], what: str) -> T:
    """Await a Durable client call; a failing or unreachable Durable host becomes a readable 502."""
    try:
        return await awaitable
    except ApiError:
        raise
    except Exception as exc:
        log.warning("Durable Functions client call failed (%s): %r", what, exc)
        raise ApiError(
            502,
            f"could not {what}: the Durable Functions host call failed",
            [_describe(exc)],
            code="durable-unavailable",
        ) from None


async def call_ledger(services: Services, operation: Callable[[StepLedger], T]) -> T:
    """Run a (blocking) ledger call off the event loop; storage failures become a readable 503."""

    def run() -> T:
        return operation(services.ledger)

    try:
        return await asyncio.to_thread(run)
    except InvalidLedgerInput as exc:
        raise ApiError(400, "invalid request", [str(exc)], code="invalid-request") from None
    except AzureError as exc:
        log.warning("step ledger call failed: %r", exc)
        raise ApiError(
            503,
            "the step ledger (Table Storage) is unavailable",
            [_describe(exc).splitlines()[0]],
            code="ledger-unavailable",
        ) from None


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def check_instance_id(value: object, source: str) -> str:
    """Validate an instance id the way the ledger does; a bad one is a readable 400."""
    try:
        instance_id = validate_instance_id(value)
    except InvalidLedgerInput as exc:
        raise ApiError(
            400, f"invalid instance id in {source}", [str(exc)], code="invalid-instance-id"
        ) from None
    return instance_id


def known_workflows() -> list[str]:
    return sorted(load_workflows())


def _status_url(base: str, instance_id: str) -> str:
    return f"{base}/workflows/{instance_id}"


def _steps_url(base: str, instance_id: str) -> str:
    return f"{base}/workflows/{instance_id}/steps"


# ---- POST /api/workflows/{name}/instances ---------------------------------------------------------------


def _traced_start(handler: Callable[..., Awaitable[func.HttpResponse]]) -> Callable[..., Any]:
    """Run the starter in the span ``sas.workflow.start``: the root of the instance's trace.

    Its parent is the current span when the host's invocation span is current, else the caller's
    ``traceparent`` header (if any). The span's context goes into the orchestration input and the
    instance record (``workflow_core.tracing``), never into a decision."""

    @functools.wraps(handler)
    async def traced(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
        nested = tracing.has_current_span()
        with tracing.span(
            tracing.START_SPAN,
            parent=None if nested else dict(req.headers or {}),
            kind=SpanKind.INTERNAL if nested else SpanKind.SERVER,
            attributes={"http.request.method": req.method, "sas.workflow": req.route_params.get("name")},
        ):
            return await handler(req, client, services)

    return traced


@json_errors
@_traced_start
async def start_workflow(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    """Validate the input, start ``workflow_orchestrator`` and answer 202 with the status URLs."""
    name = req.route_params.get("name", "")
    from api.versions import definition_to_start, store_definition

    pinned, svc = await definition_to_start(req, name, services)
    definition = pinned.definition

    body = json_object_body(req)
    instance_id = _requested_instance_id(req, body)

    try:
        validated = definition.validate_input(body)
    except WorkflowInputError as exc:
        raise ApiError(
            400,
            f"invalid input for workflow {name!r}",
            exc.problems or [str(exc)],
            code="invalid-input",
            extra={"workflow": name},
        ) from None

    input_json = _storable_input(name, validated)
    svc = svc or resolve_services(services)
    await _ensure_unused(client, svc, instance_id)
    await store_definition(svc, pinned)  # before the record names it: whoever reads one finds the other
    trace_context = tracing.current()
    trace.get_current_span().set_attribute("sas.instance_id", instance_id)
    await _record_instance(svc, definition, instance_id, validated, input_json, pinned.version, trace_context)

    # The definition travels with the input: every replay, generation and child runs on exactly it.
    orchestrator_input = {
        "workflow": name,
        "input": validated,
        "version": pinned.version,
        "definition": pinned.data,
    }
    if trace_context:  # observability data for the orchestrators to pass on (workflow_core.tracing)
        orchestrator_input[tracing.TRACE_FIELD] = trace_context
    try:
        await client.start_new(WORKFLOW_ORCHESTRATOR, instance_id, orchestrator_input)
    except Exception as exc:
        await _never_started(svc, instance_id, exc)
        if "already exists" in str(exc).lower():  # the host answered 409: we lost a race
            raise ApiError(
                409,
                f"workflow instance {instance_id!r} already exists",
                ["instance ids are single-use: choose another instance_id, or omit it to get a fresh one"],
                code="instance-exists",
                extra={"instanceId": instance_id},
            ) from None
        log.warning("starting %s for %s failed: %r", WORKFLOW_ORCHESTRATOR, instance_id, exc)
        raise ApiError(
            502,
            "could not start the workflow: the Durable Functions host call failed",
            [_describe(exc)],
            code="durable-unavailable",
        ) from None

    check = client.create_check_status_response(req, instance_id)
    payload = decode_maybe_json(check.get_body().decode("utf-8"))
    base = route_base(req)
    payload.update(
        {
            "instanceId": instance_id,
            "workflow": name,
            "version": pinned.version,
            "versionLabel": pinned.label,
            "statusUrl": _status_url(base, instance_id),
            "ledgerUrl": _steps_url(base, instance_id),
        }
    )
    headers = {"Location": check.headers.get("Location") or payload["statusQueryGetUri"]}
    if check.headers.get("Retry-After"):
        headers["Retry-After"] = check.headers["Retry-After"]
    log.info("started workflow %s as instance %s", pinned.version, instance_id)
    return json_response(payload, 202, headers)


# How long the orchestration may take, after the starter wrote the instance record, to show up and
# create its steps before the watchdog treats it as a scheduler that never started (on top of the
# watchdog's grace).
SCHEDULER_START_SECONDS = 60.0


def _storable_input(name: str, validated: dict[str, Any]) -> str:
    """The input as the ledger stores it, or 413 when it cannot: the instance record keeps it (and
    a resume restarts from it), so input the ledger cannot hold must be refused before anything is
    written or started, not discovered steps later."""
    text = encode_json(validated)
    if len(text) > MAX_TEXT:
        raise ApiError(
            413,
            f"input of workflow {name!r} is too large for the step ledger",
            [
                f"the input is {len(text):,} characters as JSON; the ledger stores at most {MAX_TEXT:,} "
                "per field (Table Storage's 64 KiB string property): pass large data by reference "
                "(e.g. a blob URL) instead"
            ],
            extra={"limit": MAX_TEXT, "size": len(text)},
        )
    return text


async def _record_instance(
    services: Services,
    definition: Any,
    instance_id: str,
    validated: dict[str, Any],
    input_json: str,
    version: str,
    trace_context: dict[str, str] | None = None,
) -> None:
    """Write the instance record before the orchestration starts, so even one that never starts is
    supervised; a used id is a 409."""
    deadline = clock.utcnow() + timedelta(
        seconds=SCHEDULER_START_SECONDS + services.settings.watchdog_grace_seconds
    )
    try:
        await call_ledger(
            services,
            lambda ledger: ledger.create_instance(
                instance_id,
                definition.name,
                actor="api:start",
                input_json=input_json,
                scheduler_deadline=deadline,
                business_key=definition.business_key_of(validated),
                max_resumes=definition.max_resumes,
                on_scheduler_lost=definition.on_scheduler_lost,
                version=version,
                **tracing.ledger_fields(trace_context),
            ),
        )
    except InstanceAlreadyExists as exc:
        raise ApiError(
            409,
            f"workflow instance {instance_id!r} already exists",
            [f"{exc}; instance ids are single-use: choose another instance_id, or omit it for a fresh one"],
            extra={"instanceId": instance_id},
        ) from None


async def _never_started(services: Services, instance_id: str, exc: BaseException) -> None:
    """The host refused the start: the record must not make the watchdog start it later behind the
    caller's back (they were told it failed and may retry under another id)."""

    def cancel(ledger: StepLedger) -> None:
        record = ledger.find_instance(instance_id)
        if record is not None and record.status is InstanceStatus.RUNNING:
            ledger.transition_instance(
                record,
                InstanceStatus.CANCELLED,
                actor="api:start",
                reason=f"the orchestration could not be started: {_describe(exc)}",
                outcome=outcome_json("cancelled", error=_describe(exc)),
            )

    try:
        await asyncio.to_thread(cancel, services.ledger)
    except Exception:  # the watchdog starts it at its scheduler deadline instead: logged, not hidden
        log.exception("could not cancel the record of %s after a failed start", instance_id)


def _requested_instance_id(req: func.HttpRequest, body: dict[str, Any]) -> str:
    """``instance_id`` from the query string or the body (taken out of the input), or a fresh one."""
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
        return uuid.uuid4().hex
    source = "the query string" if from_query is not None else "the request body"
    instance_id = check_instance_id(from_query if from_query is not None else from_body, source)
    if instance_id.endswith(COMPENSATION_SUFFIX):
        raise ApiError(
            400,
            f"invalid instance id in {source}",
            [f"ids ending in {COMPENSATION_SUFFIX!r} are reserved for compensation orchestrations"],
            code="invalid-instance-id",
        )
    if STEP_INFIX in instance_id:
        raise ApiError(
            400,
            f"invalid instance id in {source}",
            [f"ids containing {STEP_INFIX!r} are reserved for the steps of parallel groups"],
            code="invalid-instance-id",
        )
    return instance_id


async def _ensure_unused(client: Any, services: Services, instance_id: str) -> None:
    """409 unless the id is new to both the Durable task hub and the ledger.

    Instance ids are single-use even after the orchestration finished: the ledger rows of a finished
    run are settled (Succeeded, Compensated...) and a new run under the same id could not dispatch them.
    """
    status, steps = await asyncio.gather(
        call_durable(client.get_status(instance_id), "check the instance id"),
        call_ledger(services, lambda ledger: ledger.list_for_instance(instance_id)),
    )
    if status:
        runtime = runtime_status_name(status) or "unknown"
        state = "is still running" if status.runtime_status in ACTIVE_STATUSES else f"exists ({runtime})"
        raise ApiError(
            409,
            f"workflow instance {instance_id!r} already exists",
            [
                f"an orchestration with this id {state}; instance ids are single-use: choose another "
                "instance_id, or omit it to get a fresh one"
            ],
            code="instance-exists",
            extra={"instanceId": instance_id, "runtimeStatus": runtime},
        )
    if steps:
        raise ApiError(
            409,
            f"workflow instance {instance_id!r} already exists",
            [
                f"the step ledger already holds {len(steps)} steps of workflow {steps[0].workflow_name!r} "
                "for this id; choose another instance_id, or omit it to get a fresh one"
            ],
            code="instance-exists",
            extra={"instanceId": instance_id},
        )


# ---- GET /api/workflows/{instance_id} -------------------------------------------------------------


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
        raise ApiError(
            404,
            f"no workflow instance {instance_id!r}",
            ["neither the Durable task hub nor the step ledger knows this id"],
            code="instance-not-found",
        )
    base = route_base(req)
    body = {
        "instanceId": instance_id,
        "workflow": workflow_name_of(status, steps),
        # the definition version the instance is pinned to, as its ledger record says
        "version": record.version if record is not None else None,
        "runtimeStatus": runtime_status_name(status) if status else None,
        "orchestration": orchestration_view(status),
        "compensation": orchestration_view(compensation),
        "stepCounts": step_counts(steps),
        "steps": [step_view(s) for s in steps],
        "links": {"self": _status_url(base, instance_id), "steps": _steps_url(base, instance_id)},
    }
    return json_response(body)


# ---- GET /api/workflows/{instance_id}/steps -------------------------------------------------------


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
            raise ApiError(
                404,
                f"no workflow instance {instance_id!r}",
                ["neither the step ledger nor the Durable task hub knows this id"],
                code="instance-not-found",
            )
    base = route_base(req)
    body = {
        "instanceId": instance_id,
        "workflow": workflow_name_of(status, steps),
        "steps": [step_view(s) for s in steps],
        "timeline": [audit_view(a) for a in trail],
        "links": {"self": _steps_url(base, instance_id), "status": _status_url(base, instance_id)},
    }
    return json_response(body)


# ---- GET /api/workflows ---------------------------------------------------------------------------


@json_errors
async def list_workflows(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    """Recent orchestration instances, newest first; ``?status=Running,Failed`` and ``?top=`` filter."""
    statuses = _status_filter(req.params.get("status"))
    top = _top(req.params.get("top"))
    if statuses:
        found = await call_durable(client.get_status_by(runtime_status=statuses), "list instances")
    else:
        found = await call_durable(client.get_status_all(), "list instances")
    found = sorted((s for s in found if s), key=_created_key, reverse=True)
    base = route_base(req)
    instances = [
        {
            "instanceId": s.instance_id,
            "name": s.name,
            "workflow": workflow_name_of(s, []),
            "runtimeStatus": runtime_status_name(s),
            "customStatus": s.custom_status,
            "createdTime": iso(s.created_time),
            "lastUpdatedTime": iso(s.last_updated_time),
            "statusUrl": _status_url(base, s.instance_id) if s.instance_id else None,
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
    if raw is None or not raw.strip():
        return []
    by_name = {s.value.lower(): s for s in OrchestrationRuntimeStatus}
    wanted: list[OrchestrationRuntimeStatus] = []
    unknown: list[str] = []
    for part in raw.split(","):
        token = part.strip()
        if not token:
            continue
        match = by_name.get(token.lower())
        if match is None:
            unknown.append(token)
        elif match not in wanted:
            wanted.append(match)
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
    return wanted


def _top(raw: str | None) -> int:
    if raw is None or raw.strip() == "":
        return DEFAULT_TOP
    rule = f"top must be an integer from 1 to {MAX_TOP}"
    try:
        top = int(raw.strip())
    except ValueError:
        raise ApiError(400, "invalid top", [f"{rule}, got {raw!r}"], code="invalid-filter") from None
    if not 1 <= top <= MAX_TOP:
        raise ApiError(400, "invalid top", [f"{rule}, got {top}"], code="invalid-filter")
    return top


# ---- GET /api/health ------------------------------------------------------------------------------


async def health(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    """200 when the app settings and workflow definitions load; 503 naming the problem otherwise.

    Makes no storage or Durable call: it answers "is this deployment configured", cheaply.
    """
    try:
        svc = resolve_services(services)
        workflows = known_workflows()
    except ApiError as exc:
        return ApiError(
            503, exc.message, exc.details, code="unhealthy", extra={"health": "unhealthy"}
        ).to_response()
    except WorkflowDefinitionError as exc:
        log.warning("health check failed: %s", exc)
        return ApiError(
            503,
            "the workflow definitions do not load",
            [str(exc)],
            code="unhealthy",
            extra={"health": "unhealthy"},
        ).to_response()
    return json_response({"status": "ok", "transport": svc.settings.transport.value, "workflows": workflows})
