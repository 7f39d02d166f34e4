"""What every ``sas`` command shares: its session (streams, prompt, the ledger opened on first use),
the operator's name, the confirmation prompt, and the errors the CLI prints as one line.

The ledger's settings come from the options, then the environment, then the ``local.settings.json``
the app reads under ``func start`` (current folder, else the project's root): an operator's shell
usually has none of the app's settings. The ledger is opened *without* creating its tables: a read
against the wrong account must say "no such table", not look like an empty ledger.
"""

from __future__ import annotations

import getpass
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import click
from azure.data.tables import TableServiceClient

from operator_cli import render
from workflow_core.ledger import InstanceNotFound, InstanceRecord, StepLedger
from workflow_core.ledger.idempotency import IdempotencyKeys, KeyInProgress, KeyReused
from workflow_core.settings import STORAGE_CONNECTION, SettingsError, load_settings


def _output(*choices: str, help: str) -> Callable[[Any], Any]:
    return click.option(
        "-o", "--output", type=click.Choice(choices), default="table", show_default=True, help=help
    )


# The option of every command that prints: table for people, json for scripts.
OUTPUT = _output("table", "json", help="table for people, json for scripts")
WIDE = "table for people (long values cut with …), wide (every value whole), json for scripts"
LIST_OUTPUT = _output("table", "wide", "json", help=WIDE)
EXIT_USAGE = 2


class CliError(Exception):
    """A request the CLI refuses: printed as one ``error: ...`` line with exit code 2."""


class Declined(Exception):
    """The operator answered no at the confirmation prompt."""


LOCAL_SETTINGS = "local.settings.json"
PROJECT_ROOT = Path(__file__).resolve().parents[1]
RETRY_TOTAL = 1  # give up quickly on an unreachable endpoint instead of retrying for a minute


class ConnectionProblem(Exception):
    """The settings do not describe a usable storage account; the message says which and how to fix it."""


def _has_storage(env: Mapping[str, str]) -> bool:
    return any(
        (name == STORAGE_CONNECTION or name.startswith(f"{STORAGE_CONNECTION}__")) and value.strip()
        for name, value in env.items()
    )


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
    *, connection_string: str | None, ledger_table: str | None, index_table: str | None
) -> tuple[dict[str, str], str]:
    """The settings the CLI uses: options beat the environment, which beats ``local.settings.json``."""
    env = dict(os.environ)
    source = "the environment"
    if connection_string:
        source = "--connection-string"
    elif not _has_storage(env):
        found = (folder / LOCAL_SETTINGS for folder in (Path.cwd(), PROJECT_ROOT))
        path = next((candidate for candidate in found if candidate.is_file()), None)
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
    return env, source


def open_ledger(env: dict[str, str], source: str) -> StepLedger:
    """A ledger on the located account; never creates a table. Bad settings are a ConnectionProblem."""
    try:
        settings = load_settings(env)
    except SettingsError as exc:
        raise ConnectionProblem(f"{exc} (settings from {source})") from None
    storage = settings.ledger_connection
    if storage.connection_string:
        try:
            service = TableServiceClient.from_connection_string(
                storage.connection_string, retry_total=RETRY_TOTAL
            )
        except ValueError as exc:
            raise ConnectionProblem(
                f"the storage connection string from {source} is malformed ({exc}); expected "
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


@dataclass
class Session:
    """What every command needs: the streams, the prompt reader and (lazily) the ledger."""

    out: IO[str]
    err: IO[str]
    read: Callable[[str], str]
    options: dict[str, str | None] = field(default_factory=dict)
    env: dict[str, str] | None = None  # the settings the ledger was opened with
    _ledger: StepLedger | None = field(default=None, repr=False)

    @property
    def ledger(self) -> StepLedger:
        if self._ledger is None:
            self.env, source = locate(**self.options)
            self._ledger = open_ledger(self.env, source)
        return self._ledger

    @property
    def keys(self) -> IdempotencyKeys:
        return IdempotencyKeys(self.ledger)

    def close(self) -> None:
        if self._ledger is not None:
            self._ledger.close()

    def show(self, renderable: Any) -> None:
        render.console_for(self.out).print(renderable)

    def say(self, text: str) -> None:
        print(render.terminal_safe(text, lines=True), file=self.out)


def operator_user() -> str:
    """Who runs the CLI: the OS account (recorded in the audit trail as ``operator:<user>``)."""
    try:
        return getpass.getuser()
    except Exception:
        return "unknown"


def current_session() -> Session:
    return click.get_current_context().find_object(Session)


def confirm(s: Session, prompt: str, yes: bool) -> None:
    """Ask ``prompt``; anything but y/yes raises :class:`Declined` (``yes`` skips the question)."""
    if yes:
        return
    try:
        answer = s.read(render.terminal_safe(prompt, lines=True))
    except (EOFError, click.Abort):
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise Declined


def get_instance(ledger: StepLedger, instance_id: str) -> InstanceRecord:
    """The instance record; an unknown id is a :class:`CliError` sentence, never a traceback."""
    try:
        return ledger.get_instance(instance_id)
    except InstanceNotFound:
        raise CliError(f"no workflow instance {instance_id!r} in the ledger") from None


def once(
    s: Session, partition: str, key: str, request: str, actor: str, act: Callable[[], Any], status: int = 200
) -> tuple[Any, bool]:
    """``(act()'s answer, False)``, the answer recorded under the idempotency key; or, when ``key``
    names an earlier command, ``(its answer, True)`` without acting. A key used for another request,
    or still in progress, is a :class:`CliError`."""
    try:
        stored = s.keys.claim_or_replay(partition, key, request, actor)
    except KeyReused as exc:
        raise CliError(f"idempotency key {key!r} was used for another request ({exc.request})") from None
    except KeyInProgress:
        raise CliError(f"the command with idempotency key {key!r} is still being carried out") from None
    if stored is not None:
        return json.loads(stored["body"] or "{}"), True
    try:
        answer = act()
    except BaseException:
        s.keys.release(partition, key)  # nothing was done: a repeat may act
        raise
    s.keys.record_answer(partition, key, status, json.dumps(render.to_json(answer), default=str))
    return answer, False


def parse_time(value: str | None, option: str) -> datetime | None:
    """An option's ISO 8601 time (UTC when it names no zone); a malformed one is a :class:`CliError`."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"{option} {value!r} is not an ISO 8601 time, e.g. 2025-03-01T09:00:00Z") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
