"""What an agent handler is, how it is registered, and what it is given.

A handler ``handler(ctx: StepContext) -> dict | None``, registered with :func:`agent`, does (or
undoes) the remote work of one step and returns its output, idempotent on ``ctx.idempotency_key``: a
message can be delivered twice and a timed-out attempt may have taken effect. Raising fails the
attempt; :class:`PermanentError` (or a type the step lists in ``non_retryable_errors``) also ends
its retries (docs/agents.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from activities.worker.handlers.remote import RemoteEffects
    from workflow_core.runtime import Services


class AgentCrash(Exception):
    """A simulated crash of the agent's process: the worker records nothing and lets it propagate, so
    the host delivers the message again, as after a real crash."""


class StepNoLongerOwned(Exception):
    """Raised by :meth:`StepContext.heartbeat` when the step moved on without this worker: let it
    propagate (nothing is recorded or sent)."""


class PermanentError(Exception):
    """A failure retrying cannot fix (a declined card): no further attempt; the workflow compensates."""


class NoReply(Exception):
    """Finish without recording or replying (a simulated dead agent); the deadline will catch it."""


@dataclass
class StepContext:
    instance_id: str
    step_id: str
    attempt: int
    agent: str
    kind: Literal["work", "compensate"]
    input: dict[str, Any]
    deadline: datetime | None
    services: Services | None = None
    worker_id: str = ""
    # For compensators: the step's original input and output (from the ledger).
    step_input: dict[str, Any] = field(default_factory=dict)
    step_output: dict[str, Any] | None = None
    _heartbeat: Callable[[float | None], datetime | None] | None = field(default=None, repr=False)

    @property
    def idempotency_key(self) -> str:
        """Stable across attempts (``instance:step``), so the remote service dedupes retries."""
        return f"{self.instance_id}:{self.step_id}"

    def heartbeat(self, seconds: float | None = None) -> datetime | None:
        """The step is still making progress: its deadline becomes ``now + seconds`` (default: its
        ``heartbeat_timeout_seconds``), never earlier; returns the deadline now in force."""
        if self._heartbeat is not None:
            self.deadline = self._heartbeat(seconds)
        return self.deadline

    @property
    def effects(self) -> RemoteEffects:
        """The simulated remote services (an Azure Table) the example handlers act on."""
        from activities.worker.handlers.remote import RemoteEffects

        if self.services is None:
            raise RuntimeError("this StepContext has no services; pass services= to use remote effects")
        return RemoteEffects.for_services(self.services)


Handler = Callable[[StepContext], "Mapping[str, Any] | None"]

AGENT_HANDLERS: dict[str, Handler] = {}


def agent(name: str) -> Callable[[Handler], Handler]:
    """Register ``handler`` as the agent ``name`` (e.g. ``@agent("storage.create")``)."""

    def register(handler: Handler) -> Handler:
        existing = AGENT_HANDLERS.get(name)
        if existing is not None and existing.__qualname__ != handler.__qualname__:
            raise ValueError(
                f"agent {name!r} already has a handler: {existing.__module__}.{existing.__qualname__}"
            )
        AGENT_HANDLERS[name] = handler
        return handler

    return register


def get_handler(name: str) -> Handler | None:
    return AGENT_HANDLERS.get(name)


class MissingAgentHandlers(RuntimeError):
    """Workflows use agents that have no handler registered in this app."""

    def __init__(self, missing: Mapping[str, list[str]]) -> None:
        self.missing = {k: sorted(v) for k, v in sorted(missing.items())}
        listed = "; ".join(f"{name} (used by {', '.join(users)})" for name, users in self.missing.items())
        super().__init__(
            f"{len(self.missing)} agent(s) used by workflow definitions have no handler: {listed}. "
            "Register one with @agent(name) in activities/worker/handlers/ (see docs/agents.md)."
        )


def check_agents_registered(
    workflows: Mapping[str, Any], served_here: Callable[[str], bool] | None = None
) -> set[str]:
    """Raise :class:`MissingAgentHandlers` naming every agent a workflow uses without a handler (of
    those ``served_here`` says this process runs: all by default); return the set of agents used."""
    used: dict[str, list[str]] = {}
    for definition in workflows.values():
        for name in definition.agents_used():
            used.setdefault(name, []).append(definition.name)
    needed = {name: users for name, users in used.items() if served_here is None or served_here(name)}
    missing = {name: users for name, users in needed.items() if name not in AGENT_HANDLERS}
    if missing:
        raise MissingAgentHandlers(missing)
    return set(used)


def check_shipped_workflows() -> set[str]:
    """At start-up, a missing handler stops a deployment instead of failing its first step; only the
    agents of the pools the app hosts (``HOSTED_POOLS``) need one here."""
    from workflow_core.settings import hosted_pools
    from workflow_core.workflows import load_workflows
    from workflow_core.workflows.loader import agent_pools

    pools, hosted = agent_pools(), hosted_pools()
    return check_agents_registered(app_served(load_workflows()), lambda agent: pools.pool_of(agent) in hosted)


def app_served(workflows: Mapping[str, Any]) -> dict[str, Any]:
    """``workflows`` without those whose agents only pools outside the app serve (the message-only
    canary, ``sas-canary-echo``: its runs go only to a message-only pool's own agents)."""
    from workflow_core.workflows.pools import SERVED_OUTSIDE_THE_APP

    return {name: d for name, d in workflows.items() if name not in SERVED_OUTSIDE_THE_APP}
