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

Row = dict[str, Any]
APP_ROOT = Path(__file__).resolve().parents[1]
PROBE_PREFIX = "sas-doctor-probe"
DTS_CONNECTION = "DURABLE_TASK_SCHEDULER_CONNECTION_STRING"
BUNDLE_ID = "Microsoft.Azure.Functions.ExtensionBundle"
BUNDLE_RANGE = "[4.*, 5.0.0)"
MAX_POLLING_SECONDS = 10
# Platform settings the app or its host reads (names only are reported).
PLATFORM_SETTINGS = (
    "AzureWebJobsStorage",
    "AzureWebJobsStorage__credential",
    "AzureWebJobsStorage__clientId",
    "AzureWebJobsStorage__tableServiceUri",
    "AzureWebJobsStorage__queueServiceUri",
    "AzureWebJobsStorage__blobServiceUri",
    "ServiceBusConnection__fullyQualifiedNamespace",
    "AZURE_CLIENT_ID",
    "APPLICATIONINSIGHTS_CONNECTION_STRING",
    "APPLICATIONINSIGHTS_AUTHENTICATION_STRING",
    telemetry_instruments.WORKER_TELEMETRY_SETTING,
    telemetry_instruments.NULL_PROPAGATOR_SETTING,
    "PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME",
    "WEBSITE_AUTH_ENABLED",
    "WEBSITE_SITE_NAME",
    "IDENTITY_ENDPOINT",
    DTS_CONNECTION,
    "TASK_HUB_NAME",
)


def row(check: str, ok: bool | None, detail: str, fix: str = "") -> Row:
    return {"check": check, "ok": ok, "detail": detail, "fix": "" if ok else fix}


def _env(name: str) -> str:
    return (os.environ.get(name) or "").strip()


# ---- host.json -----------------------------------------------------------------------------------


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
    parts = str(timespan or "").split(":")
    try:
        hours, minutes, seconds = (float(p) for p in parts) if len(parts) == 3 else (None, None, None)
    except ValueError:
        return None
    return None if hours is None else hours * 3600 + minutes * 60 + seconds


# ---- settings, identity, telemetry ----------------------------------------------------------------


def settings(_services: Any) -> list[Row]:
    """Which settings are set (names only, never values)."""
    features = {name for group in FEATURE_SETTINGS.values() for name in group}
    names = sorted(set(DOCUMENTED_SETTINGS) | set(PLATFORM_SETTINGS) | features)
    set_names = [name for name in names if _env(name)]
    return [
        row("app settings", True, f"set: {', '.join(set_names) or '(none)'}"),
        *[
            row(f"setting {name}", False, f"{name} is not set", f"set the app setting {name}")
            for name in ("TASK_HUB_NAME",)
            if not _env(name) and _env("WEBSITE_SITE_NAME")
        ],
    ]


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
    null_propagator = bool(_env(telemetry_instruments.NULL_PROPAGATOR_SETTING)) and not worker
    by = telemetry_instruments.configured_by()
    connection = bool(_env("APPLICATIONINSIGHTS_CONNECTION_STRING"))
    rows = [
        row(
            "telemetry propagator",
            not null_propagator,
            f"{telemetry_instruments.NULL_PROPAGATOR_SETTING} "
            f"{'set without' if null_propagator else 'not relied on;'} "
            f"{telemetry_instruments.WORKER_TELEMETRY_SETTING}={'true' if worker else 'unset'}",
            f"replace {telemetry_instruments.NULL_PROPAGATOR_SETTING} with "
            f"{telemetry_instruments.WORKER_TELEMETRY_SETTING}=true (worker issue 1881)",
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


# ---- access probes and queues --------------------------------------------------------------------


def _probe(check: str, action: Callable[[], None], fix: str) -> Row:
    try:
        action()
    except Exception as exc:  # a failed probe is the finding
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
        return row(check, False, f"{type(exc).__name__}: {first}", fix)
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


def queues(services: Any) -> list[Row]:
    """Every pool queue and the result queue: a probe, depth and oldest message age where measurable."""
    from workflow_core.workflows.loader import agent_pools
    from workflow_core.workflows.pools import pool_queue

    s = services.settings
    names = [pool_queue(s.work_queue, pool) for pool in agent_pools().names] + [s.result_queue]
    try:
        transport = services.transport
    except Exception as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
        fix = "grant the app's identity send and receive rights on its queues (role-assignments.bicep)"
        return [row(f"queue {name}", False, f"{type(exc).__name__}: {first}", fix) for name in names]
    from api.diagnostics_queues import diagnose

    return [diagnose(transport, name) for name in names]


# ---- pluggable providers ------------------------------------------------------------------------


# Other features register here (the recovery canary, circuit breakers): name -> callable(services)
# returning rows. A provider that raises is reported as a failed row, never a 500.
PROVIDERS: dict[str, Callable[[Any], list[Row]]] = {}


def register_provider(name: str, provider: Callable[[Any], list[Row]] | None) -> None:
    """Add (or, with None, remove) a diagnostics provider, e.g. ``"canary"`` or ``"circuits"``."""
    if provider is None:
        PROVIDERS.pop(name, None)
    else:
        PROVIDERS[name] = provider


def providers(services: Any) -> list[Row]:
    rows: list[Row] = []
    for name in ("canary", "circuits"):
        if name not in PROVIDERS:
            rows.append(row(name, None, f"no {name} provider is installed in this build"))
    for name, provider in sorted(PROVIDERS.items()):
        try:
            rows.extend(provider(services))
        except Exception as exc:
            rows.append(row(name, False, f"the {name} provider failed: {type(exc).__name__}", "see the logs"))
    return rows
