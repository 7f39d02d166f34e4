"""Which pool a canary run exercises, and where dispatch sends its agents' messages.

Routing stays one explicit rule (``workflows/pools.yaml``: an agent's pool carries its work) with one
named exception: a message of the ``sas-canary`` workflow for ``canary.probe`` or ``canary.undo``, or
of ``sas-canary-echo`` for ``conformance.echo`` (:data:`STEERED`), goes to the pool its step input
names (``pool``, copied from the run's input by the definition), when that pool is declared. No
other workflow or agent can steer its messages, and an undeclared name falls back to the ordinary
rule. Why not pool-qualified agent names: the step's agent comes from the pinned
definition, so one definition per pool would be needed; the input carries the pool instead, and the
ledger keeps it (the run's input and every step's input).

The pools a canary tick covers (:func:`canary_pools`): every hosted pool (``HOSTED_POOLS``), every pool
that opts in (``canary: true`` in ``workflows/pools.yaml``), and the pool that lists ``canary.probe``.
Which definition exercises a pool (:func:`canary_workflow_of`): ``sas-canary-echo`` for a message-only
pool that opts in with ``canary: true`` (its agents implement the conformance echo contract, not the
app's Python handlers), ``sas-canary`` for every other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from workflow_core.canary.scenarios import (
    CANARY_AGENT,
    CANARY_ECHO_WORKFLOW,
    CANARY_UNDO,
    CANARY_WORKFLOW,
    ECHO_AGENT,
)
from workflow_core.workflows.pools import AgentPools

CANARY_AGENTS = frozenset({CANARY_AGENT, CANARY_UNDO})
# The one exception to the routing rule: these workflows' messages for these agents go to the pool
# their step input names.
STEERED: dict[str, frozenset[str]] = {
    CANARY_WORKFLOW: CANARY_AGENTS,
    CANARY_ECHO_WORKFLOW: frozenset({ECHO_AGENT}),
}


def canary_pools(pools: AgentPools, hosted: Iterable[str]) -> list[str]:
    """The pools each canary tick exercises, ``default`` first (the order of ``pools.names``)."""
    hosted = set(hosted)
    listed = pools.pool_of(CANARY_AGENT)
    return [
        name
        for name in pools.names
        if name in hosted or name == listed or (name in pools.pools and pools.pools[name].canary)
    ]


def canary_workflow_of(pools: AgentPools, pool: str, hosted: Iterable[str]) -> str:
    """The definition a canary run in ``pool`` uses: ``sas-canary-echo`` when the pool is message-only,
    opts in (``canary: true``), is not hosted and does not list ``canary.probe``; else ``sas-canary``."""
    declared = pools.pools.get(pool)
    echo = (
        declared is not None
        and declared.message_only
        and declared.canary
        and pool not in set(hosted)
        and CANARY_AGENT not in declared.agents
    )
    return CANARY_ECHO_WORKFLOW if echo else CANARY_WORKFLOW


def _named_pool(body: Mapping[str, Any]) -> Any:
    given = body.get("input")
    if body.get("kind") == "compensate" and isinstance(given, Mapping):
        given = given.get("input")  # a compensator gets {"input": the step's input, "output": ...}
    return given.get("pool") if isinstance(given, Mapping) else None


def route_pool(pools: AgentPools, body: Mapping[str, Any]) -> str:
    """The pool whose queue carries the work message ``body`` (a ``WorkMessage`` as a dict)."""
    agent = str(body.get("agent", ""))
    ordinary = pools.pool_of(agent)
    if agent not in STEERED.get(str(body.get("workflow", "")), ()):
        return ordinary
    named = _named_pool(body)
    return named if isinstance(named, str) and named in pools.names else ordinary
