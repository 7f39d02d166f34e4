"""The sections of ``GET /api/diagnostics``: what the running app itself sees of the platform.

Each section returns check rows ``{"check", "ok", "detail", "fix"}`` (``ok`` None: not applicable or
not measurable here). Nothing here returns a setting's *value*: names and whether they are set only.
The access probes write and delete their own row / message / blob (partition and names under
:data:`PROBE_PREFIX`), never workflow data. docs/platform.md lists the platform behaviour each check
stands for; ``sas doctor`` (operator_cli/doctor_command.py) prints them.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workflow_core import telemetry_instruments
from workflow_core.settings import DOCUMENTED_SETTINGS, FEATURE_SETTINGS
from workflow_core.telemetry_instruments import NULL_PROPAGATOR_SETTING, WORKER_TELEMETRY_SETTING

Row = dict[str, Any]
APP_ROOT = Path(__file__).resolve().parents[1]
PROBE_PREFIX = "sas-doctor-probe"
DTS_CONNECTION = "DURABLE_TASK_SCHEDULER_CONNECTION_STRING"
BUNDLE_ID = "Microsoft.Azure.Functions.ExtensionBundle"
BUNDLE_RANGE = "[4.*, 5.0.0)"
MAX_POLLING_SECONDS = 10
# Platform settings the app or its host reads (names only are reported), beside DOCUMENTED_SETTINGS.
PLATFORM_SETTINGS = (
    "AzureWebJobsStorage__credential",
    "AzureWebJobsStorage__clientId",
    "AzureWebJobsStorage__tableServiceUri",
    "AzureWebJobsStorage__queueServiceUri",
    "AzureWebJobsStorage__blobServiceUri",
    "ServiceBusConnection__fullyQualifiedNamespace",
    "AZURE_CLIENT_ID",
    "APPLICATIONINSIGHTS_AUTHENTICATION_STRING",
    WORKER_TELEMETRY_SETTING,
    NULL_PROPAGATOR_SETTING,
    "PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME",
    "WEBSITE_AUTH_ENABLED",
    "WEBSITE_SITE_NAME",
    "IDENTITY_ENDPOINT",
    DTS_CONNECTION,
)


def row(check: str, ok: bool | None, detail: str, fix: str = "") -> Row:
    return {"check": check, "ok": ok, "detail": detail, "fix": "" if ok else fix}


def _env(name: str) -> str:
    return (os.environ.get(name) or "").strip()


def host_json(_services: Any, *, root: Path = APP_ROOT) -> list[Row]:
    """The host.json the app was packaged with: backend, hub, bundle, telemetry mode."""
    try:
        host = json.loads((root / "host.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [row("host.json", False, f"cannot read the app's host.json: {exc}", "package host.json")]
    durable = (host.get("extensions") or {}).get("durableTask") or {}
    storage_provider = durable.get("storageProvider") or {}
    provider = storage_provider.get("type") or "AzureStorage"
    bundle = host.get("extensionBundle") or {}
    wants_dts = bool(_env(DTS_CONNECTION))
    backend_ok = (provider == "azureManaged") == wants_dts
    rows = [
        row(
            "host.json durable backend",
            backend_ok,
            f"storageProvider.type={provider}; {DTS_CONNECTION} {'set' if wants_dts else 'not set'}",
            "package the host.json of the deployed backend: infra/deploy.sh picks it from durableBackend, "
            "azd's service prepackage hook from DURABLE_BACKEND (docs/deploy.md)",
        ),
        row(
            "host.json task hub",
            bool(durable.get("hubName")),
            f"hubName={durable.get('hubName')!r}",
            "host.json extensions.durableTask.hubName must name the hub (%TASK_HUB_NAME%)",
        ),
        row(
            "host.json telemetryMode",
            host.get("telemetryMode") == "OpenTelemetry",
            f"telemetryMode={host.get('telemetryMode')!r}",
            'set "telemetryMode": "OpenTelemetry" in host.json',
        ),
        row(
            "host.json extension bundle",
            (bundle.get("id"), bundle.get("version")) == (BUNDLE_ID, BUNDLE_RANGE),
            f"extensionBundle id={bundle.get('id')!r} version={bundle.get('version')!r}",
            f"host.json needs the {BUNDLE_ID} {BUNDLE_RANGE}: the Durable, Service Bus and queue bindings "
            "this app uses, as the Durable Task Scheduler samples pin it",
        ),
    ]
    # The Azure Storage provider polls its queues, backing off to this interval; the scheduler pushes.
    interval = storage_provider.get("maxQueuePollingInterval")
    seconds = _seconds(interval)
    rows.append(
        row(
            "host.json polling interval",
            (seconds is not None and seconds <= MAX_POLLING_SECONDS) if provider == "AzureStorage" else None,
            f"durableTask.storageProvider.maxQueuePollingInterval={interval!r}"
            + ("" if provider == "AzureStorage" else f" (not read by {provider})"),
            "set it to 00:00:10 or less: on Flex Consumption the Durable docs ask for at most 10 s "
            "(the default 30 s leaves orchestrations idle between polls)",
        )
    )
    return rows


def _seconds(timespan: Any) -> float | None:
    """A host.json ``hh:mm:ss`` as seconds (None when it is not one)."""
    try:
        hours, minutes, seconds = (float(p) for p in str(timespan or "").split(":"))
    except ValueError:  # not a number, or not three parts
        return None
    return hours * 3600 + minutes * 60 + seconds


def settings(_services: Any) -> list[Row]:
    """Which settings are set (names only, never values)."""
    features = {name for group in FEATURE_SETTINGS.values() for name in group}
    names = sorted(set(DOCUMENTED_SETTINGS) | set(PLATFORM_SETTINGS) | features)
    rows = [row("app settings", True, f"set: {', '.join(n for n in names if _env(n)) or '(none)'}")]
    if _env("WEBSITE_SITE_NAME") and not _env("TASK_HUB_NAME"):
        rows.append(
            row(
                "setting TASK_HUB_NAME",
                False,
                "TASK_HUB_NAME is not set",
                "set the app setting TASK_HUB_NAME",
            )
        )
    return rows


def identity(_services: Any) -> list[Row]:
    in_azure = bool(_env("WEBSITE_SITE_NAME") or _env("WEBSITE_INSTANCE_ID"))
    managed = bool(_env("IDENTITY_ENDPOINT") or _env("MSI_ENDPOINT"))
    auth_on = _env("WEBSITE_AUTH_ENABLED").lower() == "true"
    return [
        row(
            "platform identity",
            managed if in_azure else None,
            ("managed identity endpoint present" if managed else "no managed identity endpoint")
            + ("" if in_azure else " (local: not applicable)"),
            "assign the user-assigned identity to the Function App (infra/modules/function-app.bicep)",
        ),
        row(
            "identity client id",
            bool(_env("AZURE_CLIENT_ID")) if in_azure else None,
            f"AZURE_CLIENT_ID {'set' if _env('AZURE_CLIENT_ID') else 'not set'}",
            "set AZURE_CLIENT_ID to the user-assigned identity's client id",
        ),
        row(
            "App Service Authentication",
            None,
            f"WEBSITE_AUTH_ENABLED {'True' if auth_on else 'not set'}: routes are "
            f"{'anonymous behind platform authentication' if auth_on and in_azure else 'function-key'}",
        ),
    ]


def telemetry(_services: Any) -> list[Row]:
    worker = telemetry_instruments.worker_owns_telemetry()
    null_propagator = bool(_env(NULL_PROPAGATOR_SETTING)) and not worker
    by = telemetry_instruments.configured_by()
    connection = bool(_env("APPLICATIONINSIGHTS_CONNECTION_STRING"))
    rows = [
        row(
            "telemetry propagator",
            not null_propagator,
            f"{NULL_PROPAGATOR_SETTING} {'set without' if null_propagator else 'not relied on;'} "
            f"{WORKER_TELEMETRY_SETTING}={'true' if worker else 'unset'}",
            f"replace {NULL_PROPAGATOR_SETTING} with {WORKER_TELEMETRY_SETTING}=true (worker issue 1881)",
        ),
        row(
            "telemetry configured once",
            not (worker and by == "app"),
            f"exporter configured by {by or 'nobody yet'}; worker owns telemetry: {worker}",
            "the app must not call configure_azure_monitor when the worker does "
            "(workflow_core/telemetry_instruments.py)",
        ),
    ]
    if _env("WEBSITE_SITE_NAME"):
        rows.append(
            row(
                "telemetry connection",
                connection,
                f"APPLICATIONINSIGHTS_CONNECTION_STRING {'set' if connection else 'not set'}",
                "set APPLICATIONINSIGHTS_CONNECTION_STRING (infra sets it from the component)",
            )
        )
    return rows


def failure(exc: Exception) -> str:
    """What a failed probe says: the exception's type and the first line of its text."""
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [type(exc).__name__])[0][:300]}"


def _probe(check: str, action: Callable[[], None], fix: str) -> Row:
    try:
        action()
    except Exception as exc:  # a failed probe is the finding
        return row(check, False, failure(exc), fix)
    return row(check, True, "wrote and deleted its own probe")


def _table_probe(table: Any) -> None:
    key = {"PartitionKey": PROBE_PREFIX, "RowKey": uuid.uuid4().hex}
    table.create_entity(key)
    table.delete_entity(key["PartitionKey"], key["RowKey"])


def access(services: Any) -> list[Row]:
    """The identity's access to every table and the payload container: a probe of its own each."""
    from workflow_core.storage_clients import table_client

    s = services.settings
    if s.ledger_connection.connection_string:  # local/dev: the tables are created on first use
        with contextlib.suppress(Exception):
            services.ledger  # noqa: B018 - creates what infra would have provisioned
    rows = [
        _probe(
            f"table {name}",
            lambda name=name: _table_probe(table_client(s.ledger_connection, name)),
            f"grant the app's identity Storage Table Data Contributor on {name} "
            "(infra/modules/role-assignments.bicep)",
        )
        for name in (s.ledger_table, s.deadline_index_table)
    ]

    def blob() -> None:
        from workflow_core.storage_clients import blob_container_client

        client = blob_container_client(s.storage, s.payload_container)
        if s.storage.connection_string:  # local/dev: created on first use, as workflow_core.runtime does
            from azure.core.exceptions import ResourceExistsError

            with contextlib.suppress(ResourceExistsError):
                client.create_container()
        name = f"{PROBE_PREFIX}/{uuid.uuid4().hex}"
        client.upload_blob(name, b"probe")
        client.delete_blob(name)

    rows.append(
        _probe(
            f"container {s.payload_container}",
            blob,
            f"grant the app's identity Storage Blob Data Contributor on {s.payload_container}",
        )
    )
    return rows
