"""``GET /api/diagnostics``: the platform as the running app sees it, for ``sas doctor``.

Never public: behind App Service Authentication it needs the ``Workflows.Operate`` role; without it a
function key (in Azure) or a loopback caller (locally), as every read. The body names settings, never
their values. Each section (:data:`SECTIONS`) runs on its own: one that raises becomes a failed row.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import azure.functions as func

from api import diagnostics_providers, diagnostics_rbac, diagnostics_runtime, diagnostics_timers
from api import diagnostics_sections as sections
from api.boundary import authorize, secure
from api.platform_auth import platform_authentication_on
from api.responses import ServicesSource, json_errors, json_response, resolve_services

diagnostics_providers.install()  # the canary's and the circuits' rows

SECTIONS: tuple[tuple[str, Any], ...] = (
    ("host", sections.host_json),
    ("settings", sections.settings),
    ("identity", sections.identity),
    ("telemetry", lambda s: [*sections.telemetry(s), diagnostics_runtime.telemetry_exporter()]),
    ("access", sections.access),
    ("queues", lambda s: [*sections.queues(s), *diagnostics_runtime.answer_queues(s)]),
    ("roles", diagnostics_rbac.roles),
    ("timers", diagnostics_timers.timers),
    ("providers", sections.providers),
)


def collect(services: Any, durable: list[sections.Row] | None = None) -> dict[str, Any]:
    """Every section's rows (``durable``: the Durable round trip's, asked before on the event loop)."""
    body: dict[str, Any] = {"generatedAt": datetime.now(UTC).isoformat(), "sections": {}}
    if durable is not None:
        body["sections"]["durable"] = durable
    for name, section in SECTIONS:
        try:
            rows = section(services)
        except Exception as exc:
            rows = [
                sections.row(
                    name, False, f"the section failed: {type(exc).__name__}: {exc}"[:400], "see logs"
                )
            ]
        body["sections"][name] = rows
    checks = [r for rows in body["sections"].values() for r in rows]
    body["failed"] = sum(1 for r in checks if r["ok"] is False)
    body["ok"] = body["failed"] == 0
    return body


@json_errors
async def diagnostics(req: func.HttpRequest, client: Any, services: ServicesSource) -> func.HttpResponse:
    # Behind platform authentication: the operator role; otherwise the function key (or loopback).
    authorize(req, action=platform_authentication_on())
    svc = resolve_services(services)
    durable = [await diagnostics_runtime.durable_backend(client)]
    body = await asyncio.to_thread(collect, svc, durable)
    return secure(json_response(body))
