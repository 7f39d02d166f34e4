"""``sas``'s actions (retry, skip, compensate a step; resume, stop, cancel an instance): steer one
step or one instance, each confirmed, audited and done once (docs/supervisor.md, "Operator intents
and the CLI").

The move is checked against what the confirmation showed, so a command that raced another change
refuses instead of acting on something the operator did not see; an idempotency key claimed in the
ledger first makes a repeated command answer as the first did.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import click

from operator_cli import render
from operator_cli.session import (
    OUTPUT,
    Session,
    confirm,
    current_session,
    get_instance,
    once,
    operator_user,
)
from workflow_core.ledger.idempotency import KEY_PATTERN

STEP_INTENTS = {
    "retry": ("retry_step", "Failed/TimedOut -> Retrying, CompensationFailed -> Compensating (due now)"),
    "skip": ("skip_step", "mark the step Skipped: it needs no (more) work"),
    "compensate": (
        "request_compensation",
        "Succeeded/Failed/TimedOut -> Compensating (the watchdog starts the compensation)",
    ),
}
NEXT = {
    "retry": "the watchdog acts on it at its next tick",
    "skip": "it needs no more work and leaves the watchdog's worklist",
    "compensate": "the watchdog starts the compensation orchestration at its next tick",
}
KEY_CHARS = "1-100 of A-Z a-z 0-9 . _ : -"


def check_key(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str:
    if value is None:
        return uuid.uuid4().hex
    if not KEY_PATTERN.fullmatch(value):
        raise click.BadParameter(f"an idempotency key is {KEY_CHARS}")
    return value


def action_options(function: Callable) -> Callable:
    """The options every action takes."""
    for option in reversed(
        (
            click.option("--reason", required=True, help="why (recorded in the audit trail)"),
            click.option("--yes", "-y", is_flag=True, help="do not ask for confirmation"),
            click.option(
                "--idempotency-key",
                callback=check_key,
                help="repeat a command with the same key to learn its outcome without acting twice "
                "(default: a new key)",
            ),
            OUTPUT,
        )
    ):
        function = option(function)
    return function


def act_once(
    s: Session,
    output: str,
    instance_id: str,
    key: str,
    request: str,
    act: Callable[[], Any],
    text: Callable[[Any], str],
) -> None:
    """``act()`` once per key, and print its answer (``text(answer)`` for people); a repeat prints the
    first answer instead of acting."""
    answer, repeated = once(s, instance_id, key, request, f"operator:{operator_user()}", act)
    if output == "json":
        render.print_json(s.out, answer)
    elif repeated:
        s.say(f"already done by the first command with this idempotency key: {json.dumps(answer)}")
    else:
        s.say(text(answer))


def _step_command(name: str) -> click.Command:
    function_name, help_text = STEP_INTENTS[name]

    @click.command(name=name, help=help_text)
    @click.argument("instance")
    @click.argument("step")
    @action_options
    def command(instance: str, step: str, reason: str, yes: bool, idempotency_key: str, output: str) -> None:
        from supervisor import operator

        s = current_session()
        record, target = operator.preview(s.ledger, name, instance, step)
        user = operator_user()
        confirm(
            s,
            f"{name}: step {record.step_id} of {record.instance_id} ({record.status.value} -> "
            f"{target.value}), as operator:{user}, reason {reason!r}. Proceed? [y/N] ",
            yes,
        )

        def unchanged(current: Any) -> None:
            if (current.status, current.attempt) != (record.status, record.attempt):
                raise operator.OperatorError(
                    f"step {record.step_id!r} changed since it was shown ({record.status.value}, attempt "
                    f"{record.attempt} -> {current.status.value}, attempt {current.attempt}); nothing "
                    "changed, look at the timeline and try again"
                )

        def act() -> Any:
            return getattr(operator, function_name)(
                s.ledger, instance, step, user=user, reason=reason, expect=unchanged
            )

        def text(updated: Any) -> str:
            now, was = updated.status.value, record.status.value
            return f"{name}: step {step} of {instance} is now {now} (was {was}); {NEXT[name]}."

        act_once(s, output, instance, idempotency_key, f"sas {name} {instance}/{step}", act, text)

    return command


# name -> (what it does, in the prompt and the help (None: resume, which says only its name), what is
# printed after it)
INSTANCE_ACTIONS: dict[str, tuple[str | None, str]] = {
    "resume": (None, "resume: instance {instance} recorded; the watchdog resumes it at its next tick."),
    "stop": (
        "its done steps stay as they are, no later step runs, and nothing resumes or compensates it",
        "stop: instance {instance} is Stopped (was {status}); no later step runs, its done steps stay; "
        "`sas cancel {instance}` undoes them.",
    ),
    "cancel": (
        "it stops, then its done steps are compensated, the last done first",
        "cancel: instance {instance} is Compensating (was {status}); the watchdog undoes its done steps.",
    ),
}
RESUME_HELP = "Ask the watchdog to resume an instance whose scheduler stopped, from the ledger's state."


def _instance_command(name: str) -> click.Command:
    what, done = INSTANCE_ACTIONS[name]
    help_text = f"{name.capitalize()} an instance: {what}." if what else RESUME_HELP

    @click.command(name=name, help=help_text)
    @click.argument("instance")
    @action_options
    def command(instance: str, reason: str, yes: bool, idempotency_key: str, output: str) -> None:
        from supervisor import operator

        s = current_session()
        record = get_instance(s.ledger, instance)
        user = operator_user()
        status = record.status.value
        does = f": {what};" if what else ","
        confirm(
            s,
            f"{name}: instance {instance} ({status}){does} as operator:{user}, reason {reason!r}. "
            "Proceed? [y/N] ",
            yes,
        )
        # a stop or cancel is refused when the instance moved since the prompt showed its status
        expected = None if name == "resume" else status

        def act() -> Any:
            return operator.move_instance(
                s.ledger, instance, name, reason=reason, user=user, expected_status=expected
            )

        text = done.format(instance=instance, status=status)
        act_once(s, output, instance, idempotency_key, f"sas {name} {instance}", act, lambda _: text)

    return command


COMMANDS = [
    *(_step_command(name) for name in STEP_INTENTS),
    *(_instance_command(name) for name in INSTANCE_ACTIONS),
]
