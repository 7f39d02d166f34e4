"""What every HTTP function body shares: JSON answers, problems for errors, request bodies, services
that fail as a readable 503, Durable and ledger calls whose failures become problems (502 / 503), id
checks and the app's URLs.

Request bodies hold only finite numbers and nest at most :data:`MAX_JSON_DEPTH` deep: ``1e400`` (read
as infinity, served back as the non-JSON ``Infinity``) and a 100,000-deep array (a ``RecursionError``
in any recursive reader) are 400 problems at the door.

Every operator action carries an ``Idempotency-Key`` (428 without), claimed in the ledger before the
action runs (:func:`idempotent`): a client that times out and repeats cannot otherwise tell "it acted"
from "it did not", and a step retry is not idempotent by itself (docs/api.md, "Idempotency keys").
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import math
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

import azure.functions as func
from azure.core.exceptions import AzureError

from api.boundary import admit, secure
from api.problems import PROBLEM_CONTENT_TYPE, ApiError, json_default
from workflow_core.ledger import InvalidLedgerInput, StepLedger
from workflow_core.ledger.idempotency import KEY_PATTERN, KeyInProgress, KeyReused
from workflow_core.ledger.model import WORKFLOW_NAME, validate_instance_id, validate_step_id
from workflow_core.runtime import Services
from workflow_core.settings import SettingsError
from workflow_core.starter import describe_error
from workflow_core.transport import bounded_json
from workflow_core.transport.bounded_json import MAX_DEPTH as MAX_JSON_DEPTH

log = logging.getLogger(__name__)

T = TypeVar("T")

JSON_TYPE = "application/json"
HEADER = "Idempotency-Key"
DEFAULT_ROUTE_PREFIX = "/api"
JSON_TYPES = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}  # else null


def _finite(value: Any) -> Any:
    """``value`` with non-finite floats as strings: an answer is always valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def json_response(
    body: Any, status_code: int = 200, headers: Mapping[str, str] | None = None
) -> func.HttpResponse:
    try:
        text = json.dumps(body, default=json_default, allow_nan=False)
    except ValueError:  # a non-finite number stored before the door refused them
        text = json.dumps(_finite(body), default=json_default, allow_nan=False)
    return func.HttpResponse(text, status_code=status_code, headers=dict(headers or {}), mimetype=JSON_TYPE)


Handler = Callable[..., Awaitable[func.HttpResponse]]


def json_errors(handler: Handler, *, public: bool = False) -> Handler:
    """Admit the request (:func:`api.boundary.admit`), turn :class:`ApiError` into its problem response
    and anything unexpected into a logged 500; every answer gets the security headers. ``public``: a
    route that serves no data (the console's files) skips the door, not the rest."""

    @functools.wraps(handler)
    async def wrapper(*args: Any, **kwargs: Any) -> func.HttpResponse:
        req = args[0] if args else kwargs.get("req")
        try:
            if not public and req is not None:
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


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large: only finite numbers are accepted")
    return value


def parse_json(text: str) -> Any:
    """JSON with only finite numbers, nested at most :data:`MAX_JSON_DEPTH` deep and no lone surrogate
    in a string, else ValueError (the depth is checked before parsing: no recursion)."""
    if not bounded_json.depth_within(text, MAX_JSON_DEPTH):
        raise ValueError(f"JSON nests deeper than {MAX_JSON_DEPTH} levels")
    data = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    if bounded_json.MAYBE_SURROGATE.search(text):  # else no parsed string can hold one
        bounded_json.check_strings(data)
    return data


def json_object_body(req: func.HttpRequest) -> dict[str, Any]:
    """The request body as a JSON object; an empty body is ``{}``. Anything else is a readable 400."""
    raw = req.get_body() or b""
    if not raw.strip():
        return {}
    try:
        data = parse_json(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ApiError(
            400, "request body is not valid UTF-8 text", ["send a JSON object"], code="invalid-json"
        ) from None
    except ValueError as exc:
        why = str(exc)
        if isinstance(exc, json.JSONDecodeError):
            why = f"{exc.msg} at line {exc.lineno}, column {exc.colno}"
        raise ApiError(400, "request body is not valid JSON", [why], code="invalid-json") from None
    if not isinstance(data, dict):
        raise ApiError(
            400,
            "request body must be a JSON object",
            [f"got a JSON {JSON_TYPES.get(type(data), 'null')}; send a JSON object, e.g. {{}}"],
            code="invalid-body",
        )
    return data


def route_base(req: func.HttpRequest) -> str:
    """``scheme://host[:port]/<routePrefix>`` of this request, e.g. ``http://localhost:7071/api``: links
    follow the host name the caller used and a non-default ``routePrefix`` in host.json."""
    parts = urlsplit(req.url or "")
    path = parts.path or ""
    markers = ("/workflows", "/instances", "/attention", "/console", "/health")
    prefix = next((path[:at] for marker in markers if (at := path.find(marker)) >= 0), DEFAULT_ROUTE_PREFIX)
    if parts.scheme and parts.netloc:
        return f"{parts.scheme}://{parts.netloc}{prefix}"
    return prefix


ServicesSource = Services | Callable[[], Services]


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
            [describe_error(exc)],
            code="durable-unavailable",
        ) from None


async def call_ledger(services: Services, operation: Callable[[StepLedger], T]) -> T:
    """Run a (blocking) ledger call off the event loop; storage failures become a readable 503."""
    with ledger_errors():
        return await asyncio.to_thread(operation, services.ledger)


@contextlib.contextmanager
def ledger_errors() -> Iterator[None]:
    """Ledger failures inside become problems: invalid input a 400, storage failures a readable 503."""
    try:
        yield
    except InvalidLedgerInput as exc:
        raise ApiError(400, "invalid request", [str(exc)], code="invalid-request") from None
    except AzureError as exc:
        log.warning("step ledger call failed: %r", exc)
        raise ApiError(
            503,
            "the step ledger (Table Storage) is unavailable",
            [describe_error(exc).splitlines()[0]],
            code="ledger-unavailable",
        ) from None


def no_instance(instance_id: str, why: str) -> ApiError:
    return ApiError(404, f"no workflow instance {instance_id!r}", [why], code="instance-not-found")


def check_instance_id(value: object, source: str) -> str:
    """Validate an instance id the way the ledger does; a bad one is a readable 400."""
    return _checked(validate_instance_id, value, f"invalid instance id in {source}", "invalid-instance-id")


def check_step_id(value: object, source: str) -> str:
    """Validate a step id the way the ledger does (a full match: no trailing newline); a bad one is
    a 400 before any lookup, so a client never retries what can never succeed."""
    return _checked(validate_step_id, value, f"invalid step id in {source}", "invalid-step-id")


def _checked(validate: Callable[[object], str], value: object, message: str, code: str) -> str:
    try:
        return validate(value)
    except InvalidLedgerInput as exc:
        raise ApiError(400, message, [str(exc)], code=code) from None


def check_workflow_name(value: object, source: str) -> str:
    """A workflow name as definitions spell it (a full match of ``WORKFLOW_NAME``), else a 400."""
    if not isinstance(value, str) or len(value) > 100 or not WORKFLOW_NAME.fullmatch(value):
        raise ApiError(
            400,
            f"invalid workflow name in {source}",
            [
                f"a workflow name is lower-case words joined by '-' ({WORKFLOW_NAME.pattern}), "
                f"got {str(value)[:80]!r}"
            ],
            code="invalid-workflow-name",
        )
    return value


def status_url(base: str, instance_id: str) -> str:
    return f"{base}/workflows/{instance_id}"


def steps_url(base: str, instance_id: str) -> str:
    return f"{base}/workflows/{instance_id}/steps"


def required_reason(
    body: dict[str, Any], *, recorded_in: str = "the audit trail", max_length: int | None = None
) -> str:
    """An operator action's ``reason``: present, not blank, within ``max_length``; else a readable 400."""
    reason = body.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise ApiError(
            400,
            "a reason is required",
            [f'send {{"reason": "..."}}: it is recorded in {recorded_in} with your name'],
            code="reason-required",
        )
    if max_length is not None and len(reason) > max_length:
        raise ApiError(400, f"the reason is longer than {max_length} characters", code="invalid-body")
    return reason.strip()


async def idempotent(
    req: func.HttpRequest,
    svc: Any,
    instance_id: str,
    request: str,
    actor: str,
    act: Callable[[], Awaitable[func.HttpResponse]],
) -> func.HttpResponse:
    """Run ``act`` once per ``Idempotency-Key``: a repeat with the key gets the first answer and acts
    once; ``request`` names the action and its target (a key reused for another request is a 422)."""
    key = req.headers.get(HEADER)
    if not key:
        raise ApiError(
            428,
            f"an {HEADER} header is required",
            [f"send {HEADER}: <a new random value per action> (repeat it only to repeat the same action)"],
            code="idempotency-key-required",
        )
    if not KEY_PATTERN.fullmatch(key):
        raise ApiError(
            400,
            f"bad {HEADER}",
            [f"{HEADER} is 1-100 characters of A-Z a-z 0-9 . _ : -"],
            code="bad-idempotency-key",
        )
    try:
        stored = await call_ledger(
            svc, lambda _: svc.idempotency_keys.claim_or_replay(instance_id, key, request, actor)
        )
    except KeyReused as exc:
        raise ApiError(
            422,
            f"{HEADER} {key!r} was used for another request ({exc.request})",
            ["use a new key for each operator action"],
            code="idempotency-key-reused",
        ) from None
    except KeyInProgress:
        raise ApiError(
            409,
            f"the request with {HEADER} {key!r} is still being carried out",
            ["look at the instance's audit trail, then repeat the request with the same key"],
            code="in-progress",
        ) from None
    if stored is not None:
        status = int(stored["status"])
        kind = PROBLEM_CONTENT_TYPE if status >= 400 else "application/json"  # as first answered
        response = func.HttpResponse(stored["body"] or "", status_code=status, mimetype=kind)
        response.headers["Idempotent-Replayed"] = "true"
        return response
    try:
        response = await act()
    except ApiError as exc:
        response = exc.to_response()  # a refusal is an answer too: a repeat gets the same one
    except BaseException:
        await call_ledger(svc, lambda _: svc.idempotency_keys.release(instance_id, key))
        raise
    if response.status_code >= 500 or response.status_code == 404:
        # a 5xx: a retry with the key may act; a 404: no row is left in a partition of no instance
        await call_ledger(svc, lambda _: svc.idempotency_keys.release(instance_id, key))
        return response
    body = response.get_body().decode("utf-8")
    keys = svc.idempotency_keys
    await call_ledger(svc, lambda _: keys.record_answer(instance_id, key, response.status_code, body))
    return response
