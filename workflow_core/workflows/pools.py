"""Agent pools: which work queue carries an agent's work (docs/agents.md, "Agent pools").

Declared once, in ``workflows/pools.yaml``; an agent named in no pool belongs to ``default``, whose
queue is the work queue itself (``WORK_QUEUE_NAME``); pool ``p`` uses ``<WORK_QUEUE_NAME>-p``.

Routing (:func:`route_pool`, for dispatch and the watchdog's redispatch) is that one rule with one
declared exception, :data:`STEERED`: the recovery canary's messages go to the declared pool their step
input names (docs/operations.md, "Recovery canary", says why and why not pool-qualified agent names).

Per-agent limits are declared there too, under ``agents:`` (docs/agent-limits.md). An agent named
nowhere there is unlimited: dispatch reads no limit row for it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from workflow_core.ledger.model import AGENT_NAME
from workflow_core.workflows.errors import WorkflowDefinitionError
from workflow_core.workflows.steps import Strict

POOLS_FILE = "pools.yaml"
DEFAULT_POOL = "default"
# Short enough that "<queue name>-<pool>" stays a valid queue name on both transports.
POOL_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){0,19}$")
# The one exception to the routing rule (workflow -> its agents whose messages go to the pool their
# input names): the recovery canary's, ``workflow_core.canary``'s names (a test keeps them in step).
STEERED: dict[str, frozenset[str]] = {
    "sas-canary": frozenset({"canary.probe", "canary.undo"}),
    "sas-canary-echo": frozenset({"conformance.echo"}),
}
# Workflows whose agents only pools outside the app serve (a message-only pool's own runtime, the
# canary's echo): the app's handler checks (start-up, `sas lint`, the demo) do not ask for their handlers.
SERVED_OUTSIDE_THE_APP = frozenset({"sas-canary-echo"})


class CircuitSettings(Strict):
    # consecutive retryable failures, across instances, that open the circuit
    failure_threshold: int = Field(default=5, ge=1, le=10_000)
    open_seconds: float = Field(default=60, gt=0, le=86_400)


class AgentLimits(Strict):
    max_in_flight: int | None = Field(default=None, ge=1, le=1_000)
    circuit: CircuitSettings | None = None
    wait_poll_seconds: float = Field(default=5, ge=0.1, le=3_600)

    @property
    def active(self) -> bool:
        return self.max_in_flight is not None or self.circuit is not None


class Pool(Strict):
    agents: tuple[str, ...] = ()
    message_only: bool = False
    canary: bool = False  # opts the pool in to the recovery canary (docs/operations.md, "Recovery canary")
    # Who serves it, when that constrains the pool: ``logicApp``, a Logic App Standard workflow
    # (examples/logic-app-agent), which holds no storage rights, so the pool must be message-only.
    kind: Literal["logicApp"] | None = None


class AgentPools(Strict):
    """The ``pools:`` mapping of ``pools.yaml``, validated: names, and each agent in one pool only."""

    pools: dict[str, Pool] = Field(default_factory=dict)
    # per-agent concurrency limit and circuit breaker (docs/agent-limits.md); unset: unlimited
    agents: dict[str, AgentLimits] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> AgentPools:
        owner: dict[str, str] = {}
        for name, pool in self.pools.items():
            if not POOL_NAME.match(name):
                raise ValueError(f"pool {name!r}: 1-20 lowercase letters, digits and single dashes")
            if pool.kind == "logicApp" and not pool.message_only:
                raise ValueError(
                    f"pool {name!r}: a logicApp pool holds no storage rights: declare it message_only: true"
                )
            for agent in pool.agents:
                if agent in owner:
                    raise ValueError(f"agent {agent!r} is in pools {owner[agent]!r} and {name!r}")
                owner[agent] = name
        for agent in self.agents:
            if not AGENT_NAME.match(agent) or len(agent) > 200:
                raise ValueError(f"agents: {agent!r} is not an agent name")
        return self

    @property
    def names(self) -> list[str]:
        """Every pool, ``default`` first."""
        return [DEFAULT_POOL, *sorted(set(self.pools) - {DEFAULT_POOL})]

    def pool_of(self, agent: str) -> str:
        return next((name for name, pool in self.pools.items() if agent in pool.agents), DEFAULT_POOL)

    def limits_of(self, agent: str) -> AgentLimits | None:
        """The agent's declared limits, or None (unlimited: dispatch reads nothing more)."""
        return limits if (limits := self.agents.get(agent)) is not None and limits.active else None

    def is_message_only(self, pool: str) -> bool:
        return self.pools.get(pool, Pool()).message_only


def pool_queue(work_queue: str, pool: str) -> str:
    """The work queue of ``pool``: the default pool's is ``work_queue`` itself."""
    if not POOL_NAME.match(pool):
        raise ValueError(f"{pool!r} is not a pool name (1-20 lowercase letters, digits and single dashes)")
    return work_queue if pool == DEFAULT_POOL else f"{work_queue}-{pool}"


def route_pool(pools: AgentPools, body: Mapping[str, Any]) -> str:
    """The pool whose queue carries the work message ``body`` (a ``WorkMessage`` as a dict)."""
    agent = str(body.get("agent", ""))
    ordinary = pools.pool_of(agent)
    if agent not in STEERED.get(str(body.get("workflow", "")), ()):
        return ordinary
    given = body.get("input")
    if body.get("kind") == "compensate" and isinstance(given, Mapping):
        given = given.get("input")  # a compensator gets {"input": the step's input, "output": ...}
    named = given.get("pool") if isinstance(given, Mapping) else None
    return named if isinstance(named, str) and named in pools.names else ordinary


def parse_pools(text: str, source: str = POOLS_FILE) -> AgentPools:
    try:
        return AgentPools.model_validate(yaml.safe_load(text) or {})
    except yaml.YAMLError as exc:
        raise WorkflowDefinitionError(f"{source}: not valid YAML: {exc}") from None
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'pools'}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise WorkflowDefinitionError(f"{source}: {problems}") from None


_cache: dict[Path, AgentPools] = {}
_lock = threading.Lock()


def load_pools_file(path: Path) -> AgentPools:
    """The pools declared in the file ``path`` (absent: everything in ``default``), parsed once."""
    with _lock:
        if path not in _cache:  # resolved once per spelling (a lookup runs on every step)
            key = path.resolve()
            got = _cache.get(key) or (parse_pools(key.read_text("utf-8")) if key.is_file() else AgentPools())
            _cache[path] = _cache[key] = got
        return _cache[path]


def clear_pools_cache() -> None:
    with _lock:
        _cache.clear()
