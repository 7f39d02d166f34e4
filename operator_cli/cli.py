"""Operator CLI: see stalled steps and an instance's timeline; retry, skip or compensate a step.

    python -m operator_cli stalled
    python -m operator_cli timeline <instance>
    python -m operator_cli retry <instance> <step> --reason "downstream fixed"
    python -m operator_cli skip <instance> <step> --reason "done by hand" --yes
    python -m operator_cli compensate <instance> <step> --reason "customer cancelled"

The CLI reads and writes only the step ledger (Table Storage). Mutating commands record *intent*:
the step moves (audited as ``operator:<user>`` with the reason) and, where something must happen
next, becomes due now; the supervisor's watchdog, which holds the Durable Functions client, enacts
it on its next tick (raises the failed result, starts the compensation orchestration...).

Connection: ``--connection-string``, else the app's own settings (``AzureWebJobsStorage`` or its
identity-based ``__tableServiceUri`` form, ``LEDGER_TABLE_NAME``, ``DEADLINE_INDEX_TABLE_NAME``).
Exit codes: 0 done, 1 declined at the confirmation prompt, 2 bad request (unknown instance or step,
illegal move, bad arguments or settings), 3 storage unreachable or refusing.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import IO, Any

from azure.core.exceptions import AzureError

from workflow_core import clock
from workflow_core.ledger import StepLedger, StepRecord
from workflow_core.settings import SettingsError

EXIT_OK = 0
EXIT_DECLINED = 1
EXIT_USAGE = 2
EXIT_STORAGE = 3

# command -> function of supervisor.operator
_MUTATIONS = {
    "retry": "retry_step",
    "skip": "skip_step",
    "compensate": "request_compensation",
}


class CliError(Exception):
    """A request the CLI refuses: printed as ``error: ...`` with exit code 2."""


def _default_user() -> str:
    for name in ("SAS_OPERATOR", "USER", "USERNAME"):
        if os.environ.get(name):
            return os.environ[name]
    try:
        return getpass.getuser()
    except Exception:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m operator_cli",
        description="Inspect and steer workflow steps in the step ledger. Mutating commands record "
        "intent in the ledger; the supervisor's watchdog enacts it on its next tick.",
    )
    parser.add_argument(
        "--connection-string",
        help="storage connection string (default: the app settings, e.g. AzureWebJobsStorage)",
    )
    parser.add_argument("--ledger-table", help="ledger table (default: LEDGER_TABLE_NAME or StepLedger)")
    parser.add_argument(
        "--index-table", help="deadline-index table (default: DEADLINE_INDEX_TABLE_NAME or StepDeadlines)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")

    def json_option(cmd: argparse.ArgumentParser) -> None:  # also accepted after the command
        cmd.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    stalled = sub.add_parser("stalled", help="steps past their deadline, and steps needing an operator")
    stalled.add_argument("--limit", type=int, default=100, help="at most this many of each (default 100)")
    json_option(stalled)

    tl = sub.add_parser("timeline", help="an instance's steps and audit trail")
    tl.add_argument("instance")
    json_option(tl)

    helps = {
        "retry": "Failed/TimedOut -> Retrying, CompensationFailed -> Compensating (due now)",
        "skip": "mark the step Skipped: it needs no (more) work",
        "compensate": "Succeeded/Failed/TimedOut -> Compensating (the watchdog starts the compensation)",
    }
    for name, text in helps.items():
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("instance")
        cmd.add_argument("step")
        cmd.add_argument("--reason", required=True, help="why (recorded in the audit trail)")
        cmd.add_argument("--user", default=None, help="operator name for the audit trail (default: $USER)")
        cmd.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
        json_option(cmd)
    return parser


def _ledger_from_args(args: argparse.Namespace) -> StepLedger:
    from workflow_core.runtime import Services
    from workflow_core.settings import load_settings

    env = dict(os.environ)
    if args.connection_string:
        env["AzureWebJobsStorage"] = args.connection_string
    if args.ledger_table:
        env["LEDGER_TABLE_NAME"] = args.ledger_table
    if args.index_table:
        env["DEADLINE_INDEX_TABLE_NAME"] = args.index_table
    # The CLI needs only storage: do not require the agents' Service Bus settings.
    env["AGENT_TRANSPORT"] = "storage-queue"
    try:
        settings = load_settings(env)
    except SettingsError as exc:
        raise CliError(f"{exc} (or pass --connection-string)") from None
    return Services(settings).ledger


# ---- formatting -----------------------------------------------------------------------------------


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _ago(now: datetime, value: datetime | None) -> str:
    if value is None:
        return "-"
    seconds = int((now - value).total_seconds())
    if seconds < 0:
        return f"in {-seconds}s"
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def _table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines)


def _short(text: str | None, limit: int = 60) -> str:
    if not text:
        return ""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _step_json(record: StepRecord) -> dict[str, Any]:
    return record.model_dump(mode="json", exclude={"etag", "index_key"})


def _print_stalled(report: Any, out: IO[str], as_json: bool) -> None:
    if as_json:
        data = {
            "now": report.now.isoformat(),
            "overdue": [_step_json(r) for r in report.overdue],
            "attention": [_step_json(r) for r in report.attention],
        }
        print(json.dumps(data, indent=2), file=out)
        return
    now = report.now
    print(f"Overdue steps ({len(report.overdue)}), as of {_when(now)} UTC:", file=out)
    if report.overdue:
        rows = [
            [
                r.instance_id,
                r.step_id,
                r.status.value,
                str(r.attempt),
                _when(r.deadline),
                _ago(now, r.deadline),
                r.owner or "-",
                _short(r.last_error, 40),
            ]
            for r in report.overdue
        ]
        headers = ["INSTANCE", "STEP", "STATUS", "ATTEMPT", "DEADLINE", "LATE", "OWNER", "LAST ERROR"]
        print(_table(rows, headers), file=out)
    else:
        print("  none", file=out)
    print(f"\nNeeding an operator ({len(report.attention)}):", file=out)
    if report.attention:
        rows = [
            [r.instance_id, r.step_id, r.status.value, str(r.compensation_attempt), _short(r.last_error, 60)]
            for r in report.attention
        ]
        print(_table(rows, ["INSTANCE", "STEP", "STATUS", "COMP. ATTEMPT", "LAST ERROR"]), file=out)
        print(
            "\n  retry <instance> <step> runs the compensator again; "
            "skip <instance> <step> accepts the step as it is.",
            file=out,
        )
    else:
        print("  none", file=out)


def _print_timeline(tl: Any, out: IO[str], as_json: bool) -> None:
    if as_json:
        data = {
            "instance_id": tl.instance_id,
            "steps": [_step_json(r) for r in tl.steps],
            "audit": [a.model_dump(mode="json") for a in tl.audit],
        }
        print(json.dumps(data, indent=2), file=out)
        return
    print(f"Workflow instance {tl.instance_id} ({tl.steps[0].workflow_name})\n", file=out)
    rows = [
        [
            str(r.sequence),
            r.step_id,
            r.status.value,
            str(r.attempt),
            _when(r.deadline),
            r.owner or "-",
            _short(r.last_error, 50),
        ]
        for r in tl.steps
    ]
    print(_table(rows, ["#", "STEP", "STATUS", "ATTEMPT", "DEADLINE", "OWNER", "LAST ERROR"]), file=out)
    print(f"\nAudit trail ({len(tl.audit)} entries, oldest first):", file=out)
    rows = []
    for a in tl.audit:
        move = (
            f"{a.from_status or '-'} -> {a.to_status}"
            if a.from_status != a.to_status
            else (a.to_status or "")
        )
        rows.append(
            [
                a.at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
                a.step_id,
                a.actor,
                a.action,
                move,
                "" if a.attempt is None else str(a.attempt),
                _short(a.reason, 100),
            ]
        )
    print(_table(rows, ["AT (UTC)", "STEP", "ACTOR", "ACTION", "STATUS", "ATTEMPT", "REASON"]), file=out)


_NEXT = {
    "retry": "the watchdog acts on it at its next tick",
    "skip": "it needs no more work and leaves the watchdog's worklist",
    "compensate": "the watchdog starts the compensation orchestration at its next tick",
}


def _confirm(prompt: str, read: Callable[[str], str]) -> bool:
    try:
        answer = read(prompt)
    except EOFError:
        answer = ""
    return answer.strip().lower() in ("y", "yes")


def _mutate(args: argparse.Namespace, ledger: StepLedger, out: IO[str], read: Callable[[str], str]) -> int:
    from supervisor import operator

    record, target = operator.preview(ledger, args.command, args.instance, args.step)
    user = args.user or _default_user()
    if not args.yes:
        prompt = (
            f"{args.command}: step {record.step_id} of {record.instance_id} "
            f"({record.status.value} -> {target.value}), as operator:{user}, reason {args.reason!r}. "
            "Proceed? [y/N] "
        )
        if not _confirm(prompt, read):
            print("aborted: nothing changed", file=out)
            return EXIT_DECLINED

    def unchanged(current: StepRecord) -> None:
        if (current.status, current.attempt) != (record.status, record.attempt):
            raise operator.OperatorError(
                f"step {record.step_id!r} changed since it was shown ({record.status.value}, attempt "
                f"{record.attempt} -> {current.status.value}, attempt {current.attempt}); nothing changed, "
                "look at the timeline and try again"
            )

    action = getattr(operator, _MUTATIONS[args.command])
    updated = action(
        ledger, args.instance, args.step, user=user, reason=args.reason, now=clock.utcnow(), expect=unchanged
    )
    if args.json:
        print(json.dumps(_step_json(updated), indent=2), file=out)
    else:
        print(
            f"{args.command}: step {updated.step_id} of {updated.instance_id} is now {updated.status.value} "
            f"(was {record.status.value}); {_NEXT[args.command]}.",
            file=out,
        )
    return EXIT_OK


def main(
    argv: Sequence[str] | None = None,
    *,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    read: Callable[[str], str] = input,
) -> int:
    """Run one command; returns the exit code (0 ok, 1 declined, 2 bad request, 3 storage error)."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse printed the usage error
        return int(exc.code or 0)

    from supervisor import operator

    ledger: StepLedger | None = None
    try:
        ledger = _ledger_from_args(args)
        if args.command == "stalled":
            if args.limit < 1:
                raise CliError("--limit must be at least 1")
            _print_stalled(operator.list_stalled(ledger, limit=args.limit), out, args.json)
            return EXIT_OK
        if args.command == "timeline":
            _print_timeline(operator.timeline(ledger, args.instance), out, args.json)
            return EXIT_OK
        return _mutate(args, ledger, out, read)
    except operator.IllegalMove as exc:
        print(f"error: {exc}", file=err)
        print(f"allowed moves from {exc.status.value}:", file=err)
        for move in exc.allowed_moves or ["none (terminal status)"]:
            print(f"  - {move}", file=err)
        return EXIT_USAGE
    except (operator.OperatorError, CliError) as exc:
        print(f"error: {exc}", file=err)
        return EXIT_USAGE
    except AzureError as exc:
        print(f"error: the step ledger could not be read or written: {exc}", file=err)
        return EXIT_STORAGE
    finally:
        if ledger is not None:
            ledger.close()


if __name__ == "__main__":
    sys.exit(main())
