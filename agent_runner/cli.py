"""``sas-agent``: serve agent pools with your own handlers, outside the Function App.

Options, settings and exit codes: docs/agents.md, "Run an agent outside the Function App". Only the
agents the ``--handlers`` modules register are served (the app's example agents, registered when the
worker's package is imported, are dropped unless a named module is theirs).
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
from collections.abc import Sequence

import click

from workflow_core.settings import SettingsError, load_settings

EXIT_CANNOT_START = 2
SERVICE_NAME = "sas-agent"  # OpenTelemetry service.name of the runner's logs, metrics and traces
log = logging.getLogger("sas.agent_runner")


class CannotStart(click.ClickException):
    exit_code = EXIT_CANNOT_START

    def show(self, file=None) -> None:
        click.echo(f"sas-agent: error: {self.format_message()}", err=True)


def load_handlers(modules: Sequence[str]) -> list[str]:
    """Import ``modules``; the agents they register are the only ones served (their names)."""
    from activities.worker.handlers.base import AGENT_HANDLERS

    shipped = dict(AGENT_HANDLERS)
    AGENT_HANDLERS.clear()
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise CannotStart(f"--handlers: cannot import {name!r}: {type(exc).__name__}: {exc}") from None
        # a module imported before (the app's own) registers nothing again: take its agents back
        AGENT_HANDLERS.update(
            {a: h for a, h in shipped.items() if h.__module__ == name or h.__module__.startswith(name + ".")}
        )
    if not AGENT_HANDLERS:
        raise CannotStart(f"--handlers: {', '.join(modules)} registered no agent (use @agent(name))")
    return sorted(AGENT_HANDLERS)


def pool_queues(pools: Sequence[str], work_queue: str) -> dict[str, str]:
    """Each pool by its queue; a pool ``workflows/pools.yaml`` does not declare is refused."""
    from workflow_core.workflows.loader import agent_pools
    from workflow_core.workflows.pools import pool_queue

    declared = agent_pools().names
    if unknown := [p for p in pools if p not in declared]:
        raise CannotStart(
            f"--pool {unknown[0]!r} is not declared in pools.yaml (pools: {', '.join(declared)})"
        )
    return {pool_queue(work_queue, p): p for p in pools}


def use_sources(definitions_dir: str | None, pools_file: str | None) -> None:
    """Read the definitions and pools from where the operator says: an installed runner's package
    directory (site-packages) holds only the shipped ``workflows/``."""
    from pathlib import Path

    from workflow_core.workflows import loader

    if definitions_dir:
        directory = Path(definitions_dir)
        if not directory.is_dir():
            raise CannotStart(f"--definitions-dir {definitions_dir!r} is not a directory")
        loader.DEFAULT_DIRECTORY = directory.resolve()
    if pools_file:
        path = Path(pools_file)
        if not path.is_file():
            raise CannotStart(f"--pools-file {pools_file!r} is not a file")
        loader.POOLS_FILE_OVERRIDE = path.resolve()
    loader.clear_workflow_cache()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--pool", "pools", multiple=True, required=True, help="an agent pool to serve (repeatable)")
@click.option("--handlers", required=True, help="module(s) registering your @agent handlers, comma-separated")
@click.option(
    "--concurrency", type=click.IntRange(min=1), default=4, show_default=True, help="deliveries at once"
)
@click.option(
    "--shutdown-grace",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="seconds in-flight work gets to finish after SIGTERM before it is released",
)
@click.option(
    "--lock-seconds",
    type=click.FloatRange(min=1),
    default=30.0,
    show_default=True,
    help="Storage Queues: visibility timeout of a received message, renewed while it runs; how soon "
    "a dead runner's messages come back (Service Bus: the queue's LockDuration)",
)
@click.option(
    "--pools-file",
    envvar="SAS_POOLS_FILE",
    help="the pools.yaml declaring the pools served [env SAS_POOLS_FILE; default: the one next to the "
    "definitions]",
)
@click.option(
    "--definitions-dir",
    envvar="SAS_DEFINITIONS_DIR",
    help="directory of the workflow definitions (and pools.yaml) [env SAS_DEFINITIONS_DIR; default: "
    "the package's workflows/]",
)
def main(
    pools: tuple[str, ...],
    handlers: str,
    concurrency: int,
    shutdown_grace: float,
    lock_seconds: float,
    pools_file: str | None = None,
    definitions_dir: str | None = None,
) -> None:
    """Run the app's agent worker for POOLs with your handlers; stop with SIGTERM or SIGINT."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("azure").setLevel(logging.WARNING)  # the SDK logs every request's headers at INFO
    from azure.core.exceptions import AzureError

    from workflow_core.telemetry_instruments import configure_telemetry
    from workflow_core.transport import TransportError

    try:
        use_sources(definitions_dir, pools_file)  # before the settings: HOSTED_POOLS is checked on them
        settings = load_settings()
        queues = pool_queues(pools, settings.work_queue)
        agents = load_handlers([m.strip() for m in handlers.split(",") if m.strip()])
        # logs, metrics and traces as the app's worker sends them, under service.name sas-agent
        os.environ.setdefault("OTEL_SERVICE_NAME", SERVICE_NAME)
        configure_telemetry(settings)  # the package loggers are children of "sas" (workflow_core)
        from agent_runner.runner import AgentRunner
        from workflow_core.runtime import get_services

        services = get_services()
        services.ledger  # noqa: B018 - reach storage now: a wrong setting fails here, in one line
        if settings.storage.connection_string:  # local/dev: create what infra would have provisioned
            services.transport.ensure_queues(*queues)
    except (SettingsError, ValueError, OSError, TransportError, AzureError) as exc:
        raise CannotStart(str(exc).splitlines()[0]) from None
    runner = AgentRunner(
        services, queues, concurrency=concurrency, lock_seconds=lock_seconds, shutdown_grace=shutdown_grace
    )
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: runner.stop())
    served, names = ", ".join(queues), ", ".join(agents)
    log.info("serving %s (%s) with agents %s, concurrency %d", served, settings.transport, names, concurrency)
    released = runner.run()
    log.info("stopped after %d delivery(ies); %d released unfinished", runner.delivered, released)


def run() -> None:
    """The ``sas-agent`` console script."""
    main(prog_name="sas-agent")


if __name__ == "__main__":
    run()
