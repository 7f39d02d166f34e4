"""``sas replay-check --live``: replay what a task hub is running against the code on disk.

Reads every running or pending orchestration of the task hub from the Azure Storage provider's
own tables (``devtools/live_history.py``: the current execution's history rows, large payloads from
their blobs) with the app's connection settings (``AzureWebJobsStorage``: a connection string, or
``__accountName`` / ``__tableServiceUri`` + ``__blobServiceUri`` with an identity) and the app's task
hub (``TASK_HUB_NAME``, which host.json's ``hubName`` names), then replays each with the replay check.
Any error reading the store ends the run with exit 2: a check that could not read everything has
not checked it (docs/scheduler.md, "Live instances").
"""

from __future__ import annotations

import gzip
import json
import time
from typing import Any

from azure.core.exceptions import AzureError, HttpResponseError, ResourceNotFoundError

from operator_cli.session import CliError, ConnectionProblem, Session, locate, parse_time
from workflow_core.settings import (
    DOCUMENTED_SETTINGS,
    STORAGE_CONNECTION,
    SettingsError,
    StorageConnection,
    storage_connection,
)

PROGRESS_EVERY_SECONDS = 2.0


def hub_storage(env: dict[str, str]) -> StorageConnection:
    """The task hub's account as the app reaches it; the identity form needs no queue URI here."""
    try:
        return storage_connection(env)
    except SettingsError:
        table = env.get(f"{STORAGE_CONNECTION}__tableServiceUri", "").strip()
        if not table:
            raise
        return StorageConnection(
            table_service_uri=table,
            blob_service_uri=env.get(f"{STORAGE_CONNECTION}__blobServiceUri", "").strip() or None,
            client_id=env.get(f"{STORAGE_CONNECTION}__clientId", "").strip() or None,
        )


def _read_error(exc: BaseException, hub: str) -> str:
    if isinstance(exc, ResourceNotFoundError):
        return (
            f"task hub {hub!r} has no tables or blob in this account ({str(exc).splitlines()[0]}): "
            "check TASK_HUB_NAME (or --task-hub) and the storage settings"
        )
    if isinstance(exc, HttpResponseError) and exc.status_code == 403:
        return (
            "the storage account refused the read (403): the identity needs Storage Table Data Reader "
            "and Storage Blob Data Reader on the task hub's account"
        )
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"could not read task hub {hub!r}: {first}"


def live_results(
    s: Session,
    *,
    task_hub: str | None,
    workflow: str | None,
    created_since: str | None,
    limit: int | None,
    new_hub_ok: bool | None,
    table: dict[str, Any],
) -> tuple[list[Any], int]:
    """Replay the task hub's in-flight instances; (results, instances with no history yet)."""
    from devtools.live_history import LiveHistoryError, TaskHub, TaskHubReader, workflow_of
    from devtools.replay_check import ReplayFileError, check_recording
    from workflow_core.storage_clients import blob_container_client, table_client

    since = parse_time(created_since, "--created-since")
    env, source = locate(**s.options)
    hub = TaskHub(task_hub or env.get("TASK_HUB_NAME", "").strip() or DOCUMENTED_SETTINGS["TASK_HUB_NAME"])
    try:
        storage = hub_storage(env)
    except SettingsError as exc:
        raise ConnectionProblem(f"{exc} (settings from {source})") from None
    reader = TaskHubReader(
        hub,
        tables=lambda name: table_client(storage, name),
        blobs=lambda name: blob_container_client(storage, name),
    )
    results, not_started, last = [], 0, time.monotonic()
    print(f"replay-check: reading the in-flight instances of task hub {hub.name!r}", file=s.err)
    try:
        for instance in reader.in_flight(since):
            if limit is not None and len(results) >= limit:
                break
            if workflow and workflow_of(instance, None) not in (workflow, None):
                continue
            recording = reader.recording(instance)
            if recording is None:
                not_started += 1
                continue
            if workflow and workflow_of(instance, recording) != workflow:
                continue
            results.append(check_recording(recording, table))
            if time.monotonic() - last >= PROGRESS_EVERY_SECONDS:
                failed = sum(1 for r in results if not r.ok)
                print(f"replay-check: {len(results)} instance(s) replayed, {failed} diverge", file=s.err)
                last = time.monotonic()
    except ResourceNotFoundError as exc:
        if not (new_hub_ok and not results and not not_started and "TableNotFound" in str(exc)):
            raise CliError(_read_error(exc, hub.name)) from None
        print(f"replay-check: task hub {hub.name!r} has no tables yet: nothing in flight", file=s.err)
    except (AzureError, LiveHistoryError, ReplayFileError, OSError, ValueError, SettingsError) as exc:
        if isinstance(exc, gzip.BadGzipFile | json.JSONDecodeError | LiveHistoryError | ReplayFileError):
            raise CliError(f"task hub {hub.name!r}: a history row cannot be read: {exc}") from None
        raise CliError(_read_error(exc, hub.name)) from None
    finally:
        reader.close()
    return results, not_started
