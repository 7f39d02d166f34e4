"""Which pool a canary run exercises, and where dispatch sends its agents' messages.

Routing stays one explicit rule (``workflows/pools.yaml``: an agent's pool carries its work) with one
named exception: a message of the ``sas-canary`` workflow for ``canary.probe`` or ``canary.undo`` goes
to the pool its step input names (``pool``, copied from the run's input by the definition), when that
pool is declared. No other workflow or agent can steer its messages, and an undeclared name falls back
to the ordinary rule. Why not pool-qualified agent names: the step's agent comes from the pinned
definition, so one definition per pool would be needed; the input carries the pool instead, and the
ledger keeps it (the run's input and every step's input).

The pools a canary tick covers (:func:`canary_pools`): every hosted pool (``HOSTED_POOLS``), every pool
that opts in (``canary: true`` in ``workflows/pools.yaml``), and the pool that lists ``canary.probe``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from workflow_core.canary.scenarios import CANARY_AGENT, CANARY_UNDO, CANARY_WORKFLOW
from workflow_core.workflows.pools import AgentPools

CANARY_AGENTS = frozenset({CANARY_AGENT, CANARY_UNDO})


def canary_pools(pools: AgentPools, hosted: Iterable[str]) -> list[str]:
    """The pools each canary tick exercises, ``default`` first (the order of ``pools.names``)."""
    hosted = set(hosted)
    listed = pools.pool_of(CANARY_AGENT)
    return [
        name
        for name in pools.names
        if name in hosted or name == listed or (name in pools.pools and pools.pools[name].canary)
    ]


def _named_pool(body: Mapping[str, Any]) -> Any:
    given = body.get("input")
    if body.get("kind") == "compensate" and isinstance(given, Mapping):
        given = given.get("input")  # a compensator gets {"input": the step's input, "output": ...}
    return given.get("pool") if isinstance(given, Mapping) else None


def route_pool(pools: AgentPools, body: Mapping[str, Any]) -> str:
    """The pool whose queue carries the work message ``body`` (a ``WorkMessage`` as a dict)."""
    agent = str(body.get("agent", ""))
    ordinary = pools.pool_of(agent)
    if body.get("workflow") != CANARY_WORKFLOW or agent not in CANARY_AGENTS:
        return ordinary
    named = _named_pool(body)
    return named if isinstance(named, str) and named in pools.names else ordinary
