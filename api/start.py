"""``POST /api/workflows/{name}/instances``: the starter.

It validates the input against the pinned definition version, refuses what the ledger cannot hold,
stores the definition, writes the instance record *before* the orchestration starts (so one that
never starts is still supervised), and opens the instance's trace. Its own module because it is the
one write path of the HTTP API and the longest body.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import timedelta
from typing import Any

import azure.functions as func
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from api.responses import (
    ACTIVE_STATUSES,
    COMPENSATION_SUFFIX,
    INSTANCE_ID_FIELD,
    STEP_INFIX,
    ApiError,
    ServicesSource,
    call_durable,
    call_ledger,
    check_instance_id,
    describe_error,
    json_errors,
    json_object_body,
    json_response,
    resolve_services,
    route_base,
    status_url,
    steps_url,
)
from api.views import decode_maybe_json, runtime_status_name
from workflow_core import clock, tracing
from workflow_core.contracts import WORKFLOW_ORCHESTRATOR
from workflow_core.ledger import (
    MAX_STEPS_WITH_INSTANCE,
    InstanceAlreadyExists,
    InstanceStatus,
    StepLedger,
    StepStatus,
    encode_json,
    outcome_json,
)
from workflow_core.ledger.known_rows import created_snapshot
from workflow_core.payloads import PayloadTooLarge
from workflow_core.resume import resume_state
from workflow_core.runtime import Services
from workflow_core.workflows import WorkflowInputError
from workflow_core.workflows.model import new_steps

log = logging.getLogger(__name__)


@json_errors
async def start_workflow(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    """Validate the input, start ``workflow_orchestrator`` and answer 202 with the status URLs.

    All in the span ``sas.workflow.start``, the root of the instance's trace: its parent is the current
    span when the host's invocation span is current, else the caller's ``traceparent`` header (if any).
    The span's context goes into the orchestration input and the instance record
    (``workflow_core.tracing``), never into a decision."""
    nested = tracing.has_current_span()
    with tracing.span(
        tracing.START_SPAN,
        parent=None if nested else dict(req.headers or {}),
        kind=SpanKind.INTERNAL if nested else SpanKind.SERVER,
        attributes={"http.request.method": req.method, "sas.workflow": req.route_params.get("name")},
    ):
        return await _start(req, client, services)


async def _start(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    name = req.route_params.get("name", "")
    from api.versions import definition_to_start, store_definition

    pinned, svc = await definition_to_start(req, name, services)
    definition = pinned.definition

    body = json_object_body(req)
    instance_id, chosen = _requested_instance_id(req, body)

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

    svc = svc or resolve_services(services)
    input_json = await asyncio.to_thread(_storable_input, name, validated, svc)
    if chosen:  # an id made here (128 random bits) is new: no look-up (the record's insert still guards)
        await _ensure_unused(client, svc, instance_id)
    await store_definition(svc, pinned)  # before the record names it: whoever reads one finds the other
    trace_context = tracing.current()
    trace.get_current_span().set_attribute("sas.instance_id", instance_id)
    rows = await _record_instance(
        svc, definition, instance_id, validated, input_json, pinned.version, trace_context
    )

    # The definition travels with the input: every replay, generation and child runs on exactly it.
    orchestrator_input: dict[str, Any] = {
        "workflow": name,
        "input": validated,
        "version": pinned.version,
        "definition": pinned.data,
    }
    if rows is not None:  # a state says the steps exist: step 0 comes first, no creation
        orchestrator_input["state"] = resume_state(definition, [])
        orchestrator_input["rows"] = rows  # their versions: first dispatches write unread
    if trace_context:  # observability data for the orchestrators to pass on (workflow_core.tracing)
        orchestrator_input[tracing.TRACE_FIELD] = trace_context
    try:
        await client.start_new(WORKFLOW_ORCHESTRATOR, instance_id, orchestrator_input)
    except Exception as exc:
        await _never_started(svc, instance_id, exc)
        if "already exists" in str(exc).lower():  # the host answered 409: we lost a race
            raise _exists(instance_id, SINGLE_USE) from None
        log.warning("starting %s for %s failed: %r", WORKFLOW_ORCHESTRATOR, instance_id, exc)
        raise ApiError(
            502,
            "could not start the workflow: the Durable Functions host call failed",
            [describe_error(exc)],
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
            "statusUrl": status_url(base, instance_id),
            "ledgerUrl": steps_url(base, instance_id),
        }
    )
    headers = {"Location": check.headers.get("Location") or payload["statusQueryGetUri"]}
    if check.headers.get("Retry-After"):
        headers["Retry-After"] = check.headers["Retry-After"]
    log.info("started workflow %s as instance %s", pinned.version, instance_id)
    return json_response(payload, 202, headers)


# How long the orchestration may take, after the starter wrote the instance record, to show up (and
# create its steps, when the starter could not) before the watchdog treats it as a scheduler that
# never started (on top of the watchdog's grace).
SCHEDULER_START_SECONDS = 60.0
SINGLE_USE = "instance ids are single-use: choose another instance_id, or omit it to get a fresh one"


def _storable_input(name: str, validated: dict[str, Any], services: Services) -> str:
    """The input as the ledger stores it (inline, or a blob reference when its JSON is larger than a
    ledger property), or 413 over ``MAX_PAYLOAD_BYTES``: the instance record keeps it (and a resume
    restarts from it), so input the app cannot carry must be refused before anything is written or
    started, not discovered steps later."""
    payloads = services.payloads
    try:
        payloads.check_size(validated, "the input")
    except PayloadTooLarge as exc:
        raise ApiError(
            413,
            f"input of workflow {name!r} is too large",
            [
                f"the input is {exc.size:,} bytes as JSON; at most {exc.limit:,} bytes are accepted "
                "(MAX_PAYLOAD_BYTES): pass larger data by reference (e.g. a blob URL) instead"
            ],
            code="input-too-large",
            extra={"limit": exc.limit, "size": exc.size},
        ) from None
    return encode_json(payloads.stored(validated))


async def _record_instance(
    services: Services,
    definition: Any,
    instance_id: str,
    validated: dict[str, Any],
    input_json: str,
    version: str,
    trace_context: dict[str, str] | None = None,
) -> dict[str, Any] | None:
    """Write the instance record before the orchestration starts, so even one that never starts is
    supervised; a used id is a 409. The steps, Pending, go in the record's own transaction when they
    fit one: the orchestration then starts without creating them, and a scheduler that never starts
    is resumed onto step rows that exist. Returns the versions written (``orchestrators.state.
    StartedRows``: the record's snapshot, each step's ETag) when the steps went with it, else None."""
    steps = new_steps(definition) if len(definition.steps) <= MAX_STEPS_WITH_INSTANCE else None
    deadline = clock.utcnow() + timedelta(
        seconds=SCHEDULER_START_SECONDS + services.settings.watchdog_grace_seconds
    )
    try:
        record, step_etags = await call_ledger(
            services,
            lambda ledger: ledger.create_instance_with_steps(
                instance_id,
                definition.name,
                actor="api:start",
                input_json=input_json,
                scheduler_deadline=deadline,
                business_key=definition.business_key_of(validated),
                max_resumes=definition.max_resumes,
                on_scheduler_lost=definition.on_scheduler_lost,
                version=version,
                steps_due_after_seconds=definition.shortest_deadline_seconds,
                steps=steps,
                **tracing.ledger_fields(trace_context),
            ),
        )
    except InstanceAlreadyExists as exc:
        raise _exists(
            instance_id,
            f"{exc}; instance ids are single-use: choose another instance_id, or omit it for a fresh one",
        ) from None
    if steps is None:
        return None
    return {"instance": created_snapshot(record), "steps": step_etags}


async def _never_started(services: Services, instance_id: str, exc: BaseException) -> None:
    """The host refused the start: the record must not make the watchdog start it later behind the
    caller's back (they were told it failed and may retry under another id). The steps the starter
    wrote with it never ran: Cancelled too, so no view shows them waiting."""

    def cancel(ledger: StepLedger) -> None:
        record = ledger.find_instance(instance_id)
        if record is None or record.status is not InstanceStatus.RUNNING:
            return
        why = f"the orchestration could not be started: {describe_error(exc)}"
        ledger.transition_instance(
            record,
            InstanceStatus.CANCELLED,
            actor="api:start",
            reason=why,
            outcome=outcome_json("cancelled", error=describe_error(exc)),
        )
        for step in ledger.list_for_instance(instance_id):
            if step.status is StepStatus.PENDING:
                ledger.transition(step, StepStatus.CANCELLED, actor="api:start", reason=why)

    try:
        await asyncio.to_thread(cancel, services.ledger)
    except Exception:  # the watchdog starts it at its scheduler deadline instead: logged, not hidden
        log.exception("could not cancel the record of %s after a failed start", instance_id)


def _requested_instance_id(req: func.HttpRequest, body: dict[str, Any]) -> tuple[str, bool]:
    """``instance_id`` from the query string or the body (taken out of the input), or a fresh one;
    and whether the caller chose it."""
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
        return uuid.uuid4().hex, False
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
    return instance_id, True


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
        raise _exists(
            instance_id, f"an orchestration with this id {state}; {SINGLE_USE}", runtimeStatus=runtime
        )
    if steps:
        held = f"the step ledger already holds {len(steps)} steps of workflow {steps[0].workflow_name!r}"
        raise _exists(
            instance_id, f"{held} for this id; choose another instance_id, or omit it to get a fresh one"
        )


def _exists(instance_id: str, detail: str, **extra: str) -> ApiError:
    return ApiError(
        409,
        f"workflow instance {instance_id!r} already exists",
        [detail],
        code="instance-exists",
        extra={"instanceId": instance_id, **extra},
    )
