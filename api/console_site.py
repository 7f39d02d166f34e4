"""The web console's files (``api/static/``), served by the Function App itself at ``/api/console/``.

Static HTML, CSS and JavaScript, no framework and no build step: the page calls the operator API
(``/api/instances``...) from the browser. The files hold no data, so the route is anonymous; in Azure
the page forwards the ``code`` query parameter it was opened with as the API's function key.
"""

from __future__ import annotations

import functools
from pathlib import Path

import azure.functions as func

from api.boundary import CONSOLE_CSP, secure
from api.responses import ApiError, json_errors

STATIC = Path(__file__).resolve().parent / "static"
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}
INDEX = "index.html"


@functools.partial(json_errors, public=True)
async def console_file(req: func.HttpRequest) -> func.HttpResponse:
    """``GET /api/console/{*path}``: one file of the console; the bare path is the page itself."""
    path = req.route_params.get("path") or ""
    name = path.strip("/") or INDEX
    if "/" in name or "\\" in name or name.startswith("."):
        raise ApiError(
            404, f"no console file {path!r}", ["the console is one folder of files"], code="not-found"
        )
    target = STATIC / name
    if target.suffix not in TYPES or not target.is_file():
        known = ", ".join(sorted(p.name for p in STATIC.iterdir() if p.suffix in TYPES))
        raise ApiError(404, f"no console file {name!r}", [f"console files: {known}"], code="not-found")
    response = func.HttpResponse(
        target.read_bytes(),
        status_code=200,
        headers={
            "Content-Type": TYPES[target.suffix],
            "Cache-Control": "no-cache",
            "X-Content-Type-Options": "nosniff",
        },
        mimetype=TYPES[target.suffix].split(";")[0],
    )
    return secure(response, CONSOLE_CSP)
