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


class ApiError(Exception):
    """Ends a request with ``{"error": message, "details": [...]}`` and the given status code."""

    def __init__(
        self,
        status_code: int,
        message: str,
        details: Iterable[str] = (),
        *,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.details = [str(d) for d in details]
        self.extra = dict(extra or {})

    def to_response(self) -> func.HttpResponse:
        body: dict[str, Any] = {"error": self.message, "details": self.details}
        body.update(self.extra)
        return json_response(body, self.status_code)


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
            return ApiError(500, "internal error; see the function logs for details").to_response()

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
        raise ApiError(400, "request body is not valid UTF-8 text", ["send a JSON object"]) from None
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise ApiError(
            400,
            "request body is not valid JSON",
            [f"{exc.msg} at line {exc.lineno}, column {exc.colno}"],
        ) from None
    except ValueError as exc:
        raise ApiError(400, "request body is not valid JSON", [str(exc)]) from None
    if not isinstance(data, dict):
        raise ApiError(
            400,
            "request body must be a JSON object",
            [f"got a JSON {_json_type(data)}; send the workflow input as an object, e.g. {{}}"],
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
    for marker in ("/workflows", "/health"):
        at = path.find(marker)
        if at >= 0:
            prefix = path[:at]
            break
    if parts.scheme and parts.netloc:
        return f"{parts.scheme}://{parts.netloc}{prefix}"
    return prefix
