"""``sas lint``: check every workflow definition against the rules that matter before anything runs.

    sas lint                       # workflows/ of this checkout
    sas lint --directory path/to/workflows

Unlike the other commands it needs no storage: it reads the YAML files and the agents registered by
importing ``activities.worker.handlers`` (the same registry the app checks at start-up). The rules
live in ``workflow_core.workflows.lint``. Exit 0 when every file is clean, 2 with one line per
problem, each naming the file and the field.
"""

from __future__ import annotations

from pathlib import Path

import click

EXIT_PROBLEMS = 2


@click.command("lint")
@click.option(
    "--directory",
    type=click.Path(file_okay=False, path_type=Path),
    help="folder of workflow definitions (default: workflows/ next to the installed code)",
)
def lint_command(directory: Path | None) -> None:
    """Check every workflow definition: it loads, its agents have handlers, its sample input is valid."""
    from activities.worker.handlers import AGENT_HANDLERS
    from operator_cli.session import current_session
    from workflow_core.workflows.lint import lint_directory, lint_summary

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
