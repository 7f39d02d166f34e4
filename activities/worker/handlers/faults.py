"""In-process fault injection for agents: make a handler fail, hang, or crash, on purpose (the tests
and the demo; docs/agents.md, "The fault injector"). State is per process, not shared across instances.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from activities.worker.handlers.base import AgentCrash, NoReply

if TYPE_CHECKING:
    from activities.worker.handlers.base import StepContext


class InjectedFailure(RuntimeError):
    """The failure a :class:`Fail` rule makes the agent report."""


class StallInjected(NoReply):
    """A :class:`Stall` rule without ``seconds``: the agent never replies."""


class InjectedCrash(AgentCrash):
    """A :class:`CrashAfterEffect` rule: the agent dies after its effect, before replying."""


@dataclass
class Rule:
    times: int | None = None  # None: every time
    fired: int = field(default=0, init=False)


@dataclass
class Fail(Rule):
    message: str = "injected failure"


@dataclass
class Stall(Rule):
    seconds: float | None = None  # None: no reply at all


@dataclass
class CrashAfterEffect(Rule):
    times: int | None = 1


@dataclass(frozen=True)
class FaultEvent:
    agent: str
    step_id: str
    attempt: int
    rule: str


_lock = threading.Lock()
_rules: list[tuple[str, str | None, Rule]] = []
_events: list[FaultEvent] = []


def inject(agent: str, rule: Rule, *, step: str | None = None) -> Rule:
    """Add ``rule`` for ``agent`` (or only its step ``step``); returns the rule (see ``rule.fired``)."""
    if not isinstance(rule, Fail | Stall | CrashAfterEffect):
        raise TypeError(f"unknown fault rule {rule!r}; use Fail, Stall or CrashAfterEffect")
    with _lock:
        _rules.append((agent, step, rule))
    return rule


def remove(rule: Rule) -> None:
    with _lock:
        _rules[:] = [entry for entry in _rules if entry[2] is not rule]


def clear() -> None:
    with _lock:
        _rules.clear()
        _events.clear()


def events() -> list[FaultEvent]:
    """What fired so far, oldest first."""
    with _lock:
        return list(_events)


def _take(ctx: StepContext, kinds: tuple[type[Rule], ...]) -> Rule | None:
    with _lock:
        candidates = [
            (step is None, rule)
            for agent, step, rule in _rules
            if agent == ctx.agent
            and step in (None, ctx.step_id)
            and isinstance(rule, kinds)
            and (rule.times is None or rule.fired < rule.times)
        ]
        if not candidates:
            return None
        # step-specific rules first, then in injection order (min is stable: the first of equals)
        rule = min(candidates, key=lambda c: c[0])[1]
        rule.fired += 1
        _events.append(FaultEvent(ctx.agent, ctx.step_id, ctx.attempt, type(rule).__name__))
        return rule


def before_handler(ctx: StepContext) -> None:
    """Called by the worker before the handler: Fail and Stall rules."""
    rule = _take(ctx, (Fail, Stall))
    if isinstance(rule, Fail):
        raise InjectedFailure(f"{rule.message} ({ctx.agent}, step {ctx.step_id}, attempt {ctx.attempt})")
    if isinstance(rule, Stall):
        if rule.seconds is None:
            raise StallInjected(f"{ctx.agent} stalls on step {ctx.step_id} attempt {ctx.attempt}")
        time.sleep(rule.seconds)


def after_handler(ctx: StepContext) -> None:
    """Called by the worker after the handler made its effect, before anything is recorded."""
    if _take(ctx, (CrashAfterEffect,)) is not None:
        raise InjectedCrash(
            f"{ctx.agent} crashed after its effect (step {ctx.step_id}, attempt {ctx.attempt})"
        )
