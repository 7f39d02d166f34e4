"""``sas conformance -- <agent command line>``: check that an agent speaks the message protocol.

An operator's question ("may this agent serve a pool?"), so it sits with the CLI; the work is the
conformance kit's (``devtools.conformance``; docs/agents.md, "Check an agent with the conformance kit").
"""

from __future__ import annotations

import json
import logging
import tempfile
import warnings
from pathlib import Path

import click

from operator_cli import render
from operator_cli.session import OUTPUT, CliError, current_session

EXIT_NONCONFORMING = 5
AGENT_LOG_LINES = 20


def _ports(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        ports = tuple(int(p) for p in value.split(","))
    except ValueError:
        ports = ()
    if len(ports) != 3:
        raise click.BadParameter("three port numbers: BLOB,QUEUE,TABLE")
    return ports


@click.command("conformance", context_settings={"ignore_unknown_options": True})
@click.option(
    "--azurite-ports",
    callback=_ports,
    metavar="BLOB,QUEUE,TABLE",
    help="use the Azurite already listening on these loopback ports (default: start one)",
)
@click.option(
    "--check",
    "checks",
    multiple=True,
    metavar="NAME",
    help="run only this check (repeatable): valid, duplicate, heartbeat, stale, malformed, crash, expiry",
)
@click.option(
    "--timeline",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=Path("conformance-timeline.txt"),
    show_default=True,
    help="file that gets each checked instance's audit trail",
)
@OUTPUT
@click.argument("agent_command", nargs=-1, required=True, type=click.UNPROCESSED)
def conformance_command(
    azurite_ports: tuple[int, ...] | None,
    agent_command: tuple[str, ...],
    checks: tuple[str, ...] = (),
    timeline: Path | None = None,
    output: str = "table",
) -> None:
    """Run AGENT_COMMAND (after --) as the agent conformance.echo against Azurite and check the
    message protocol; print a pass/fail table (each failure names the agent's fault in one line);
    exit 5 if a check fails."""
    from devtools.azurite import Azurite, AzuriteNotFound
    from devtools.conformance import run_checks

    s = current_session()
    blob, queue, table = azurite_ports or (0, 0, 0)
    azurite = Azurite(blob_port=blob, queue_port=queue, table_port=table) if azurite_ports else None
    logging.disable(logging.WARNING)  # the app's own warnings about the probes are expected
    warnings.simplefilter("ignore")
    try:
        with tempfile.TemporaryDirectory(prefix="sas-conformance-") as scratch:
            results, agent_log = run_checks(agent_command, Path(scratch), azurite, checks, timeline)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    except (AzuriteNotFound, FileNotFoundError, PermissionError) as exc:
        raise CliError(f"cannot run the check: {exc}") from None
    finally:
        logging.disable(logging.NOTSET)
    failed = [r for r in results if not r.passed]
    if output == "json":
        doc = {
            "passed": len(results) - len(failed),
            "checks": [{"name": r.name, "passed": r.passed, "detail": r.detail} for r in results],
            "timeline": str(timeline) if timeline else None,
        }
        s.say(json.dumps(doc, indent=2))
    else:
        rows = [[r.name, "pass" if r.passed else "FAIL", r.detail] for r in results]
        s.show(render.table(None, ["CHECK", "RESULT", "DETAIL"], rows))
        s.say(f"\n{len(results) - len(failed)} of {len(results)} checks passed")
        if failed:
            s.say(f"\nthe ledger's timeline of each check: {timeline}")
            s.say("\nthe agent's last output:\n" + "\n".join(agent_log.splitlines()[-AGENT_LOG_LINES:]))
    if failed:
        raise click.exceptions.Exit(EXIT_NONCONFORMING)
