"""Bulk operations over HTTP: ``POST /api/operations`` and ``GET /api/operations/{id}``.

Same door and identity as single actions (function key, caller name, a reason), the operation
recorded in the ledger and its matching instances frozen before anything is acted on
(:mod:`supervisor.maintenance.bulk`). The request acts on the first :data:`INLINE_INSTANCES` of them
itself; the maintenance timer carries the rest on at ``BULK_RATE_PER_SECOND``.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import azure.functions as func
from pydantic import ValidationError

from api.boundary import caller_name
from api.responses import (
    ApiError,
    ServicesSource,
    call_durable,
    call_ledger,
    idempotent,
    json_errors,
    json_object_body,
    json_response,
    resolve_services,
)
from api.views import camel
from supervisor import operator
from supervisor.maintenance import bulk
from workflow_core.settings import SettingsError, bulk_settings

log = logging.getLogger(__name__)
INLINE_INSTANCES = 25
_FILTER_FIELDS = {camel(name): name for name in bulk.BulkFilter.model_fields}  # e.g. needsAttention
_BODY_FIELDS = {"action", "filter", "reason", "dryRun"}


def _bad(why: str, code: str = "invalid-request") -> ApiError:
    return ApiError(400, "invalid bulk operation", [why], code=code)


def parse_filter(raw: Any) -> bulk.BulkFilter:
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise _bad('"filter" must be an object')
    unknown = sorted(set(raw) - set(_FILTER_FIELDS))
    if unknown:
        raise _bad(f"unknown filter fields {unknown}; known: {', '.join(_FILTER_FIELDS)}")
    values = {_FILTER_FIELDS[k]: v for k, v in raw.items() if v is not None}
    for key in ("started_after", "started_before"):
        if key in values:
            text = values[key]
            try:
                moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
            except ValueError:
                raise _bad(f"{key} must be an ISO-8601 time, got {str(text)[:50]!r}") from None
            if moment.tzinfo is None:
                raise _bad(f"{key} needs a time zone (e.g. 2030-01-01T00:00:00Z)")
            values[key] = moment
    try:
        return bulk.BulkFilter.model_validate(values)
    except ValidationError as exc:
        raise _bad("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())) from None


@json_errors
async def start_operation(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    """``POST /api/operations``: record a bulk operation, freeze what matches, act on its first
    instances, 202. Once per ``Idempotency-Key`` (required, 428 without): a repeat gets the first
    answer. A dry run (``dryRun``) answers what would be acted on and skipped, and writes nothing."""
    body = json_object_body(req)
    unknown = sorted(set(body) - _BODY_FIELDS)
    if unknown:
        raise _bad(f"unknown fields {unknown}; known: {', '.join(sorted(_BODY_FIELDS))}")
    action = body.get("action")
    if action not in bulk.BULK_ACTIONS:
        raise _bad(f"action must be one of {', '.join(bulk.BULK_ACTIONS)}", code="unknown-action")
    reason = body.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise ApiError(400, "a reason is required", ['send {"reason": "..."}'], code="reason-required")
    if len(reason) > 2000:
        raise _bad("reason is longer than 2000 characters")
    dry_run = body.get("dryRun", False)
    if not isinstance(dry_run, bool):
        raise _bad('"dryRun" must be true or false')
    flt = parse_filter(body.get("filter"))
    actor = operator.actor_for(caller_name(req))
    svc = resolve_services(services)
    try:
        rate = bulk_settings().rate_per_second
    except SettingsError as exc:  # the feature is off until its settings are fixed
        raise ApiError(503, "bulk operations are disabled", [str(exc)], code="settings-invalid") from None

    if dry_run:  # the same eligibility check as the act; writes nothing, takes no key
        return json_response(await call_ledger(svc, lambda ledger: bulk.preview(ledger, action, flt)))

    async def act() -> func.HttpResponse:
        op = await call_ledger(
            svc,
            lambda ledger: bulk.BulkStore(ledger, svc.bulk_operations).create(
                action, flt, reason=reason, actor=actor
            ),
        )
        store = bulk.BulkStore(svc.ledger, svc.bulk_operations)
        terminate = bulk.durable_terminate(client)

        async def end(instance_id: str, why: str) -> None:
            await call_durable(terminate(instance_id, why), "end the orchestration")

        try:  # the snapshot first (all of it), then the first few instances
            await bulk.run(
                store,
                op,
                runner="request",
                rate_per_second=rate,
                max_instances=INLINE_INSTANCES,
                terminate=end,
            )
        except Exception:  # recorded: the timer carries it on from its cursor; answer with its id
            log.warning("bulk %s: the inline run stopped; the timer carries it on", op.bulk_id, exc_info=True)
        log.info("bulk %s %s by %s (%s)", op.bulk_id, action, actor, reason)
        try:
            progress = await call_ledger(svc, lambda ledger: store.progress(op))
        except ApiError:  # recorded: answer with its id (a 5xx would free the key for a second one)
            return json_response({"id": op.bulk_id, "action": action, "done": False}, status_code=202)
        return json_response(progress, status_code=200 if op.done else 202)

    request = bulk.request_of(action, flt, reason)
    return await idempotent(req, svc, bulk.KEYS_PARTITION, request, actor, act)


@json_errors
async def get_operation(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    """``GET /api/operations/{id}``: progress, acted, skipped (with why) and failed."""
    bulk_id = req.route_params.get("operation_id", "")
    if not bulk_id or len(bulk_id) > 64 or not all(c.isalnum() or c in "-T" for c in bulk_id):
        raise ApiError(404, f"no bulk operation {bulk_id[:64]!r}", code="not-found")
    svc = resolve_services(services)

    def read(ledger):
        store = bulk.BulkStore(ledger)
        op = store.get(bulk_id)
        return None if op is None else store.progress(op)

    progress = await call_ledger(svc, read)
    if progress is None:
        raise ApiError(404, f"no bulk operation {bulk_id!r}", code="not-found")
    return json_response(progress)
