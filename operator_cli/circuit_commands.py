"""``sas circuit list|open|close``: the agents' circuit breakers and concurrency slots
(docs/agent-limits.md). ``open`` and ``close`` are operator actions like the others: a reason,
a confirmation, an idempotency key, audited on the circuit as ``operator:<user>``. An operator's open
holds until an operator closes it."""

from __future__ import annotations

from typing import Any

import click

from operator_cli import render
from operator_cli.action_commands import act_once, action_options
from operator_cli.render import short
from operator_cli.session import OUTPUT, CliError, confirm, current_session, operator_user


@click.group(name="circuit")
def circuit_command() -> None:
    """The agents' circuit breakers and concurrency slots (agents: in workflows/pools.yaml)."""


@circuit_command.command(name="list")
@OUTPUT
def list_circuits(output: str) -> None:
    """Every agent with declared limits: its circuit, failures, slots held and steps waiting."""
    from workflow_core.limits import CircuitStore

    s = current_session()
    views = CircuitStore(s.ledger).states()
    if output == "json":
        render.print_json(s.out, [v.to_json() for v in views])
        return
    if not views:
        s.say("no agent declares limits (agents: in workflows/pools.yaml)")
        return
    rows = [
        [
            r["agent"],
            r["state"] + (" (operator)" if r["manual"] else ""),
            (r["since"] or "")[:19],
            str(r["failures"]),
            "-" if r["max_in_flight"] is None else f"{r['in_flight']}/{r['max_in_flight']}",
            str(r["waiting"]),
            short(r["last_error"] or "", 50),
        ]
        for r in (v.to_json() for v in views)
    ]
    s.show(
        render.table(None, ["AGENT", "STATE", "SINCE", "FAILURES", "SLOTS", "WAITING", "LAST ERROR"], rows)
    )
    for v in views:
        if line := v.attention_text():
            s.say(line)


def _move_command(action: str) -> click.Command:
    what = {
        "open": "no new dispatch reaches the agent until an operator closes it",
        "close": "dispatches to the agent flow again; its failure count is reset",
    }[action]

    @circuit_command.command(name=action, help=f"{action.capitalize()} AGENT's circuit: {what}.")
    @click.argument("agent")
    @action_options
    def command(agent: str, reason: str, yes: bool, idempotency_key: str, output: str) -> None:
        from workflow_core.limits import CircuitStore
        from workflow_core.limits.rows import partition_of
        from workflow_core.workflows.loader import agent_pools

        s = current_session()
        limits = agent_pools().limits_of(agent)
        if limits is None or limits.circuit is None:
            declared = sorted(a for a, lim in agent_pools().agents.items() if lim.circuit is not None)
            raise CliError(
                f"agent {short(agent, 100)!r} declares no circuit "
                f"(agents with one: {', '.join(declared) or 'none'})"
            )
        actor = f"operator:{operator_user()}"
        confirm(
            s, f"{action} the circuit of {agent} as {actor}, reason {reason!r}: {what}. Proceed? [y/N] ", yes
        )

        def act() -> dict[str, Any]:
            circuits = CircuitStore(s.ledger)
            circuits.operator_move(
                agent, limits.circuit, open_it=action == "open", actor=actor, reason=reason
            )
            (view,) = circuits.states({agent: limits})
            return {"action": action, "actor": actor, "circuit": view.to_json()}

        def text(answer: dict[str, Any]) -> str:
            return f"circuit of {agent}: {answer['circuit']['state']} ({answer['actor']})"

        act_once(s, output, partition_of(agent), idempotency_key, f"{action} circuit {agent}", act, text)

    return command


open_command, close_command = _move_command("open"), _move_command("close")
