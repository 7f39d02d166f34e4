"""What an agent handler is, how it is registered, and what it is given.

A handler is a plain function ``handler(ctx: StepContext) -> dict | None`` registered under an agent
name with :func:`agent`. It does the remote work of one step (or undoes it, for a compensator) and
returns the step's output. It must be idempotent on ``ctx.idempotency_key`` (the same for every
attempt of the step), because a message can be delivered twice and a timed-out attempt may have
taken effect. Raising any exception reports the attempt as failed; the scheduler's retry policy
decides what happens next (a timeout and a failure are treated alike), except for a failure retrying
cannot fix: a :class:`PermanentError` (or a subclass), or an exception whose type the step lists in
``non_retryable_errors``. Then the scheduler gives up at once and the workflow compensates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from workflow_core import clock

if TYPE_CHECKING:
    from activities.worker.handlers.remote import RemoteEffects
    from workflow_core.runtime import Services


class AgentCrash(Exception):
    """Raised (by the fault injector) to simulate the agent's process dying mid-step.

    The worker does not record anything and lets it propagate, so the host abandons the message
    and delivers it again, exactly as after a real crash.
    """


class StepNoLongerOwned(Exception):
    """The step moved on without this worker (taken over, timed out, superseded): stop quietly.

    Raised by :meth:`StepContext.heartbeat`; a handler should let it propagate. The worker then
    records nothing and sends no result.
    """


class PermanentError(Exception):
    """A failure retrying cannot fix (a declined card, input the remote service rejects).

    Raise it (or a subclass) from a handler: the attempt is recorded Failed and marked non-retryable,
    so the scheduler makes no further attempt and the workflow compensates. A step definition can
    name other exception types to treat the same way (``non_retryable_errors``).
    """


def is_non_retryable(exc: BaseException, non_retryable_errors: Iterable[str] = ()) -> bool:
    """Is ``exc`` a failure retrying cannot fix: a :class:`PermanentError`, or an instance of a type
    (or a subclass of a type) named in ``non_retryable_errors`` (class names, e.g. ``CardDeclined``)?"""
    if isinstance(exc, PermanentError):
        return True
    names = set(non_retryable_errors)
    return any(cls.__name__ in names for cls in type(exc).__mro__)


class NoReply(Exception):
    """Finish without recording or replying (a simulated dead agent); the deadline will catch it."""


@dataclass
class StepContext:
    """Everything a handler may use about the step it is running."""

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

    def now(self) -> datetime:
        return clock.utcnow()

    def heartbeat(self, seconds: float | None = None) -> datetime | None:
        """Tell the ledger the step is still making progress: its deadline becomes
        ``now + seconds`` (default: the step's ``heartbeat_timeout_seconds``), never earlier than it
        was. Returns the deadline now in force. Raises :class:`StepNoLongerOwned` if this worker no
        longer owns the step."""
        if self._heartbeat is None:
            return self.deadline
        deadline = self._heartbeat(seconds)
        self.deadline = deadline
        return deadline

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


def check_agents_registered(workflows: Mapping[str, Any] | Iterable[Any]) -> set[str]:
    """Raise :class:`MissingAgentHandlers` naming every agent a workflow uses without a handler.

    ``workflows``: ``{name: WorkflowDefinition}`` (what ``load_workflows()`` returns) or an iterable
    of definitions. Returns the set of agents used, all of them registered.
    """
    definitions = workflows.values() if isinstance(workflows, Mapping) else workflows
    used: dict[str, list[str]] = {}
    for definition in definitions:
        for name in definition.agents_used():
            used.setdefault(name, []).append(definition.name)
    missing = {name: users for name, users in used.items() if name not in AGENT_HANDLERS}
    if missing:
        raise MissingAgentHandlers(missing)
    return set(used)


def check_shipped_workflows() -> set[str]:
    """Load the app's workflow definitions and check every agent they use has a handler.

    For ``function_app`` to call at start-up, so a missing handler stops a deployment instead of
    failing the first step that needs it.
    """
    from workflow_core.workflows import load_workflows

    return check_agents_registered(load_workflows())
