"""Helpers for the HTTP API tests: real ``azure.functions.HttpRequest`` objects and JSON bodies."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import azure.functions as func

HOST = "http://localhost:7071"


def http_request(
    method: str,
    path: str,
    *,
    body: bytes | str | Any = b"",
    params: Mapping[str, str] | None = None,
    route_params: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> func.HttpRequest:
    """A real ``azure.functions.HttpRequest`` as the host would hand it to ``func start``'s worker."""
    if isinstance(body, str):
        raw = body.encode("utf-8")
    elif isinstance(body, bytes):
        raw = body
    else:
        raw = json.dumps(body).encode("utf-8")
    url = f"{HOST}{path}"
    if params:
        url += "?" + urlencode(params)
    return func.HttpRequest(
        method,
        url,
        headers={
            "Content-Type": "application/json",
            "Host": "localhost:7071",
            "X-SAS-Client": "tests",
            **({"Idempotency-Key": uuid.uuid4().hex} if method == "POST" else {}),  # one per request
            **(headers or {}),
        },
        params=dict(params or {}),
        route_params=dict(route_params or {}),
        body=raw,
    )


def principal_headers(name: str, roles: tuple[str, ...] = ("Workflows.Operate",)) -> dict[str, str]:
    """The headers App Service Authentication sets for a signed-in caller with these app roles."""
    principal = {
        "auth_typ": "aad",
        "name_typ": "name",
        "role_typ": "roles",
        "claims": [{"typ": "name", "val": name}, *({"typ": "roles", "val": r} for r in roles)],
    }
    return {
        "X-MS-CLIENT-PRINCIPAL-NAME": name,
        "X-MS-CLIENT-PRINCIPAL": base64.b64encode(json.dumps(principal).encode()).decode(),
        "X-MS-CLIENT-PRINCIPAL-IDP": "aad",  # App Service sets it with every principal
    }


def json_of(response: func.HttpResponse) -> Any:
    """The body of a success (``application/json``) or of an error (RFC 9457 ``application/problem+json``,
    with its stable ``code`` and ``type``)."""
    body = json.loads(response.get_body())
    if response.status_code >= 400:
        assert response.mimetype == "application/problem+json", (response.status_code, response.mimetype)
        assert body["status"] == response.status_code, body
        assert body["type"] == f"urn:sas:problem:{body['code']}", body
        assert body["title"] and body["detail"] and body["error"], body
    else:
        assert response.mimetype == "application/json", response.mimetype
    return body
