"""RFC 9457 problems: the API's error answers, each with a stable ``code``, and bounded in size.

A problem repeats what the caller sent (an unknown field, a bad id); sent by an attacker, that echo
must not grow with the request: an answer keeps at most :data:`MAX_DETAILS` sentences of at most
:data:`MAX_DETAIL_CHARS` characters and :data:`MAX_LIST_ITEMS` items of each list in ``extra``, saying
how many were left out. A module of its own so that :mod:`api.boundary` sits below :mod:`api.responses`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import azure.functions as func

PROBLEM_CONTENT_TYPE = "application/problem+json"
PROBLEM_TYPE_PREFIX = "urn:sas:problem:"
MAX_DETAILS = 20
MAX_DETAIL_CHARS = 1_000
MAX_LIST_ITEMS = 50

# code -> title: the stable, machine-readable part of an error (RFC 9457 ``type`` and ``title``).
# ``detail`` and ``details`` carry the human sentences of each occurrence. Clients branch on ``code``.
PROBLEM_TITLES: dict[str, str] = {
    "invalid-request": "The request is invalid",
    "idempotency-key-required": "Operator actions need an Idempotency-Key header",
    "bad-idempotency-key": "The Idempotency-Key header is malformed",
    "idempotency-key-reused": "The Idempotency-Key was used for another request",
    "in-progress": "The request with this Idempotency-Key is still being carried out",
    "invalid-json": "The request body is not valid JSON",
    "invalid-body": "The request body has the wrong shape",
    "invalid-input": "The workflow input does not match its schema",
    "invalid-instance-id": "The instance id is malformed",
    "invalid-step-id": "The step id is malformed",
    "invalid-workflow-name": "The workflow name is malformed",
    "invalid-filter": "A query parameter is invalid",
    "invalid-continuation": "The continuation token is not valid for this list",
    "invalid-principal": "The signed-in principal is over a bound",
    "unsupported-media-type": "State-changing requests take only application/json",
    "client-header-required": "State-changing requests need the X-SAS-Client header",
    "cross-site": "Cross-site requests may not change state",
    "reason-required": "A reason is required",
    "input-too-large": "The input is larger than the payload limit",
    "unknown-workflow": "No such workflow",
    "unknown-version": "No such stored workflow version",
    "unknown-action": "No such action",
    "instance-not-found": "No such workflow instance",
    "step-not-found": "No such step",
    "not-found": "No such resource",
    "instance-exists": "The instance id is already in use",
    "illegal-move": "The ledger does not allow this action in the current state",
    "nothing-to-compensate": "The instance has no step to compensate",
    "already-finished": "The instance has already finished",
    "instance-purging": "The instance is being purged",
    "changed-meanwhile": "The ledger changed while the action was being applied",
    "unauthenticated": "Sign-in required",
    "forbidden": "The caller lacks the role this request needs",
    "untrusted-identity": "Identity headers are only trusted from the platform's authentication",
    "not-loopback": "Local operator actions are accepted only from this machine",
    "workflows-invalid": "The workflow definitions do not load",
    "internal-error": "Internal error",
    "durable-unavailable": "The Durable Functions host call failed",
    "settings-invalid": "The app settings are invalid",
    "ledger-unavailable": "The step ledger is unavailable",
    "unhealthy": "The app is not healthy",
}


def iso(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with a ``Z`` suffix (naive values are taken as UTC, as the Durable API sends them)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def json_default(value: Any) -> Any:
    return iso(value) if isinstance(value, datetime) else str(value)


def clip(text: str, limit: int = MAX_DETAIL_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters left out)"


def _bounded(value: Any) -> Any:
    if isinstance(value, str):
        return clip(value)
    if isinstance(value, list | tuple):
        return [_bounded(v) for v in value[:MAX_LIST_ITEMS]]
    return value


class ApiError(Exception):
    """Ends a request with an RFC 9457 problem: ``type``, ``title``, ``status``, ``detail``, a stable
    ``code``, and this API's sentences ``error`` (what went wrong) and ``details`` (how to fix it)."""

    def __init__(
        self,
        status_code: int,
        message: str,
        details: Iterable[str] = (),
        *,
        code: str,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.details = [str(d) for d in details]
        self.code = code
        if self.code not in PROBLEM_TITLES:
            raise ValueError(f"unknown problem code {self.code!r}: add it to PROBLEM_TITLES")
        self.extra = dict(extra or {})

    def body(self) -> dict[str, Any]:
        """The problem document, bounded whatever the caller sent (see the module's docstring)."""
        details = [clip(d) for d in self.details[:MAX_DETAILS]]
        left_out = len(self.details) - len(details)
        if left_out:
            details.append(f"… and {left_out:,} more problems left out")
        message = clip(self.message)
        detail = message if not details else clip(f"{message}: {'; '.join(details)}", 4 * MAX_DETAIL_CHARS)
        body: dict[str, Any] = {
            "type": f"{PROBLEM_TYPE_PREFIX}{self.code}",
            "title": PROBLEM_TITLES[self.code],
            "status": self.status_code,
            "detail": detail,
            "code": self.code,
            "error": message,
            "details": details,
        }
        if left_out:
            body["detailsOmitted"] = left_out
        for key, value in self.extra.items():
            body[key] = _bounded(value)
            if isinstance(value, list | tuple) and len(value) > MAX_LIST_ITEMS:
                body[f"{key}Omitted"] = len(value) - MAX_LIST_ITEMS
        return body

    def to_response(self) -> func.HttpResponse:
        return func.HttpResponse(
            json.dumps(self.body(), default=json_default),
            status_code=self.status_code,
            mimetype=PROBLEM_CONTENT_TYPE,
            headers={"Content-Type": PROBLEM_CONTENT_TYPE},
        )
