"""The operator API's bodies: list and read instances from the ledger, and act on stuck ones.

Reads come from the ledger's instance records (not from a page of Durable instances), so a list is
complete, filterable and pages stably. Actions record intent in the ledger through
:mod:`supervisor.operator` (the watchdog enacts it), except ``stop`` and ``cancel``, which need the Durable
client this API has. Every action needs a reason and is audited as ``operator:<caller>``; a move the
ledger does not allow is a 409 naming the allowed moves.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import azure.functions as func
from azure.durable_functions import OrchestrationRuntimeStatus

from api import continuation
from api.boundary import caller_name
from api.circuits_api import attention_circuits, mark_waiting
from api.responses import (
    ApiError,
    ServicesSource,
    call_durable,
    call_ledger,
    check_instance_id,
    check_step_id,
    check_workflow_name,
    idempotent,
    json_errors,
    json_object_body,
    json_response,
    no_instance,
    required_reason,
    resolve_services,
    route_base,
)
from api.views import instance_detail_view, instance_record_view, runtime_status_name, step_view
from supervisor import operator
from workflow_core import clock
from workflow_core.canary import CANARY_WORKFLOWS
from workflow_core.ledger import StepLedger, StepStatus

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
STEP_ACTIONS = {"retry": operator.retry_step, "skip": operator.skip_step}
INSTANCE_ACTIONS = ("compensate", "resume", "stop", "cancel")
DEAD_LETTER_PREFIX = "dead-lettered"  # last_error of a step whose work message was dead-lettered
DEAD_LETTER_WINDOW = timedelta(days=1)
# Runtime statuses in which an orchestration still holds its instance id.
ACTIVE_STATUSES = frozenset(
    OrchestrationRuntimeStatus[name] for name in ("Pending", "Running", "Suspended", "ContinuedAsNew")
)


def _filters(req: func.HttpRequest) -> dict[str, Any]:
    params = req.params

    def text(name: str) -> str | None:
        value = params.get(name)
        return value.strip() if value and value.strip() else None

    def when(name: str) -> datetime | None:
        raw = text(name)
        if raw is None:
            return None
        try:
            parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
            value = (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)
            # a day's margin each side: the ledger compares with a tick (or an inverted time) either side
            _ = (value - timedelta(days=1), value + timedelta(days=1))
        except ValueError:
            why = f"{name} must be an ISO 8601 time such as 2025-03-01T09:00:00Z, got {raw!r}"
        except OverflowError:  # 0001-01-01T00:00:00+14:00 parses, but is before the first UTC instant
            why = f"{raw!r} is outside the representable calendar"
        else:
            return value
        raise ApiError(400, f"invalid {name}", [why], code="invalid-filter")

    attention = text("needsAttention")
    if attention is not None and attention.lower() not in ("true", "false"):
        raise ApiError(
            400, "invalid needsAttention", [f"use true or false, got {attention!r}"], code="invalid-filter"
        )
    raw_limit = text("limit")
    try:
        limit = DEFAULT_LIMIT if raw_limit is None else int(raw_limit)
    except ValueError:
        limit = -1
    if not 1 <= limit <= MAX_LIMIT:
        raise ApiError(
            400,
            "invalid limit",
            [f"limit must be an integer from 1 to {MAX_LIMIT}, got {raw_limit!r}"],
            code="invalid-filter",
        )
    workflow = params.get("workflow") if text("workflow") is not None else None  # unstripped: checked
    hide_canary = _hide_canary(req) and workflow is None  # asking for sas-canary by name shows it
    return {
        "exclude_workflow": CANARY_WORKFLOWS if hide_canary else None,
        "status": text("status"),
        "workflow": None if workflow is None else check_workflow_name(workflow, "the query string"),
        "version": text("version"),
        "business_key_prefix": text("businessKey"),
        "started_from": when("startedFrom"),
        "started_to": when("startedTo"),
        "needs_attention": None if attention is None else attention.lower() == "true",
        "limit": limit,
        "continuation": text("continuation"),
    }


def _hide_canary(req: func.HttpRequest) -> bool:
    """``?canary=exclude`` (the default) or ``include``: the recovery canary's runs."""
    show = (req.params.get("canary") or "").strip() or "exclude"
    if show not in ("include", "exclude"):
        raise ApiError(400, "invalid canary", [f"include or exclude, not {show!r}"], code="invalid-filter")
    return show == "exclude"


@json_errors
async def list_instances(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    """``GET /api/instances``: instance records, newest first, one page and the next page's token."""
    filters = _filters(req)
    svc = resolve_services(services)
    key = continuation.configured_key() or await call_ledger(svc, lambda ledger: ledger.list_token_key())
    filters["continuation"] = continuation.verify(filters["continuation"], filters, key)
    records, ledger_token = await call_ledger(svc, lambda ledger: ledger.list_instances(**filters))
    token = continuation.sign(ledger_token, filters, key)
    base = route_base(req)
    body = {
        "instances": [
            {**instance_record_view(r), "url": f"{base}/instances/{r.instance_id}"} for r in records
        ],
        "count": len(records),
        "continuation": token,
    }
    return json_response(body)


@json_errors
async def get_instance(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    """``GET /api/instances/{instance_id}``: record, steps, attempts, audit trail, capped payloads."""
    instance_id = check_instance_id(req.route_params.get("instance_id", ""), "the URL")
    svc = resolve_services(services)
    (record, steps), audit = await call_ledger(
        svc, lambda ledger: (ledger.read_instance_and_steps(instance_id), ledger.audit_trail(instance_id))
    )
    if record is None and not steps:
        raise no_instance(instance_id, "the step ledger has no record of this id")
    body = instance_detail_view(instance_id, record, steps, audit)
    mark_waiting(body, steps, audit)  # steps held back by their agent's limits (api/circuits_api.py)
    status = await call_durable(client.get_status(instance_id), "read the orchestration status")
    body["runtimeStatus"] = runtime_status_name(status) if status else None
    body["now"] = clock.utcnow().isoformat().replace("+00:00", "Z")
    body["links"] = {"self": f"{route_base(req)}/instances/{instance_id}"}
    return json_response(body)


def _action(req: func.HttpRequest, kind: str, known: Any) -> str:
    """The URL's ``{action}``; one not in ``known`` is a 404 listing the ``kind``'s actions."""
    action = req.route_params.get("action", "")
    if action not in known:
        raise ApiError(
            404,
            f"no {kind} action {action!r}",
            [f"{kind} actions: {', '.join(known)}"],
            code="unknown-action",
        )
    return action


async def _ledger_move(svc: Any, act: Callable[[StepLedger], T]) -> T:
    """An operator's move through :mod:`supervisor.operator`; a refusal becomes its problem (a 409 only
    when the ledger moved under the request: what no retry can change is a 422, raised as such)."""
    try:
        return await call_ledger(svc, act)
    except operator.UnknownInstance as exc:
        raise ApiError(404, str(exc), code="instance-not-found") from None
    except operator.UnknownStep as exc:
        raise ApiError(404, str(exc), code="step-not-found", extra={"knownSteps": exc.known}) from None
    except operator.IllegalMove as exc:
        moves = {"currentStatus": exc.status.value, "allowedMoves": exc.allowed_moves}
        raise ApiError(409, str(exc), code="illegal-move", extra=moves) from None
    except operator.OperatorError as exc:  # the instance state's refusal, or a race
        raise ApiError(409, str(exc), code=exc.code) from None


@json_errors
async def step_action(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    """``POST /api/instances/{instance_id}/steps/{step_id}/{action}``: retry or skip one step."""
    instance_id = check_instance_id(req.route_params.get("instance_id", ""), "the URL")
    step_id = check_step_id(req.route_params.get("step_id", ""), "the URL")
    action = _action(req, "step", STEP_ACTIONS)
    reason = required_reason(json_object_body(req))
    user = caller_name(req)
    svc = resolve_services(services)
    apply = STEP_ACTIONS[action]

    async def move() -> func.HttpResponse:
        updated = await _ledger_move(
            svc, lambda ledger: apply(ledger, instance_id, step_id, user=user, reason=reason)
        )
        log.info("operator %s: %s of %s by %s (%s)", action, step_id, instance_id, user, reason)
        return json_response({"action": action, "actor": actor, "step": step_view(updated)})

    actor = operator.actor_for(user)
    return await idempotent(req, svc, instance_id, f"{action} {instance_id}/{step_id}", actor, move)


@json_errors
async def instance_action(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    """``POST /api/instances/{instance_id}/{action}``: compensate, resume, stop or cancel an instance."""
    instance_id = check_instance_id(req.route_params.get("instance_id", ""), "the URL")
    action = _action(req, "instance", INSTANCE_ACTIONS)
    body = json_object_body(req)
    reason = required_reason(body)
    user = caller_name(req)
    actor = operator.actor_for(user)
    svc = resolve_services(services)
    expected = body.get("expectedStatus")
    expected = expected if isinstance(expected, str) and expected else None
    ends = action in ("stop", "cancel")
    request = f"{action} {instance_id}" + (f" expecting {expected or 'any status'}" if ends else "")

    async def move() -> func.HttpResponse:
        def act(ledger: StepLedger) -> dict[str, Any]:
            if action == "compensate":
                step_id = operator.compensation_target(ledger, instance_id)
                updated = operator.request_compensation(
                    ledger, instance_id, step_id, user=user, reason=reason
                )
                return {"step": step_view(updated)}
            record = operator.resume_instance(ledger, instance_id, actor=actor, reason=reason)
            return {"instance": instance_record_view(record)}

        result = await _ledger_move(svc, act)
        log.info("operator %s: %s by %s (%s)", action, instance_id, user, reason)
        return json_response({"action": action, "actor": actor, **result})

    return await idempotent(
        req,
        svc,
        instance_id,
        request,
        actor,
        lambda: _end(client, svc, instance_id, action, actor, reason, expected) if ends else move(),
    )


async def _end(
    client: Any, svc: Any, instance_id: str, action: str, actor: str, reason: str, expected: str | None
) -> func.HttpResponse:
    """Stop or cancel: the record (and its audit row) is written first; only then is the
    orchestration terminated, so a failing terminate still leaves the operator's intent recorded,
    and the watchdog, reading the record, never resumes the instance."""
    record = await _ledger_move(
        svc,
        lambda ledger: operator.move_instance(
            ledger, instance_id, action, reason=reason, actor=actor, expected_status=expected
        ),
    )
    status = await call_durable(client.get_status(instance_id), "read the orchestration status")
    terminated = bool(status and status.runtime_status in ACTIVE_STATUSES)
    if terminated:
        await call_durable(
            client.terminate(instance_id, f"operator {action} by {actor}: {reason}"),
            "terminate the orchestration",
        )
    log.info("operator %s: %s by %s (%s)", action, instance_id, actor, reason)
    return json_response(
        {
            "action": action,
            "actor": actor,
            "instanceId": instance_id,
            "terminated": terminated,
            "instance": instance_record_view(record),
        }
    )


@json_errors
async def attention(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    """``GET /api/attention``: the operator's inbox: stalled steps, failed compensations, dead letters."""
    svc = resolve_services(services)
    now = clock.utcnow()
    hidden = CANARY_WORKFLOWS if _hide_canary(req) else ()

    def read(ledger: StepLedger) -> dict[str, Any]:
        soon = now + DEAD_LETTER_WINDOW
        lists = {
            "stalled": ledger.overdue(now, limit=200),
            "compensationFailed": ledger.needing_attention(limit=200),
            "deadLettered": [
                s
                for s in ledger.overdue(soon, limit=500)
                if s.status is StepStatus.FAILED and (s.last_error or "").startswith(DEAD_LETTER_PREFIX)
            ],
        }
        flagged, _ = ledger.list_instances(needs_attention=True, limit=200, exclude_workflow=hidden)
        # the recovery canary's runs (hidden) have their own alerts and page (docs/operations.md)
        return {
            **{
                key: [
                    step_view(s) | {"instanceId": s.instance_id}
                    for s in steps
                    if s.workflow_name not in hidden
                ]
                for key, steps in lists.items()
            },
            "instances": [instance_record_view(r) for r in flagged],
            "circuits": attention_circuits(ledger),  # agents' circuits not closed (api/circuits_api.py)
        }

    body = await call_ledger(svc, read)
    body["now"] = now.isoformat().replace("+00:00", "Z")
    return json_response(body)
