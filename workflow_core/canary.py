"""The recovery canary's core: its scenarios as one table (the fault each injects, the recovery path it
proves, the audit events that recovery leaves, how long it may take) and the verdict a finished run
earns from its audit trail alone (the ledger is the only truth).

Times are read from the shipped definition the run used (``sas-canary``, or ``sas-canary-echo`` in a
message-only pool), never restated, so editing a deadline there moves the expected recovery time with
it. Roles build on it: the canary agent (``activities/worker/handlers/canary.py``) reads the fault from
its own input; the supervisor's canary (``supervisor/canary``, run by the maintenance timer) starts
runs and records verdicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from workflow_core.ledger.model import AuditEntry
from workflow_core.workflows import get_workflow
from workflow_core.workflows.pools import AgentPools, Pool

CANARY_WORKFLOW = "sas-canary"
CANARY_AGENT, CANARY_UNDO = "canary.probe", "canary.undo"
# A message-only pool's canary: its own agent's conformance echo contract (docs/agents.md), faults
# from the run's input (ECHO_FAULTS), the same steps, deadlines and retries as sas-canary.
CANARY_ECHO_WORKFLOW, ECHO_AGENT = "sas-canary-echo", "conformance.echo"
CANARY_WORKFLOWS = (CANARY_WORKFLOW, CANARY_ECHO_WORKFLOW)
PROBE, FINISH = "probe", "finish"
CANARY_AGENTS = frozenset({CANARY_AGENT, CANARY_UNDO})
TERMINAL = {"Succeeded", "Failed", "Compensated", "CompensationFailed", "Cancelled", "Stopped"}


@dataclass(frozen=True)
class Scenario:
    name: str
    fault: str  # what the run does wrong on purpose
    recovery: str  # the recovery path it proves
    # audit events the recovery must leave, as (step, to_status) in order; "*" matches any step
    expected_events: tuple[tuple[str, str], ...]
    outcome: str  # the run's final status: "succeeded" or "compensated"
    # what a broken recovery path looks like, for the verdict's cause
    cause_if_missing: str


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "lost-reply",
            "the probe's first attempt never answers",
            "deadline overrun noticed, then a retry",
            ((PROBE, "TimedOut"), (PROBE, "Succeeded"), (FINISH, "Succeeded")),
            "succeeded",
            "the silent attempt was never timed out: is the watchdog running, does the pool have an agent?",
        ),
        Scenario(
            "retry",
            "the probe fails once, then succeeds",
            "retry with backoff",
            ((PROBE, "Failed"), (PROBE, "Succeeded"), (FINISH, "Succeeded")),
            "succeeded",
            "the failed attempt was not retried: does the pool have an agent, is the retry policy intact?",
        ),
        Scenario(
            "compensate",
            "the finish step fails for good",
            "compensation in reverse order",
            ((PROBE, "Succeeded"), (FINISH, "Failed"), (PROBE, "Compensated")),
            "compensated",
            "the probe was not compensated: is compensation disabled, does its compensator have an agent?",
        ),
        Scenario(
            "scheduler-lost",
            "the scheduler (orchestration) is terminated while the probe runs",
            "watchdog resume from the ledger",
            ((PROBE, "Succeeded"), (FINISH, "Succeeded")),
            "succeeded",
            "the terminated run was not resumed: is the watchdog running, is the resume path refusing?",
        ),
        Scenario(
            "heartbeat-stops",
            "the probe heartbeats once, then goes silent",
            "heartbeat deadline overrun, then a retry",
            ((PROBE, "TimedOut"), (PROBE, "Succeeded"), (FINISH, "Succeeded")),
            "succeeded",
            "the stalled attempt was never timed out: is the watchdog running, does the pool have an agent?",
        ),
    )
}


# The echo contract's fault per step for each scenario (sas-canary-echo): the same fault canary.probe
# makes on its own. scheduler-lost has none: the canary terminates the orchestration.
ECHO_FAULTS: dict[str, dict[str, str]] = {
    "lost-reply": {PROBE: "silent"},
    "retry": {PROBE: "fail"},
    "compensate": {FINISH: "fail-permanently"},
    "scheduler-lost": {},
    "heartbeat-stops": {PROBE: "heartbeat-then-silent"},
}


def echo_input(scenario: str, pool: str) -> dict[str, object]:
    """A ``sas-canary-echo`` run's input: the scenario, the pool and each step's fault (first attempt)."""
    faults = ECHO_FAULTS[scenario_named(scenario).name]
    return {"scenario": scenario, "pool": pool, **{f"{step}_fault": f for step, f in faults.items()}}


def canary_pool() -> str:
    """The agent pool the canary exercises: where ``workflows/pools.yaml`` routes ``canary.probe``
    (a pool opts in by listing ``canary.probe`` and ``canary.undo`` among its agents)."""
    from workflow_core.workflows.loader import agent_pools

    return agent_pools().pool_of(CANARY_AGENT)


def scenario_named(name: str) -> Scenario:
    if name not in SCENARIOS:
        raise ValueError(f"unknown canary scenario {name!r}; known: {', '.join(SCENARIOS)}")
    return SCENARIOS[name]


def expected_recovery_seconds(
    name: str, *, watchdog_period: float, grace: float, workflow_name: str = CANARY_WORKFLOW
) -> float:
    """The longest the scenario's recovery may take, from the fault to the run's end, stated from the
    deadlines of the canary definition the run used (``workflow_name``) and the watchdog's period (plus
    its grace, plus one period of lag)."""
    scenario = scenario_named(name)
    if workflow_name not in CANARY_WORKFLOWS:
        raise ValueError(f"{workflow_name!r} is not a canary workflow ({', '.join(CANARY_WORKFLOWS)})")
    probe, finish = get_workflow(workflow_name).steps[:2]
    wake = watchdog_period + grace  # a deadline is noticed within one period after grace
    retry_wait = probe.retry.max_interval_seconds  # the longest single backoff wait
    work = probe.deadline_seconds + finish.deadline_seconds  # a healthy (fast) run never reaches these
    after_silence = wake + retry_wait + work  # the silent attempt noticed, retried, the run finished
    bounds = {
        "retry": retry_wait + work,
        "lost-reply": probe.deadline_seconds + after_silence,
        "heartbeat-stops": (probe.heartbeat_timeout_seconds or probe.deadline_seconds) + after_silence,
        "compensate": finish.deadline_seconds + probe.compensation.deadline_seconds + wake,
        # scheduler-lost: noticed when the probe is overdue, resumed on the next tick
        "scheduler-lost": probe.deadline_seconds + 2 * wake + work,
    }
    return float(bounds[scenario.name])


def canary_pools(pools: AgentPools, hosted: Iterable[str]) -> list[str]:
    """The pools each canary tick exercises, ``default`` first (the order of ``pools.names``): every
    hosted pool (``HOSTED_POOLS``), every pool that opts in (``canary: true`` in ``workflows/pools.yaml``),
    and the pool that lists ``canary.probe``. Dispatch routes a run's messages to the pool its input
    names (``workflow_core.workflows.pools.STEERED``)."""
    chosen = {*hosted, pools.pool_of(CANARY_AGENT)} | {name for name, p in pools.pools.items() if p.canary}
    return [name for name in pools.names if name in chosen]


def canary_workflow_of(pools: AgentPools, pool: str, hosted: Iterable[str]) -> str:
    """The definition a canary run in ``pool`` uses: ``sas-canary-echo`` when the pool is message-only,
    opts in (``canary: true``), is not hosted and does not list ``canary.probe`` (its agents implement
    the conformance echo contract, not the app's Python handlers); else ``sas-canary``."""
    declared = pools.pools.get(pool, Pool())
    echo = declared.message_only and declared.canary and CANARY_AGENT not in declared.agents
    return CANARY_ECHO_WORKFLOW if echo and pool not in set(hosted) else CANARY_WORKFLOW


@dataclass(frozen=True)
class Observation:
    outcome: str  # "passed" | "failed" | "pending"
    observed: str  # what the audit trail shows, for people
    recovery_seconds: float | None
    cause: str = ""


def _in_order(wanted: Sequence[tuple[str, str]], seen: Sequence[tuple[str, str]]) -> tuple[str, str] | None:
    """The first wanted event not found after its predecessor (None: all found in order)."""
    it = iter(seen)
    for want in wanted:
        if not any(step in (want[0], "*") and status == want[1] for step, status in it):
            return want
    return None


def _likely_cause(spec: Scenario, seen: Sequence[tuple[str, str]], agents: Sequence[str]) -> str:
    """The scenario's usual cause, unless the trail names a plainer one: attempts were dispatched but no
    agent ever took one (no step ever Running), which is a pool without a (running) agent."""
    dispatched = any(status in ("Dispatched", "Compensating") for _, status in seen)
    if dispatched and not any(status == "Running" for _, status in seen):
        serving = f" serving {', '.join(agents)}" if agents else ""
        how = "no agent took any attempt (dispatched, never running)"
        return f"{how}: does the pool have a running agent{serving}?"
    return spec.cause_if_missing


def judge(
    scenario: str,
    trail: Sequence[AuditEntry],
    *,
    expected_seconds: float,
    now: datetime,
    started_at: datetime,
    agents: Sequence[str] = (),
) -> Observation:
    """Passed when the scenario's expected audit events happened in order, the run ended as expected,
    and it took no longer than ``expected_seconds``; otherwise the cause that usually explains it.
    ``agents``: the run's agents, named in a cause when no agent took any attempt."""
    spec = scenario_named(scenario)
    end = next((a for a in trail if a.action == "instance-transition" and a.to_status in TERMINAL), None)
    seen = [(a.step_id, a.to_status or "") for a in trail if a.action == "transition"]
    summary = ", ".join(f"{s}:{t}" for s, t in seen if t) or "no step moved"
    missing = _in_order(spec.expected_events, seen)
    if end is None:
        if (now - started_at).total_seconds() <= expected_seconds:
            return Observation("pending", summary, None)
        what = f"missing {missing[0]} {missing[1]}" if missing else "the run never ended"
        cause = f"not recovered within {expected_seconds:.0f}s ({what}): {_likely_cause(spec, seen, agents)}"
        return Observation("failed", summary, None, cause)
    took = (end.at - started_at).total_seconds()
    resumed = any(a.action == "recovery" and a.reason.startswith("resume_instance") for a in trail)
    if missing is not None:
        cause = f"expected {missing[0]} {missing[1]} did not happen: {_likely_cause(spec, seen, agents)}"
    elif spec.name == "scheduler-lost" and not resumed:
        cause = f"no watchdog resume recorded: {spec.cause_if_missing}"
    elif end.to_status.lower() != spec.outcome:
        cause = f"run ended {end.to_status}, expected {spec.outcome}: {_likely_cause(spec, seen, agents)}"
    elif took > expected_seconds:
        cause = f"recovered in {took:.0f}s, over the {expected_seconds:.0f}s bound: "
        cause += "is the watchdog late or the pool slow?"
    else:
        return Observation("passed", summary, took)
    return Observation("failed", summary, took, cause)
