"""The HTTP API's door: who may send a request, and how a state-changing one must look.

Every API body runs behind :func:`admit` (through :func:`api.responses.json_errors`), so no route can
forget it. A state-changing request must be same-origin JSON carrying ``X-SAS-Client``: a cross-site
HTML form can do none of these, and a cross-site ``fetch`` that does needs a CORS preflight this app
never grants. Every answer carries :data:`SECURITY_HEADERS` (docs/api.md, "Who may call").
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from api.identity import authorize
from api.problems import ApiError

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


def _header(req: Any, name: str) -> str | None:
    for key, value in (req.headers or {}).items():
        if key.lower() == name.lower():
            return value.strip() if isinstance(value, str) else None
    return None


def _origin_of(url: str) -> str | None:
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return None
    port = parts.port
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    host = (parts.hostname or "").lower()
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme.lower()}://{host}" + ("" if port in (None, default) else f":{port}")


def _own_origins(req: Any) -> set[str]:
    """The origins this request was addressed to: its URL's, and its ``Host`` header's (behind a
    front end the URL may name the worker's address while the browser used the public host)."""
    origins = set()
    url_origin = _origin_of(req.url or "")
    if url_origin:
        origins.add(url_origin)
    host = _header(req, "host")
    if host:
        for scheme in ("http", "https"):
            if candidate := _origin_of(f"{scheme}://{host}"):
                origins.add(candidate)
    return origins


def _check_same_site(req: Any) -> None:
    fetch_site = (_header(req, "sec-fetch-site") or "").lower()
    origin = _header(req, "origin")
    foreign_origin = origin is not None and (
        origin.lower() == "null" or _origin_of(origin) not in _own_origins(req)
    )
    if fetch_site == "cross-site" or foreign_origin:
        raise ApiError(
            403,
            "cross-site requests may not change state",
            [f"Origin {origin!r}, Sec-Fetch-Site {fetch_site or None!r}: act from the console or sas"],
            code="cross-site",
        )


def _check_shape(req: Any) -> None:
    media = (_header(req, "content-type") or "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise ApiError(
            415,
            "state-changing requests take only application/json",
            [f"got Content-Type {media or 'none'!r}; send Content-Type: application/json"],
            code="unsupported-media-type",
        )
    if not _header(req, CLIENT_HEADER):
        raise ApiError(
            400,
            f"state-changing requests need the {CLIENT_HEADER} header",
            [f"send {CLIENT_HEADER}: <your client's name> (any non-empty value; the console sends it)"],
            code="client-header-required",
        )


def admit(req: Any) -> None:
    """Refuse the request with a problem unless it may proceed (see the module's docstring)."""
    action = (getattr(req, "method", "GET") or "GET").upper() not in READ_METHODS
    if action:
        _check_same_site(req)
        _check_shape(req)
    authorize(req, action=action)


def secure(response: Any, csp: str = API_CSP) -> Any:
    """``response`` with :data:`SECURITY_HEADERS` (and the given CSP) set where it sets none itself
    (the console's files set their own CSP and caching)."""
    for name, value in SECURITY_HEADERS.items():
        if name not in response.headers:
            response.headers[name] = csp if name == "Content-Security-Policy" else value
    return response
