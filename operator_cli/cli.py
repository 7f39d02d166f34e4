"""``sas``, the operator CLI: look at workflow instances in the step ledger and steer stuck ones.

The reads are here, the other commands in the ``*_commands`` modules. The CLI reads and writes only
the step ledger: an action records *intent*, and the supervisor's watchdog, which holds the Durable
Functions client, enacts it on its next tick. The exit codes: the group's help below.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from typing import IO, Any

import click
from azure.core.exceptions import AzureError, ResourceNotFoundError, ServiceRequestError

from operator_cli import render
from operator_cli.action_commands import COMMANDS as ACTION_COMMANDS
from operator_cli.api_client import ApiError
from operator_cli.canary_commands import canary_command
from operator_cli.circuit_commands import circuit_command
from operator_cli.conformance_command import conformance_command
from operator_cli.doctor_command import doctor_command
from operator_cli.operations_commands import COMMANDS as OPERATIONS_COMMANDS
from operator_cli.session import (
    EXIT_USAGE,
    LIST_OUTPUT,
    OUTPUT,
    CliError,
    ConnectionProblem,
    Declined,
    Session,
    current_session,
    get_instance,
    parse_time,
)
from operator_cli.workflow_commands import lint_command, replay_check_command, versions_command
from workflow_core.ledger import LedgerError

EXIT_OK = 0
EXIT_DECLINED = 1
EXIT_STORAGE = 3


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--connection-string", help="storage connection string (default: app settings)")
@click.option("--ledger-table", help="ledger table (default: LEDGER_TABLE_NAME or StepLedger)")
@click.option(
    "--index-table", help="deadline-index table (default: DEADLINE_INDEX_TABLE_NAME or StepDeadlines)"
)
@click.pass_context
def cli(
    ctx: click.Context, connection_string: str | None, ledger_table: str | None, index_table: str | None
) -> None:
    """Inspect and steer workflow instances in the step ledger.

    Mutating commands record intent in the ledger; the supervisor's watchdog enacts it on its next
    tick. Exit codes: 0 done, 1 declined, 2 bad request (or lint found a problem), 3 storage error,
    4 a recorded history no longer replays (replay-check), 5 an agent fails a conformance check,
    6 a platform check failed (doctor), 7 the app's API could not be asked (doctor, canary run).
    """
    # Located on first use, so that `sas <command> --help` works without any settings.
    options = {
        "connection_string": connection_string,
        "ledger_table": ledger_table,
        "index_table": index_table,
    }
    ctx.ensure_object(Session).options = options


COMMANDS = (versions_command, replay_check_command, lint_command, conformance_command, doctor_command)
for _command in (*ACTION_COMMANDS, *OPERATIONS_COMMANDS, *COMMANDS, canary_command, circuit_command):
    cli.add_command(_command)


@cli.command("list")
@click.option("--status", help="instance status, e.g. Running, Failed, CompensationFailed")
@click.option("--workflow", help="workflow name")
@click.option("--version", "version", help="pinned workflow definition version")
@click.option("--business-key", "business_key_prefix", help="business key prefix")
@click.option("--started-from", help="started at or after (ISO 8601, UTC if no zone)")
@click.option("--started-to", help="started before (ISO 8601, UTC if no zone)")
@click.option("--needs-attention", is_flag=True, default=None, help="only instances needing an operator")
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True, help="page size")
@click.option("--continuation", help="token from the previous page")
@click.option("--all", "all_pages", is_flag=True, help="follow continuation tokens to the end")
@LIST_OUTPUT
def list_command(
    started_from: str | None,
    started_to: str | None,
    continuation: str | None,
    all_pages: bool,
    output: str,
    **filters: Any,  # the other options, as list_instances takes them
) -> None:
    """Workflow instances, newest first (the same filters as GET /api/instances)."""
    s = current_session()
    filters["started_from"] = parse_time(started_from, "--started-from")
    filters["started_to"] = parse_time(started_to, "--started-to")
    records, token = s.ledger.list_instances(**filters, continuation=continuation)
    while all_pages and token:
        page, token = s.ledger.list_instances(**filters, continuation=token)
        records.extend(page)
    if output == "json":
        render.print_json(s.out, {"instances": records, "continuation": token})
        return
    if not records:
        s.say("no instances match")
    else:
        shown = render.instances_table(records, wide=output == "wide")
        s.say(render.wide_text(shown)) if output == "wide" else s.show(shown)
    if token:
        s.say(f"\nmore: sas list ... --continuation {token}")


@cli.command()
@click.argument("instance")
@OUTPUT
def show(instance: str, output: str) -> None:
    """One instance: its record, its steps and its audit trail."""
    from supervisor import operator
    from workflow_core.limits.circuits import waiting_steps

    s = current_session()
    record = get_instance(s.ledger, instance)
    tl = operator.timeline(s.ledger, instance)
    waiting = waiting_steps(tl.steps, tl.audit)  # held back by their agent's limits
    if output == "json":
        render.print_json(
            s.out, {"instance": record, "steps": tl.steps, "audit": tl.audit, "waiting": waiting}
        )
        return
    s.show(render.instances_table([record]))
    for label, text in (("Needs attention", record.attention_reason), ("Last error", record.last_error)):
        if text:  # in full: the table's note is cut, and this is the cause an operator acts on
            s.say(f"\n{label}: {text}")
    s.say("")
    s.show(render.steps_table(tl.steps))
    for step_id, why in waiting.items():
        s.say(f"Waiting: {step_id}: {why}")
    s.say(f"\nAudit trail ({len(tl.audit)} entries, oldest first):")
    s.show(render.audit_table(tl.audit))


@cli.command()
@click.option(
    "--limit", type=click.IntRange(1, 1000), default=100, show_default=True, help="at most this many of each"
)
@OUTPUT
def stalled(limit: int, output: str) -> None:
    """Steps past their deadline, steps needing an operator, and instances flagged for one."""
    from supervisor import operator

    s = current_session()
    report = operator.list_stalled(s.ledger, limit=limit)
    if output == "json":
        data = {"now": report.now, "overdue": report.overdue, "attention": report.attention}
        render.print_json(s.out, {**data, "flagged_instances": report.flagged})
        return
    s.say(f"Overdue steps ({len(report.overdue)}), as of {render.when(report.now)} UTC:")
    s.show(render.overdue_table(report.now, report.overdue) if report.overdue else "  none")
    s.say(f"\nNeeding an operator ({len(report.attention)}):")
    s.show(render.attention_table(report.attention) if report.attention else "  none")
    if report.attention:
        s.say(
            "\n  retry <instance> <step> runs the compensator again; "
            "skip <instance> <step> accepts the step as it is."
        )
    s.say(f"\nInstances flagged for an operator ({len(report.flagged)}):")
    s.show(render.instances_table(report.flagged) if report.flagged else "  none")
    if report.flagged:
        s.say("\n  sas show <instance> gives the cause in full.")


@cli.command()
@click.argument("instance")
@OUTPUT
def timeline(instance: str, output: str) -> None:
    """An instance's steps and audit trail."""
    from supervisor import operator

    s = current_session()
    tl = operator.timeline(s.ledger, instance)
    if output == "json":
        render.print_json(s.out, {"instance_id": tl.instance_id, "steps": tl.steps, "audit": tl.audit})
        return
    s.say(f"Workflow instance {tl.instance_id} ({tl.steps[0].workflow_name})\n")
    s.show(render.steps_table(tl.steps))
    s.say(f"\nAudit trail ({len(tl.audit)} entries, oldest first):")
    s.show(render.audit_table(tl.audit))


DEFAULT_TABLES = {"LEDGER_TABLE_NAME": "StepLedger", "DEADLINE_INDEX_TABLE_NAME": "StepDeadlines"}


def _storage_message(exc: AzureError, session: Session) -> str:
    if isinstance(exc, ResourceNotFoundError) and "TableNotFound" in str(exc):
        env = session.env
        tables = "" if env is None else f" ({', '.join(env.get(k, d) for k, d in DEFAULT_TABLES.items())})"
        return (
            f"the ledger's tables{tables} do not exist in this storage account: the app has not run "
            "against it yet, or the settings point at another account"
        )
    if isinstance(exc, ServiceRequestError):
        return f"cannot reach the storage account: {str(exc).splitlines()[0]}"
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"the step ledger could not be read or written: {first}"


def main(
    argv: Sequence[str] | None = None,
    *,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    read: Callable[[str], str] | None = None,
) -> int:
    """Run one command; returns its exit code (the group's help lists them)."""
    from supervisor import operator

    out = stdout or sys.stdout
    err = stderr or sys.stderr
    prompt = functools.partial(click.prompt, default="", show_default=False, prompt_suffix="")
    session = Session(out, err, read or prompt)
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        # Without standalone mode click returns a command's ``Exit`` code instead of raising it.
        code = cli.main(args=args, prog_name="sas", standalone_mode=False, obj=session)
        return code if isinstance(code, int) else EXIT_OK
    except click.exceptions.Exit as exc:  # --help
        return exc.exit_code
    except click.UsageError as exc:
        if exc.ctx is not None:
            print(exc.ctx.get_usage(), file=err)
        print(f"error: {render.terminal_safe(exc.format_message(), lines=True)}", file=err)
        return EXIT_USAGE
    except Declined:
        print("aborted: nothing changed", file=out)
        return EXIT_DECLINED
    except (operator.OperatorError, CliError, ConnectionProblem, LedgerError, ApiError) as exc:
        print(f"error: {render.terminal_safe(exc, lines=True)}", file=err)
        return getattr(exc, "exit_code", EXIT_USAGE)
    except AzureError as exc:
        print(f"error: {render.terminal_safe(_storage_message(exc, session), lines=True)}", file=err)
        return EXIT_STORAGE
    finally:
        session.close()


def run() -> None:
    """The ``sas`` console script."""
    sys.exit(main())


if __name__ == "__main__":
    run()
