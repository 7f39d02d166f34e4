"""``GET /api/diagnostics``: the platform as the running app sees it, for ``sas doctor``.

Never public: behind App Service Authentication it needs the ``Workflows.Operate`` role; without it a
function key (in Azure) or a loopback caller (locally), as every read. The body names settings, never
their values. Each section (:data:`SECTIONS`) and each feature's provider (:data:`PROVIDERS`) runs on
its own: one that raises becomes a failed row, never a 500.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import azure.functions as func

from api import diagnostics_providers, diagnostics_queues, diagnostics_rbac, diagnostics_runtime
from api import diagnostics_sections as sections
from api.boundary import authorize, secure
from api.diagnostics_timers import timers
from api.platform_auth import platform_authentication_on
from api.responses import ServicesSource, json_errors, json_response, resolve_services

# The optional features' rows (api/diagnostics_providers.py): name -> callable(services) -> rows.
PROVIDERS = {
    "canary": diagnostics_providers.canary_rows,
    "circuits": diagnostics_providers.circuit_rows,
    "features": diagnostics_providers.feature_rows,
}


def _providers(services: Any) -> list[sections.Row]:
    rows: list[sections.Row] = []
    for name, provider in sorted(PROVIDERS.items()):
        try:
            rows.extend(provider(services))
        except Exception as exc:
            rows.append(
                sections.row(name, False, f"the {name} provider failed: {type(exc).__name__}", "see the logs")
            )
    return rows


SECTIONS: tuple[tuple[str, Any], ...] = (
    ("host", sections.host_json),
    ("settings", sections.settings),
    ("identity", sections.identity),
    ("telemetry", lambda s: [*sections.telemetry(s), diagnostics_runtime.telemetry_exporter()]),
    ("access", sections.access),
    ("queues", lambda s: [*diagnostics_queues.queues(s), *diagnostics_runtime.answer_queues(s)]),
    ("roles", diagnostics_rbac.roles),
    ("timers", timers),
    ("providers", _providers),
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
            detail = f"the section failed: {type(exc).__name__}: {exc}"[:400]
            rows = [sections.row(name, False, detail, "see logs")]
        body["sections"][name] = rows
    body["failed"] = sum(1 for rows in body["sections"].values() for r in rows if r["ok"] is False)
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
