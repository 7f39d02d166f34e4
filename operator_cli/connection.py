"""Where the CLI finds the step ledger: options, then the environment, then ``local.settings.json``.

An operator runs ``sas`` from a shell that usually has none of the Function App's settings; the app
itself reads them from ``local.settings.json`` under ``func start``. So when the environment names no
storage, the CLI reads the same file (from the current folder, else the project's root), and the
README's commands work as written next to ``./scripts/start`` and ``./scripts/demo --serve``.

The ledger is opened *without* creating its tables: a read against the wrong account must say
"no such table", not leave empty tables behind that make the mistake look like an empty ledger.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from azure.data.tables import TableServiceClient

from workflow_core.ledger import StepLedger
from workflow_core.settings import STORAGE_CONNECTION, SettingsError, load_settings

LOCAL_SETTINGS = "local.settings.json"
PROJECT_ROOT = Path(__file__).resolve().parents[1]
# The CLI gives up quickly on an unreachable endpoint instead of retrying for a minute.
RETRY_TOTAL = 1


class ConnectionProblem(Exception):
    """The settings do not describe a usable storage account; the message says which and how to fix it."""


@dataclass(frozen=True)
class LedgerLocation:
    """What the CLI will open, and where the settings came from (shown by ``sas --help`` errors)."""

    env: dict[str, str]
    source: str


def _has_storage(env: Mapping[str, str]) -> bool:
    return any(
        (name == STORAGE_CONNECTION or name.startswith(f"{STORAGE_CONNECTION}__")) and value.strip()
        for name, value in env.items()
    )


def _local_settings_file(cwd: Path) -> Path | None:
    for folder in (cwd, PROJECT_ROOT):
        candidate = folder / LOCAL_SETTINGS
        if candidate.is_file():
            return candidate
    return None


def read_local_settings(path: Path) -> dict[str, str]:
    """The ``Values`` of a ``local.settings.json``; a broken file is a :class:`ConnectionProblem`."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConnectionProblem(f"{path}: cannot be read as JSON ({exc}); fix or delete the file") from None
    values = data.get("Values") if isinstance(data, dict) else None
    if not isinstance(values, dict):
        raise ConnectionProblem(f'{path}: has no "Values" object; compare it with {LOCAL_SETTINGS}.example')
    return {str(k): "" if v is None else str(v) for k, v in values.items()}


def locate(
    *,
    connection_string: str | None,
    ledger_table: str | None,
    index_table: str | None,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> LedgerLocation:
    """The settings the CLI uses: options beat the environment, which beats ``local.settings.json``."""
    env = dict(os.environ if environ is None else environ)
    source = "the environment"
    if connection_string:
        source = "--connection-string"
    elif not _has_storage(env):
        path = _local_settings_file(cwd or Path.cwd())
        if path is None:
            raise ConnectionProblem(
                f"no storage settings: set {STORAGE_CONNECTION} (UseDevelopmentStorage=true for Azurite), "
                f"pass --connection-string, or run from the project folder that has {LOCAL_SETTINGS} "
                "(./scripts/start creates it)"
            )
        env = {**read_local_settings(path), **{k: v for k, v in env.items() if v.strip()}}
        source = str(path)
    if connection_string:
        env[STORAGE_CONNECTION] = connection_string
    if ledger_table:
        env["LEDGER_TABLE_NAME"] = ledger_table
    if index_table:
        env["DEADLINE_INDEX_TABLE_NAME"] = index_table
    env["AGENT_TRANSPORT"] = "storage-queue"  # the CLI needs only storage, never Service Bus settings
    return LedgerLocation(env, source)


def open_ledger(location: LedgerLocation) -> StepLedger:
    """A ledger on the located account; never creates a table. Bad settings are a ConnectionProblem."""
    try:
        settings = load_settings(location.env)
    except SettingsError as exc:
        raise ConnectionProblem(f"{exc} (settings from {location.source})") from None
    storage = settings.ledger_connection  # LedgerStorage, else AzureWebJobsStorage
    if storage.connection_string:
        try:
            service = TableServiceClient.from_connection_string(
                storage.connection_string, retry_total=RETRY_TOTAL
            )
        except ValueError as exc:
            raise ConnectionProblem(
                f"the storage connection string from {location.source} is malformed ({exc}); expected "
                "'DefaultEndpointsProtocol=...;AccountName=...;AccountKey=...;TableEndpoint=...' or "
                "'UseDevelopmentStorage=true'"
            ) from None
    else:
        from azure.identity import DefaultAzureCredential

        credential = DefaultAzureCredential(managed_identity_client_id=storage.client_id)
        service = TableServiceClient(
            endpoint=storage.table_service_uri, credential=credential, retry_total=RETRY_TOTAL
        )
    return StepLedger(service, settings.ledger_table, settings.deadline_index_table)
