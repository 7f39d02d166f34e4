"""``sas purge`` and ``sas bulk``: retention by hand, and one action over every matching instance.

``sas purge`` marks what it selects ``Purging``; the retention timer, which holds the Durable client,
deletes it. ``sas bulk`` records a bulk operation in the ledger, then carries it out
(:mod:`supervisor.maintenance.bulk`); an interrupted one goes on with ``sas bulk continue <id>`` or a
repeat with the ``--idempotency-key`` it printed (claimed as ``POST /api/operations`` claims it), which
carries the first operation on instead of recording a second.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from operator_cli import render
from operator_cli.action_commands import KEY_CHARS, check_key
from operator_cli.session import (
    OUTPUT,
    CliError,
    Session,
    confirm,
    current_session,
    once,
    operator_user,
)
from supervisor import operator
from supervisor.maintenance import bulk
from supervisor.maintenance.retention import Retention
from workflow_core import clock

_AGE = re.compile(r"^(\d{1,5})d$")
SAMPLE = 10


def _days(_ctx: click.Context, _param: click.Parameter, value: str) -> int:
    match = _AGE.fullmatch(value.strip())
    if not match or int(match.group(1)) < 1:
        raise click.BadParameter("an age in whole days, e.g. 30d")
    return int(match.group(1))


@click.command("purge")
@click.option("--older-than", required=True, callback=_days, help="finished at least this long ago, e.g. 30d")
@click.option("--workflow", help="only this workflow")
@click.option("--dry-run", is_flag=True, help="print what would be purged and change nothing")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True, help="at most")
@click.option("--yes", "-y", is_flag=True, help="do not ask for confirmation")
@OUTPUT
def purge_command(
    older_than: int, workflow: str | None, dry_run: bool, limit: int, yes: bool, output: str
) -> None:
    """Mark finished instances older than --older-than Purging (the retention timer deletes them).

    Only Succeeded, Compensated and Cancelled instances not flagged for an operator are taken.
    """
    s = current_session()
    retention = Retention(s.ledger, batch_size=limit, actor=f"operator:{operator_user()}")
    run = functools.partial(retention.run, clock.utcnow(), workflow=workflow, older_than_days=older_than)
    preview = asyncio.run(run(dry_run=True))
    if dry_run or not preview.would_purge:
        body = {"dryRun": True, "wouldPurge": preview.would_purge, "cutoff": preview.cutoff.isoformat()}
        _print(s, output, body)
        return
    listed = _listed(preview.would_purge)
    confirm(s, f"Mark {len(preview.would_purge)} instance(s) Purging{listed}? [y/N] ", yes)
    _print(s, output, asyncio.run(run(finish=False)).as_dict())


def _print(s: Session, output: str, body: dict) -> None:
    if output == "json":
        s.say(json.dumps(body, indent=2, default=str))
        return
    for key, value in body.items():
        s.say(f"{key}: {len(value)}{_listed(value)}" if isinstance(value, list) else f"{key}: {value}")


def _listed(values: list) -> str:
    more = " ..." if len(values) > SAMPLE else ""
    return f" ({', '.join(map(str, values[:SAMPLE]))}{more})" if values else ""


def _filter(**values) -> bulk.BulkFilter:
    try:
        return bulk.BulkFilter.model_validate({k: v for k, v in values.items() if v is not None})
    except ValueError as exc:
        raise CliError(f"bad filter: {exc}") from None


def _carry(s: Session, store: bulk.BulkStore, op: bulk.BulkOperation, rate: float, output: str) -> None:
    if output != "json":
        with Progress(
            TextColumn(f"bulk {op.action} {op.bulk_id}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=render.console_for(s.out),
        ) as progress:
            task = progress.add_task("bulk", total=None)
            while not op.done:
                asyncio.run(bulk.run(store, op, runner="sas", rate_per_second=rate, max_instances=bulk.PAGE))
                body = store.progress(op)
                progress.update(task, completed=body["processed"], total=body["matched"])
    else:
        asyncio.run(bulk.run(store, op, runner="sas", rate_per_second=rate))
    _show(s, store.progress(op), output)


def _show(s: Session, body: dict, output: str) -> None:
    if output == "json":
        s.say(json.dumps(body, indent=2))
        return
    state = "dry run" if body.get("dryRun") else "done" if body["done"] else "in progress"
    table = Table("result", "count", "sample", title=f"bulk {body['action']} {body.get('id', '')} ({state})")
    for key in ("acted", "wouldAct", "wouldSkip", "skipped", "noLongerMatches", "failed"):
        if (rows := body.get(key)) is not None:
            sample = [r if isinstance(r, str) else f"{r['instanceId']}: {r['why']}" for r in rows[:3]]
            result = re.sub("[A-Z]", lambda m: " " + m[0].lower(), key)  # noLongerMatches: no longer matches
            table.add_row(result, str(len(rows)), "\n".join(sample))
    s.show(table)


@click.group("bulk")
def bulk_group() -> None:
    """One action over every instance matching a filter (recorded first, resumable, audited)."""


def _action_command(action: str) -> click.Command:
    @click.option("--workflow")
    @click.option("--version", "version")
    @click.option("--status", help="instance status, e.g. Running, Failed")
    @click.option("--needs-attention", is_flag=True, default=None)
    @click.option("--error-contains", help="text in its or a step's last error")
    @click.option("--started-after", help="ISO 8601 with a zone")
    @click.option("--started-before", help="ISO 8601 with a zone")
    @click.option("--business-key", "business_key_prefix", help="business key prefix")
    @click.option("--reason", required=True, help="why (recorded in every audit row)")
    @click.option("--dry-run", is_flag=True, help="list what would be acted on; change nothing")
    @click.option(
        "--rate", type=click.FloatRange(0.1, 1000), default=20, show_default=True, help="per second"
    )
    @click.option("--yes", "-y", is_flag=True)
    @click.option(
        "--idempotency-key",
        callback=check_key,
        help=f"repeat a cut-off command with the key it printed: the same operation goes on, none is "
        f"recorded twice ({KEY_CHARS}; default: a new key)",
    )
    @OUTPUT
    def command(
        reason: str, dry_run: bool, rate: float, yes: bool, idempotency_key: str, output: str, **filters
    ) -> None:
        s = current_session()
        flt = _filter(**filters)  # an invalid filter is refused before anything is read or written
        operator.required_reason(reason)  # an OperatorError: one error line, exit 2
        if dry_run:  # the act's own eligibility check; writes nothing, takes no key
            _show(s, bulk.preview(s.ledger, action, flt), output)
            return
        store = bulk.BulkStore(s.ledger)
        actor = operator.actor_for(operator_user())
        created: list[bulk.BulkOperation] = []

        def create() -> dict[str, str]:
            shown = bulk.preview(s.ledger, action, flt)
            found, skip = shown["wouldAct"], shown["wouldSkip"]
            skips = f", skip {len(skip)} ({skip[0]['why']}...)" if skip else ""
            confirm(s, f"{action} {len(found)} instance(s) (e.g. {', '.join(found[:3])}){skips}? [y/N] ", yes)
            # the operation acts on what was shown, never on what starts matching later
            matched = found + [x["instanceId"] for x in skip]
            created.append(store.create(action, flt, reason=reason, actor=actor, matched=matched))
            # recorded before it is carried out: a repeat after a crash carries this one on
            return {"id": created[0].bulk_id, "action": action}

        request = bulk.request_of(action, flt, reason)
        key = idempotency_key
        answer, repeated = once(s, bulk.KEYS_PARTITION, key, request, actor, create, status=202)
        if not repeated:
            op = created[0]
            if output != "json":
                s.err.write(
                    f"bulk {op.bulk_id}: if this command is cut off, repeat it with "
                    f"--idempotency-key {key} to carry the same operation on\n"
                )
        else:  # the first command's, from sas bulk or POST /api/operations
            op = store.get(str(answer.get("id", ""))[:64]) if isinstance(answer, dict) else None
            if op is None:
                raise CliError(f"idempotency key {key!r} was answered without an operation: use a new key")
            s.err.write(f"bulk {op.bulk_id}: already started with idempotency key {key!r}; carrying it on\n")
        _carry(s, store, op, rate, output)

    command.__doc__ = f"{action} every matching instance (see `sas bulk --help`)."
    return click.command(action)(command)


for _action in bulk.BULK_ACTIONS:
    bulk_group.add_command(_action_command(_action))


@bulk_group.command("show")
@click.argument("operation")
@OUTPUT
def show_command(operation: str, output: str) -> None:
    """A bulk operation's progress: acted, skipped (with why), failed."""
    s = current_session()
    store, op = _operation(s, operation)
    _show(s, store.progress(op), output)


def _operation(s: Session, operation: str) -> tuple[bulk.BulkStore, bulk.BulkOperation]:
    store = bulk.BulkStore(s.ledger)
    op = store.get(operation) if len(operation) <= 64 else None
    if op is None:
        raise CliError(f"no bulk operation {operation[:64]!r}")
    return store, op


@bulk_group.command("continue")
@click.argument("operation")
@click.option("--rate", type=click.FloatRange(0.1, 1000), default=20, show_default=True)
@OUTPUT
def continue_command(operation: str, rate: float, output: str) -> None:
    """Carry an interrupted bulk operation on from its cursor (never acting twice)."""
    s = current_session()
    store, op = _operation(s, operation)
    _carry(s, store, op, rate, output)


COMMANDS = (purge_command, bulk_group)
