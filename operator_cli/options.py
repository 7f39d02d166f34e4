"""Command-line options every ``sas`` command that prints shares (one definition, one help text)."""

from __future__ import annotations

import click

OUTPUT = click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people, json for scripts",
)
