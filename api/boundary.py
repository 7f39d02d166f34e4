"""The HTTP API's door: who is calling, may they, and how a state-changing request must look.

Every API body runs behind :func:`admit` (through :func:`api.responses.json_errors`), so no route can
forget it. A state-changing request must be same-origin JSON carrying ``X-SAS-Client``: a cross-site
HTML form can do none of these, and a cross-site ``fetch`` that does needs a CORS preflight this app
never grants. Every answer carries :data:`SECURITY_HEADERS`.

Who is calling is decided by the platform's settings, never by the request: principal headers are
believed only behind App Service Authentication (:func:`platform_authentication_on`); in Azure
without it every action is 401; locally a principal header is forged by definition (403) and only a
request addressed in ``Host`` to a loopback name on the port it was served on is accepted (no
forwarding header is read; a DNS-rebinding name is refused). docs/api.md, "Who may call", says why.

App Service Authentication is on when the platform sets ``WEBSITE_AUTH_ENABLED=True`` (exactly when
authsettingsV2 has ``platform.enabled``) in an Azure-hosted app (``WEBSITE_INSTANCE_ID`` or
``WEBSITE_SITE_NAME``, never set locally): a local shell that sets the first alone turns nothing off.
The routes are then ``anonymous`` at the Functions level (:func:`api_auth_level`): a function key on
top would be asked of every Entra caller too (the Functions docs, "Securing Azure Functions").
"""

from __future__ import annotations

import base64
import binascii
import getpass
import json
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import azure.functions as func

from api.problems import ApiError

AUTH_ENABLED_SETTING = "WEBSITE_AUTH_ENABLED"
AZURE_MARKER_SETTINGS = ("WEBSITE_INSTANCE_ID", "WEBSITE_SITE_NAME")
PRINCIPAL_NAME_HEADER = "x-ms-client-principal-name"
PRINCIPAL_HEADER = "x-ms-client-principal"
PRINCIPAL_ID_HEADER = "x-ms-client-principal-id"
PRINCIPAL_IDP_HEADER = "x-ms-client-principal-idp"
_PRINCIPAL_HEADERS = (PRINCIPAL_NAME_HEADER, PRINCIPAL_HEADER, PRINCIPAL_ID_HEADER, PRINCIPAL_IDP_HEADER)
READ_ROLE = "Workflows.Read"
OPERATE_ROLE = "Workflows.Operate"
_ROLE_CLAIMS = ("roles", "role", "http://schemas.microsoft.com/ws/2008/06/identity/claims/role")
_NAME_CLAIMS = (
    "name",
    "preferred_username",
    "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name",
    "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/upn",
    "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/emailaddress",
)


def platform_authentication_on(env: Mapping[str, str] | None = None) -> bool:
    """True when App Service Authentication fronts this (Azure-hosted) app."""
    env = os.environ if env is None else env
    in_azure = any((env.get(name) or "").strip() for name in AZURE_MARKER_SETTINGS)
    return in_azure and (env.get(AUTH_ENABLED_SETTING) or "").strip().lower() == "true"


def api_auth_level(env: Mapping[str, str] | None = None) -> func.AuthLevel:
    """``anonymous`` behind App Service Authentication (the platform authenticates), else ``function``."""
    return func.AuthLevel.ANONYMOUS if platform_authentication_on(env) else func.AuthLevel.FUNCTION


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """The stripped value of the header ``name`` (lower-case), blank included; None when absent."""
    for key, value in headers.items():
        if key.lower() == name.lower():
            return value.strip() if isinstance(value, str) else None
    return None


# Bounds on what the platform's headers may carry before anything is written (400 invalid-principal):
# far above what Microsoft Entra ID issues, far below what Table Storage refuses.
MAX_PRINCIPAL_NAME_CHARS = 256
MAX_PRINCIPAL_HEADER_CHARS = 32 * 1024
MAX_PRINCIPAL_CLAIMS = 500
MAX_CLAIM_CHARS = 1024


def _invalid_principal(what: str, limit: str) -> ApiError:
    return ApiError(
        400,
        f"the signed-in principal's {what} is over the limit: {limit}",
        ["the platform's principal headers are bounded before anything is recorded (docs/api.md)"],
        code="invalid-principal",
        extra={"limit": limit},
    )


def _checked_name(name: str) -> str:
    if len(name) > MAX_PRINCIPAL_NAME_CHARS:
        raise _invalid_principal("name", f"at most {MAX_PRINCIPAL_NAME_CHARS} characters")
    if not name.isprintable() or any("\ud800" <= c <= "\udfff" for c in name):
        raise _invalid_principal("name", "printable characters only")
    return name


def _principal(headers: Mapping[str, str]) -> tuple[str | None, frozenset[str]] | None:
    """The platform's principal (name, roles), or ``None`` when the request carries none (anonymous);
    400 ``invalid-principal`` when it breaks a bound."""
    encoded = _header(headers, PRINCIPAL_HEADER) or ""
    if len(encoded) > MAX_PRINCIPAL_HEADER_CHARS:
        raise _invalid_principal(PRINCIPAL_HEADER, f"at most {MAX_PRINCIPAL_HEADER_CHARS} characters")
    try:
        data = json.loads(base64.b64decode(encoded + "=" * (-len(encoded) % 4))) if encoded else None
    except (binascii.Error, ValueError, RecursionError):
        data = None
    name = _header(headers, PRINCIPAL_NAME_HEADER) or None
    if not isinstance(data, dict):
        return None if name is None else (_checked_name(name), frozenset())
    raw_claims = data.get("claims") or []
    if not isinstance(raw_claims, list) or len(raw_claims) > MAX_PRINCIPAL_CLAIMS:
        raise _invalid_principal("claims", f"a list of at most {MAX_PRINCIPAL_CLAIMS} claims")
    claims = [c for c in raw_claims if isinstance(c, dict)]
    if any(max(len(str(c.get("typ"))), len(str(c.get("val")))) > MAX_CLAIM_CHARS for c in claims):
        raise _invalid_principal("claims", f"each type and value at most {MAX_CLAIM_CHARS} characters")
    role_types = {data.get("role_typ"), *_ROLE_CLAIMS} - {None}
    roles = frozenset(str(c.get("val")) for c in claims if c.get("typ") in role_types and c.get("val"))
    if name is None and isinstance(data.get("userDetails"), str) and data["userDetails"].strip():
        name = data["userDetails"].strip()
    for wanted in (data.get("name_typ"), *_NAME_CLAIMS):
        for claim in claims:
            if name is None and wanted and claim.get("typ") == wanted and str(claim.get("val") or "").strip():
                name = str(claim["val"]).strip()
    return (None if name is None else _checked_name(name)), roles


# The names a local request may be addressed to (with the port it was served on): a browser sends
# the name it resolved, so a rebinding name never matches.
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})


def _host_and_port(value: str) -> tuple[str, int | None] | None:
    """``Host`` split into (lower-case name, port); ``None`` when it is not a plain host[:port]."""
    parts = urlsplit(f"//{value.strip()}")
    try:
        port = parts.port
    except ValueError:
        return None
    name = (parts.hostname or "").lower()
    if not name or parts.username is not None or parts.path or parts.query or parts.fragment:
        return None
    return (f"[{name}]" if ":" in name else name), port


def from_loopback(headers: Mapping[str, str], url: str) -> bool:
    """Whether a local request came from this machine: addressed to a :data:`LOCAL_HOSTS` name on the
    port it was served on (the request URL's). No forwarding header is read."""
    served = _host_and_port(urlsplit(url).netloc) if url else None
    sent = [value for key, value in headers.items() if key.lower() == "host"]
    host = _host_and_port(sent[0] if sent else (urlsplit(url).netloc if url else ""))  # absent: the URL's
    if host is None or host[0] not in LOCAL_HOSTS:
        return False
    default = {"http": 80, "https": 443}.get(urlsplit(url).scheme.lower()) if url else None
    served_port = (served[1] if served else None) or default
    return served is None or (host[1] or default) == served_port


def authorize(request: Any, *, action: bool) -> str | None:
    """The name to record for this request (``None`` for an anonymous read), or a 401/403 problem;
    ``action``: the request changes state."""
    headers, url, env = request.headers, request.url or "", os.environ
    in_azure = any((env.get(name) or "").strip() for name in AZURE_MARKER_SETTINGS)
    sent_principal = any(_header(headers, name) for name in _PRINCIPAL_HEADERS)
    if platform_authentication_on(env):
        # App Service sets the identity provider with every principal: without it, not the platform's
        if sent_principal and not _header(headers, PRINCIPAL_IDP_HEADER):
            raise ApiError(
                403,
                "identity headers without the platform's marker are not accepted",
                [
                    "App Service Authentication sends X-MS-CLIENT-PRINCIPAL-IDP with every signed-in "
                    "principal; X-MS-CLIENT-PRINCIPAL* headers without it were not set by the platform"
                ],
                code="untrusted-identity",
            )
        principal = _principal(headers)
        if principal is None:
            raise ApiError(
                401,
                "this request needs a signed-in caller",
                ["sign in through the Function App's App Service Authentication (Microsoft Entra ID)"],
                code="unauthenticated",
            )
        needed = (OPERATE_ROLE,) if action else (READ_ROLE, OPERATE_ROLE)
        name, roles = principal
        if not roles.intersection(needed):
            raise ApiError(
                403,
                f"{'operator actions need' if action else 'reading workflows needs'} the app role "
                f"{' or '.join(needed)}",
                ["an administrator assigns app roles to users and groups on the app registration"],
                code="forbidden",
                extra={"requiredRoles": list(needed), "roles": sorted(roles)},
            )
        return name or "signed-in-user"
    if action and in_azure:
        raise ApiError(
            401,
            "operator actions need a signed-in caller",
            [
                "enable App Service Authentication on the Function App, so that each action is "
                "recorded with the operator's identity"
            ],
            code="unauthenticated",
        )
    if sent_principal:
        raise ApiError(
            403,
            "identity headers are not accepted here",
            [
                "X-MS-CLIENT-PRINCIPAL* headers are believed only when App Service Authentication fronts "
                "an Azure-hosted app (WEBSITE_AUTH_ENABLED=true and WEBSITE_INSTANCE_ID or "
                "WEBSITE_SITE_NAME set by the platform); a request that sends one otherwise is refused"
            ],
            code="untrusted-identity",
        )
    if in_azure:
        return None  # a read: the function key guards it
    if not from_loopback(headers, url):
        raise ApiError(
            403,
            f"local {'operator actions are' if action else 'views are'} accepted only from this machine",
            [
                "without App Service Authentication the app cannot tell who a remote caller is; address "
                "it as localhost, 127.0.0.1 or [::1] on the port it serves (forwarding headers are "
                "ignored)"
            ],
            code="not-loopback",
        )
    try:
        return getpass.getuser()
    except Exception:
        return "local-developer"


def caller_name(request: Any) -> str:
    """The name recorded for a state-changing request: :func:`authorize` with ``action=True``."""
    name = authorize(request, action=True)
    assert name is not None  # an action is never anonymous
    return name


CLIENT_HEADER = "X-SAS-Client"
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
API_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
# The console: its own scripts and styles only (the legend's colour swatches use style attributes).
CONSOLE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": API_CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _origin_of(url: str) -> str | None:
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return None
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    host = (parts.hostname or "").lower()
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme.lower()}://{host}" + ("" if parts.port in (None, default) else f":{parts.port}")


def _own_origins(req: Any) -> set[str]:
    """The origins this request was addressed to: its URL's, and its ``Host`` header's (behind a
    front end the URL may name the worker's address while the browser used the public host)."""
    host = _header(req.headers or {}, "host")
    urls = [req.url or "", *((f"http://{host}", f"https://{host}") if host else ())]
    return {origin for url in urls if (origin := _origin_of(url))}


def admit(req: Any) -> None:
    """Refuse the request with a problem unless it may proceed (see the module's docstring)."""
    action = (getattr(req, "method", "GET") or "GET").upper() not in READ_METHODS
    if action:
        headers = req.headers or {}
        fetch_site = (_header(headers, "sec-fetch-site") or "").lower()
        origin = _header(headers, "origin")
        foreign = origin is not None and (
            origin.lower() == "null" or _origin_of(origin) not in _own_origins(req)
        )
        if fetch_site == "cross-site" or foreign:
            raise ApiError(
                403,
                "cross-site requests may not change state",
                [f"Origin {origin!r}, Sec-Fetch-Site {fetch_site or None!r}: act from the console or sas"],
                code="cross-site",
            )
        media = (_header(headers, "content-type") or "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            raise ApiError(
                415,
                "state-changing requests take only application/json",
                [f"got Content-Type {media or 'none'!r}; send Content-Type: application/json"],
                code="unsupported-media-type",
            )
        if not _header(headers, CLIENT_HEADER):
            raise ApiError(
                400,
                f"state-changing requests need the {CLIENT_HEADER} header",
                [f"send {CLIENT_HEADER}: <your client's name> (any non-empty value; the console sends it)"],
                code="client-header-required",
            )
    authorize(req, action=action)


def secure(response: Any, csp: str = API_CSP) -> Any:
    """``response`` with :data:`SECURITY_HEADERS` (and the given CSP) set where it sets none itself
    (the console's files set their own CSP and caching)."""
    for name, value in SECURITY_HEADERS.items():
        if name not in response.headers:
            response.headers[name] = csp if name == "Content-Security-Policy" else value
    return response
