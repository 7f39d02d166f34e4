"""JSON responses, readable errors and request parsing shared by the HTTP function bodies."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import azure.functions as func

log = logging.getLogger(__name__)

JSON_CONTENT_TYPE = "application/json"
DEFAULT_ROUTE_PREFIX = "/api"


PROBLEM_CONTENT_TYPE = "application/problem+json"
PROBLEM_TYPE_PREFIX = "urn:sas:problem:"

# code -> title: the stable, machine-readable part of an error (RFC 9457 ``type`` and ``title``).
# ``detail`` and ``details`` carry the human sentences of each occurrence. Clients branch on ``code``.
PROBLEM_TITLES: dict[str, str] = {
    "invalid-request": "The request is invalid",
    "bad-idempotency-key": "The Idempotency-Key header is malformed",
    "idempotency-key-reused": "The Idempotency-Key was used for another request",
    "in-progress": "The request with this Idempotency-Key is still being carried out",
    "invalid-json": "The request body is not valid JSON",
    "invalid-body": "The request body has the wrong shape",
    "invalid-input": "The workflow input does not match its schema",
    "invalid-instance-id": "The instance id is malformed",
    "invalid-filter": "A query parameter is invalid",
    "reason-required": "A reason is required",
    "unknown-workflow": "No such workflow",
    "unknown-version": "No such stored workflow version",
    "unknown-action": "No such action",
    "instance-not-found": "No such workflow instance",
    "step-not-found": "No such step",
    "not-found": "No such resource",
    "instance-exists": "The instance id is already in use",
    "illegal-move": "The ledger does not allow this action in the current state",
    "changed-meanwhile": "The ledger changed while the action was being applied",
    "not-running": "The orchestration is not running",
    "unauthenticated": "Sign-in required",
    "workflows-invalid": "The workflow definitions do not load",
    "internal-error": "Internal error",
    "durable-unavailable": "The Durable Functions host call failed",
    "settings-invalid": "The app settings are invalid",
    "ledger-unavailable": "The step ledger is unavailable",
    "unhealthy": "The app is not healthy",
}
_DEFAULT_CODES = {
    400: "invalid-request",
    401: "unauthenticated",
    404: "instance-not-found",
    409: "illegal-move",
    500: "internal-error",
    502: "durable-unavailable",
    503: "ledger-unavailable",
}


class ApiError(Exception):
    """Ends a request with an RFC 9457 problem (``application/problem+json``) and the given status.

    The body keeps this API's human sentences, ``error`` (what went wrong) and ``details`` (how to fix
    it), beside the problem members ``type``, ``title``, ``status``, ``detail`` and a stable ``code``.
    """

    def __init__(
        self,
        status_code: int,
        message: str,
        details: Iterable[str] = (),
        *,
        code: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.details = [str(d) for d in details]
        self.code = code or _DEFAULT_CODES.get(status_code, "invalid-request")
        if self.code not in PROBLEM_TITLES:
            raise ValueError(f"unknown problem code {self.code!r}: add it to PROBLEM_TITLES")
        self.extra = dict(extra or {})

    def body(self) -> dict[str, Any]:
        detail = self.message if not self.details else f"{self.message}: {'; '.join(self.details)}"
        body: dict[str, Any] = {
            "type": f"{PROBLEM_TYPE_PREFIX}{self.code}",
            "title": PROBLEM_TITLES[self.code],
            "status": self.status_code,
            "detail": detail,
            "code": self.code,
            "error": self.message,
            "details": self.details,
        }
        body.update(self.extra)
        return body

    def to_response(self) -> func.HttpResponse:
        return func.HttpResponse(
            json.dumps(self.body(), default=_default),
            status_code=self.status_code,
            mimetype=PROBLEM_CONTENT_TYPE,
            headers={"Content-Type": PROBLEM_CONTENT_TYPE},
        )


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso(value)
    return str(value)


def json_response(
    body: Any, status_code: int = 200, headers: Mapping[str, str] | None = None
) -> func.HttpResponse:
    return func.HttpResponse(
        json.dumps(body, default=_default),
        status_code=status_code,
        headers=dict(headers or {}),
        mimetype=JSON_CONTENT_TYPE,
    )


def iso(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with a ``Z`` suffix (naive values are taken as UTC, as the Durable API sends them)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


Handler = Callable[..., Awaitable[func.HttpResponse]]


def json_errors(handler: Handler) -> Handler:
    """Turn :class:`ApiError` into its JSON response, and anything unexpected into a logged JSON 500."""

    @functools.wraps(handler)
    async def wrapper(*args: Any, **kwargs: Any) -> func.HttpResponse:
        try:
            return await handler(*args, **kwargs)
        except ApiError as exc:
            return exc.to_response()
        except Exception:
            log.exception("unhandled error in %s", handler.__name__)
            return ApiError(
                500, "internal error; see the function logs for details", code="internal-error"
            ).to_response()

    return wrapper


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def json_object_body(req: func.HttpRequest) -> dict[str, Any]:
    """The request body as a JSON object; an empty body is ``{}``. Anything else is a readable 400."""
    raw = req.get_body() or b""
    if not raw.strip():
        return {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(
            400, "request body is not valid UTF-8 text", ["send a JSON object"], code="invalid-json"
        ) from None
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise ApiError(
            400,
            "request body is not valid JSON",
            [f"{exc.msg} at line {exc.lineno}, column {exc.colno}"],
            code="invalid-json",
        ) from None
    except ValueError as exc:
        raise ApiError(400, "request body is not valid JSON", [str(exc)], code="invalid-json") from None
    if not isinstance(data, dict):
        raise ApiError(
            400,
            "request body must be a JSON object",
            [f"got a JSON {_json_type(data)}; send a JSON object, e.g. {{}}"],
            code="invalid-body",
        )
    return data


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if value is None:
        return "null"
    return type(value).__name__


def route_base(req: func.HttpRequest) -> str:
    """``scheme://host[:port]/<routePrefix>`` of this request, e.g. ``http://localhost:7071/api``.

    Derived from the request URL (the part before ``/workflows`` or ``/health``), so links follow the
    host name the caller used and a non-default ``routePrefix`` in host.json.
    """
    parts = urlsplit(req.url or "")
    path = parts.path or ""
    prefix = DEFAULT_ROUTE_PREFIX
    for marker in ("/workflows", "/instances", "/attention", "/console", "/health"):
        at = path.find(marker)
        if at >= 0:
            prefix = path[:at]
            break
    if parts.scheme and parts.netloc:
        return f"{parts.scheme}://{parts.netloc}{prefix}"
    return prefix
