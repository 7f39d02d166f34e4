"""The canary's scenarios as one table: the fault, the recovery path it proves, the audit events
that recovery leaves, and how long it may take (from the canary's deadlines and the watchdog period).

Times are read from the shipped ``sas-canary`` definition, never restated, so editing a deadline
there moves the expected recovery time with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from workflow_core.workflows import get_workflow

CANARY_WORKFLOW = "sas-canary"
CANARY_AGENT, CANARY_UNDO = "canary.probe", "canary.undo"
PROBE, FINISH = "probe", "finish"


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
            "the probe was not compensated: is compensation disabled, does canary.undo have an agent?",
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


def canary_pool() -> str:
    """The agent pool the canary exercises: where ``workflows/pools.yaml`` routes ``canary.probe``
    (a pool opts in by listing ``canary.probe`` and ``canary.undo`` among its agents)."""
    from workflow_core.workflows.loader import agent_pools

    return agent_pools().pool_of(CANARY_AGENT)


def scenario_named(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown canary scenario {name!r}; known: {', '.join(SCENARIOS)}") from None


def expected_recovery_seconds(name: str, *, watchdog_period: float, grace: float) -> float:
    """The longest the scenario's recovery may take, from the fault to the run's end, stated from the
    canary definition's deadlines and the watchdog's period (plus its grace, plus one period of lag)."""
    scenario = scenario_named(name)
    workflow = get_workflow(CANARY_WORKFLOW)
    probe, finish = workflow.steps[0], workflow.steps[1]
    wake = watchdog_period + grace  # a deadline is noticed within one period after grace
    retry_wait = probe.retry.max_interval_seconds  # the longest single backoff wait
    work = probe.deadline_seconds + finish.deadline_seconds  # a healthy (fast) run never reaches these
    if scenario.name == "retry":
        bound = retry_wait + work
    elif scenario.name == "lost-reply":
        bound = probe.deadline_seconds + wake + retry_wait + work
    elif scenario.name == "heartbeat-stops":
        bound = (probe.heartbeat_timeout_seconds or probe.deadline_seconds) + wake + retry_wait + work
    elif scenario.name == "compensate":
        bound = finish.deadline_seconds + probe.compensation.deadline_seconds + wake
    else:  # scheduler-lost: noticed when the probe is overdue, resumed on the next tick
        bound = probe.deadline_seconds + 2 * wake + work
    return float(bound)
