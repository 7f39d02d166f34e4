"""What every ``sas`` command shares: its session (streams, prompt, the ledger opened on first use),
the operator's name, the confirmation prompt, and the errors the CLI prints as one line.

Kept apart from the command group so that command modules (reads, actions, versions) import it
without importing each other.
"""

from __future__ import annotations

import getpass
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

import click

from operator_cli import render
from operator_cli.connection import LedgerLocation, locate, open_ledger
from workflow_core.ledger import InstanceNotFound, InstanceRecord, StepLedger

# The option of every command that prints: table for people, json for scripts.
OUTPUT = click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people, json for scripts",
)
EXIT_OK = 0
EXIT_DECLINED = 1
EXIT_USAGE = 2
EXIT_STORAGE = 3


class CliError(Exception):
    """A request the CLI refuses: printed as one ``error: ...`` line with exit code 2."""


class Declined(Exception):
    """The operator answered no at the confirmation prompt."""


@dataclass
class Session:
    """What every command needs: the streams, the prompt reader and (lazily) the ledger."""

    out: IO[str]
    err: IO[str]
    read: Callable[[str], str]
    options: dict[str, str | None] = field(default_factory=dict)
    location: LedgerLocation | None = None
    _ledger: StepLedger | None = field(default=None, repr=False)

    @property
    def ledger(self) -> StepLedger:
        if self._ledger is None:
            self.location = locate(**self.options)
            self._ledger = open_ledger(self.location)
        return self._ledger

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
    """The session of the command being run."""
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
