"""JSON responses, readable errors and request parsing shared by the HTTP function bodies.

Request bodies hold only finite numbers and nest at most :data:`MAX_JSON_DEPTH` deep: ``1e400`` (which
Python reads as infinity, and would serve back as the non-JSON ``Infinity``) and a 100,000-deep array
(a ``RecursionError`` in any recursive reader) are 400 problems at the door.
"""

from __future__ import annotations

import functools
import json
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import azure.functions as func

from api.boundary import admit, secure
from api.problems import ApiError, json_default

log = logging.getLogger(__name__)

JSON_CONTENT_TYPE = "application/json"
DEFAULT_ROUTE_PREFIX = "/api"


def _finite(value: Any) -> Any:
    """``value`` with non-finite floats as strings: an answer is always valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _dumps(body: Any) -> str:
    try:
        return json.dumps(body, default=json_default, allow_nan=False)
    except ValueError:  # a non-finite number stored before the door refused them
        return json.dumps(_finite(body), default=json_default, allow_nan=False)


def json_response(
    body: Any, status_code: int = 200, headers: Mapping[str, str] | None = None
) -> func.HttpResponse:
    return func.HttpResponse(
        _dumps(body),
        status_code=status_code,
        headers=dict(headers or {}),
        mimetype=JSON_CONTENT_TYPE,
    )


Handler = Callable[..., Awaitable[func.HttpResponse]]


def json_errors(handler: Handler) -> Handler:
    """Admit the request (:func:`api.boundary.admit`), turn :class:`ApiError` into its problem response
    and anything unexpected into a logged 500; every answer gets the security headers."""
    return _errors(handler, admitted=True)


def public_json_errors(handler: Handler) -> Handler:
    """:func:`json_errors` for a route that serves no data (the console's files): no identity check,
    the same problems and security headers."""
    return _errors(handler, admitted=False)


def _errors(handler: Handler, *, admitted: bool) -> Handler:
    @functools.wraps(handler)
    async def wrapper(*args: Any, **kwargs: Any) -> func.HttpResponse:
        req = args[0] if args else kwargs.get("req")
        try:
            if admitted and req is not None:
                admit(req)
            response = await handler(*args, **kwargs)
        except ApiError as exc:
            response = exc.to_response()
        except Exception:
            log.exception("unhandled error in %s", handler.__name__)
            response = ApiError(
                500, "internal error; see the function logs for details", code="internal-error"
            ).to_response()
        return secure(response)

    return wrapper


MAX_JSON_DEPTH = 64


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large: only finite numbers are accepted")
    return value


def _check_depth(data: Any, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise ValueError when ``data`` nests deeper than ``limit`` (iteratively: no recursion)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    raise ValueError(f"JSON nests deeper than {limit} levels")
                stack.append((child, depth + 1))


def parse_json(text: str) -> Any:
    """JSON with only finite numbers, nested at most :data:`MAX_JSON_DEPTH` deep, else ValueError."""
    try:
        data = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError(f"JSON nests deeper than {MAX_JSON_DEPTH} levels") from None
    _check_depth(data)
    return data


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
        data = parse_json(text)
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
