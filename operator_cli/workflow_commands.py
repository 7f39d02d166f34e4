"""``sas versions``, ``sas replay-check`` and ``sas lint``: the workflows themselves, not their instances.

Only ``versions`` reads the ledger: ``replay-check`` reads the files and the installed orchestrator
code (exit 4 when a history no longer replays), ``lint`` the YAML files and the agents registered by
``activities.worker.handlers`` (exit 2, one line per problem).

``replay-check --live`` reads the task hub's running and pending orchestrations from the Azure Storage
provider's own tables and blobs (``devtools/live_history.py``) with the app's ``AzureWebJobsStorage``
settings. Any error reading the store ends the run with exit 2: a check that could not read
everything has not checked it (docs/scheduler.md, "Live instances").
"""

from __future__ import annotations

import gzip
import json
import time
from functools import partial
from pathlib import Path
from typing import Any

import click
from azure.core.exceptions import AzureError, HttpResponseError, ResourceNotFoundError

from operator_cli import render
from operator_cli.session import (
    OUTPUT,
    CliError,
    ConnectionProblem,
    Session,
    current_session,
    locate,
    parse_time,
)
from workflow_core.settings import (
    DOCUMENTED_SETTINGS,
    STORAGE_CONNECTION,
    SettingsError,
    StorageConnection,
    storage_connection,
)

EXIT_NONDETERMINISTIC = 4
EXIT_PROBLEMS = 2
PROGRESS_EVERY_SECONDS = 2.0


@click.command("versions")
@click.argument("workflow")
@OUTPUT
def versions_command(workflow: str, output: str) -> None:
    """A workflow's definition versions and how many instances run on each (0 in flight: drained)."""
    from workflow_core.workflows import UnknownWorkflow, WorkflowDefinitionError
    from workflow_core.workflows.store import DefinitionStore, workflow_versions

    s = current_session()
    store = DefinitionStore.of(s.ledger)
    try:
        summaries = workflow_versions(workflow, s.ledger, store)
    except UnknownWorkflow as exc:
        raise CliError(str(exc)) from None
    except WorkflowDefinitionError as exc:
        raise CliError(f"a definition in workflows/ is broken, so no version can be told: {exc}") from None
    if output == "json":
        render.print_json(s.out, {"workflow": workflow, "versions": [v.as_dict() for v in summaries]})
        return
    rows = [
        [
            v.version + (" (current)" if v.current else ""),
            v.label or "",
            render.when(v.stored_at) if v.stored_at else "not yet",
            str(v.instances),
            str(v.in_flight),
            ", ".join(f"{k} {n}" for k, n in sorted(v.by_status.items())),
        ]
        for v in summaries
    ]
    headers = ["version", "label", "stored", "instances", "in flight", "by status"]
    s.show(render.table(f"Versions of {workflow}", headers, rows))


@click.command("replay-check")
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--live", is_flag=True, help="replay the task hub's running and pending instances instead of files"
)
@click.option("--task-hub", help="with --live: the task hub (default: TASK_HUB_NAME)")
@click.option("--workflow", help="with --live: only instances of this workflow")
@click.option(
    "--created-since", help="with --live: only instances created at or after (ISO 8601, UTC if no zone)"
)
@click.option("--limit", type=click.IntRange(1), help="with --live: at most this many instances")
@click.option(
    "--new-hub-ok",
    is_flag=True,
    default=None,
    help="with --live: a task hub whose tables do not exist yet has nothing in flight (a first deployment)",
)
@OUTPUT
def replay_check_command(files: tuple[str, ...], live: bool, output: str, **filters: Any) -> None:
    """Replay recorded orchestration histories (files, or with --live the task hub's in-flight
    instances) on the installed orchestrator code; exit 4 if one no longer replays (a
    non-deterministic change: instances in flight would break), 2 if they cannot be read."""
    from devtools.replay_check import ReplayFileError, app_orchestrators, check_file

    s = current_session()
    if bool(files) == live:
        raise CliError("give replay files or --live, not both" if live else "give replay files, or --live")
    if not live and any(v is not None for v in filters.values()):
        raise CliError("--task-hub, --workflow, --created-since, --limit and --new-hub-ok go with --live")
    table = app_orchestrators()
    results, not_started = [], 0
    if live:
        results, not_started = live_results(s, table=table, **filters)
    for path in files:
        try:
            results.extend(check_file(path, table))
        except ReplayFileError as exc:
            raise CliError(str(exc)) from None
    failed = [r for r in results if not r.ok]
    noun = "instance(s)" if live else "recording(s)"
    if output == "json":
        report = [
            {"recording": r.recording.label, "instance": r.recording.instance_id, "ok": r.ok}
            | {"episodes": r.episodes, "actions": r.actions, "problems": r.problems}
            for r in results
        ]
        render.print_json(
            s.out, {"ok": not failed, "recordings": report, **({"not_started": not_started} if live else {})}
        )
    else:
        for r in results:
            verdict = "ok" if r.ok else "NON-DETERMINISTIC"
            s.say(f"{verdict:>17}  {r.recording.label} ({r.episodes} episode(s), {r.actions} action(s))")
            for problem in r.problems:
                s.say(f"{'':>19}{problem}")
        waiting = f"; {not_started} not started yet (no history to replay)" if not_started else ""
        s.say(f"\n{len(results) - len(failed)} of {len(results)} {noun} replay on the current code{waiting}")
        if failed:
            first = failed[0]
            s.say(f"first divergence: {first.recording.instance_id}: {first.problems[0].splitlines()[0]}")
    if failed:
        raise click.exceptions.Exit(EXIT_NONDETERMINISTIC)


@click.command("lint")
@click.option(
    "--directory",
    type=click.Path(file_okay=False, path_type=Path),
    help="folder of workflow definitions (default: workflows/ next to the installed code)",
)
def lint_command(directory: Path | None) -> None:
    """Check every workflow definition: it loads, its agents have handlers, its sample input is valid."""
    from activities.worker.handlers import AGENT_HANDLERS
    from workflow_core.workflows.loader import lint_directory, lint_summary

    s = current_session()  # its output streams; lint never touches the ledger
    definitions, problems = lint_directory(directory, agents=set(AGENT_HANDLERS))
    if problems:
        for problem in problems:
            s.say(str(problem))
        files = len({p.file for p in problems})
        print(f"{len(problems)} problem(s) in {files} file(s)", file=s.err)
        raise click.exceptions.Exit(EXIT_PROBLEMS)
    for line in lint_summary(definitions):
        s.say(line)


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
    reader = TaskHubReader(hub, partial(table_client, storage), partial(blob_container_client, storage))
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
