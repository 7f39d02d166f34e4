"""``sas canary``: the recovery canary's verdicts (from the ledger), and ``sas canary run``, which starts
one run now through the app's API (``POST /api/canary/runs``; docs/operations.md, "Recovery canary")."""

from __future__ import annotations

import click

from operator_cli import render
from operator_cli.api_client import ApiClient, api_options
from operator_cli.session import OUTPUT, CliError, current_session


@click.group("canary", invoke_without_command=True)
@click.option("--limit", type=click.IntRange(1, 50), default=10, show_default=True, help="runs to show")
@OUTPUT
@click.pass_context
def canary_command(ctx: click.Context, limit: int, output: str) -> None:
    """The recovery canary's newest verdicts: each pool's state, then each run's outcome and cause."""
    if ctx.invoked_subcommand is not None:
        return
    from supervisor.canary import latest_verdicts

    s = current_session()
    summary = latest_verdicts(s.ledger, limit=limit, pools=_canary_pools())
    if output == "json":
        render.print_json(s.out, summary)
        return
    s.say(f"canary: {summary['state']}; last passed {summary['last_passed_at'] or 'never'}")
    for pool, state in summary["pools"].items():  # a failed pool is shown even when another passed
        s.say(f"  pool {pool}: {state['state']}; last passed {state['last_passed_at'] or 'never'}")
    rows = [
        [
            v["at"],
            v["scenario"],
            v["pool"],
            v["outcome"],
            "-" if v["recovery_seconds"] is None else f"{v['recovery_seconds']:.0f}s",
            f"{v['expected_seconds']:.0f}s",
            v["instance_id"],
            v["cause"],
        ]
        for v in summary["verdicts"]
    ]
    if rows:
        headers = ["judged", "scenario", "pool", "outcome", "recovery", "bound", "instance", "cause"]
        s.show(render.table("Recovery canary", headers, rows))


def _canary_pools() -> list[str]:
    """The pools the canary covers, from this machine's ``HOSTED_POOLS`` and ``workflows/pools.yaml``
    (unreadable settings: none named, so only the pools that have verdicts are listed)."""
    from workflow_core.canary import canary_pools
    from workflow_core.settings import SettingsError, hosted_pools
    from workflow_core.workflows.loader import agent_pools

    try:
        return canary_pools(agent_pools(), hosted_pools())
    except (SettingsError, ValueError):
        return []


@canary_command.command("run")
@click.option(
    "--scenario", required=True, help="lost-reply, retry, compensate, scheduler-lost, heartbeat-stops"
)
@click.option(
    "--pool", default=None, help="the pool to exercise (default: where pools.yaml routes the canary)"
)
@api_options
def run_command(scenario: str, pool: str | None, api: ApiClient) -> None:
    """Start one canary run now; prints its instance id."""
    from workflow_core.canary import SCENARIOS

    if scenario not in SCENARIOS:
        raise CliError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    payload = {"scenario": scenario} if pool is None else {"scenario": scenario, "pool": pool}
    body = api.call("POST", "/api/canary/runs", payload)
    body = body if isinstance(body, dict) else {}
    where = (
        f", {body['workflow']} in pool {body.get('pool')}" if isinstance(body.get("workflow"), str) else ""
    )
    current_session().say(
        f"started {body.get('instanceId')} ({scenario}{where}); `sas canary` shows it judged next period"
    )
