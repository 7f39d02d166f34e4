"""Who is calling: the name recorded in the audit trail for every operator action.

In Azure, App Service Authentication (Easy Auth) signs the caller in and hands the app the principal
in ``X-MS-CLIENT-PRINCIPAL-NAME`` and ``X-MS-CLIENT-PRINCIPAL`` (base64 JSON with the claims); it
strips those headers from incoming requests, so the app can trust them. Without Easy Auth in Azure
nobody vouches for a name, so actions are refused. Locally (``func start``, the demo server) the
caller is the developer: the OS account that runs the host.
"""

from __future__ import annotations

import base64
import binascii
import getpass
import json
import os
from collections.abc import Mapping

from api.responses import ApiError

PRINCIPAL_NAME_HEADER = "x-ms-client-principal-name"
PRINCIPAL_HEADER = "x-ms-client-principal"
# Set by App Service on every Azure-hosted Function App; never by Core Tools or the demo server.
AZURE_MARKER_SETTING = "WEBSITE_INSTANCE_ID"
_NAME_CLAIMS = (
    "name",
    "preferred_username",
    "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name",
    "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/upn",
    "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/emailaddress",
)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name and value and value.strip():
            return value.strip()
    return None


def _name_from_principal(encoded: str) -> str | None:
    try:
        data = json.loads(base64.b64decode(encoded + "=" * (-len(encoded) % 4)))
    except (binascii.Error, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("userDetails"), str) and data["userDetails"].strip():
        return data["userDetails"].strip()
    name_type = data.get("name_typ")
    claims = [c for c in data.get("claims") or [] if isinstance(c, dict)]
    for wanted in (name_type, *_NAME_CLAIMS):
        for claim in claims:
            if wanted and claim.get("typ") == wanted and str(claim.get("val") or "").strip():
                return str(claim["val"]).strip()
    return None


def caller_name(headers: Mapping[str, str], environ: Mapping[str, str] | None = None) -> str:
    """The signed-in principal's name, or the local OS user; a 401 problem in Azure without sign-in."""
    name = _header(headers, PRINCIPAL_NAME_HEADER)
    if name is None and (encoded := _header(headers, PRINCIPAL_HEADER)) is not None:
        name = _name_from_principal(encoded)
    if name is not None:
        return name
    env = os.environ if environ is None else environ
    if env.get(AZURE_MARKER_SETTING):
        raise ApiError(
            401,
            "operator actions need a signed-in caller",
            [
                "enable App Service Authentication on the Function App, so that each action is "
                "recorded with the operator's identity"
            ],
            code="unauthenticated",
        )
    try:
        return getpass.getuser()
    except Exception:
        return "local-developer"
