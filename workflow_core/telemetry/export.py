"""Export of the pattern's telemetry to Application Insights, through the Azure Monitor OpenTelemetry distro.

Nothing is exported unless :func:`configure_telemetry` found ``APPLICATIONINSIGHTS_CONNECTION_STRING``:
without it the OpenTelemetry API's no-op providers swallow the signals (logs still go to the normal
Python logging handlers, which the Functions host forwards).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from workflow_core.telemetry import instruments
from workflow_core.telemetry.instruments import use_providers

if TYPE_CHECKING:
    from workflow_core.settings import Settings

_configured = False


def configure_telemetry(
    settings: Settings | None = None, *, logger_name: str = "sas", **azure_monitor_options: Any
) -> bool:
    """Export to Application Insights if ``APPLICATIONINSIGHTS_CONNECTION_STRING`` is set; once per process.

    Returns True when Azure Monitor is (now or already) configured, False when nothing is exported.
    ``logger_name`` limits which loggers are exported as ``traces`` (default ``sas``: the recovery
    records of ``sas.supervisor`` and any other ``sas.*`` logger; the Functions host already forwards
    ordinary logs, so exporting the root logger as well would duplicate them). ``settings`` defaults
    to reading the environment variable directly, so it works before the other settings are valid.
    """
    global _configured
    connection_string = (
        settings.app_insights_connection_string
        if settings is not None
        else (os.environ.get("APPLICATIONINSIGHTS_CONNECTION_STRING") or "").strip() or None
    )
    if not connection_string:
        return False
    with instruments.lock:
        if _configured:
            return True
        from azure.monitor.opentelemetry import configure_azure_monitor

        credential = _entra_credential()
        if credential is not None and "credential" not in azure_monitor_options:
            # Application Insights in infra/ has local (key) auth disabled: ingestion needs Entra ID.
            azure_monitor_options["credential"] = credential
        configure_azure_monitor(
            connection_string=connection_string, logger_name=logger_name, **azure_monitor_options
        )
        _configured = True
    # Rebind the instruments to the (now real) global providers.
    use_providers(None, None)
    return True


def _entra_credential() -> Any:
    """The managed identity to authenticate telemetry with, when the app settings name one.

    ``APPLICATIONINSIGHTS_AUTHENTICATION_STRING=Authorization=AAD;ClientId=<id>`` (what infra/ sets)
    or ``AZURE_CLIENT_ID``; None when neither is set (local runs with a key-based resource).
    """
    auth = os.environ.get("APPLICATIONINSIGHTS_AUTHENTICATION_STRING") or ""
    parts = dict(p.split("=", 1) for p in auth.split(";") if "=" in p)
    client_id = parts.get("ClientId") or os.environ.get("AZURE_CLIENT_ID")
    if parts.get("Authorization", "").upper() != "AAD" and not os.environ.get("AZURE_CLIENT_ID"):
        return None
    from azure.identity import ManagedIdentityCredential

    return ManagedIdentityCredential(client_id=client_id) if client_id else ManagedIdentityCredential()


def configure_telemetry_from_env() -> bool:
    """:func:`configure_telemetry` from the environment alone (for ``function_app`` at import time,
    when the other settings may not be valid yet)."""
    return configure_telemetry(None)


def is_configured() -> bool:
    return _configured
