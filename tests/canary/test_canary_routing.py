"""Which pools a canary tick covers, and the one routing exception the canary has (pure: no Azurite)."""

from __future__ import annotations

import pytest

from workflow_core.canary import (
    CANARY_AGENTS,
    CANARY_ECHO_WORKFLOW,
    CANARY_WORKFLOW,
    ECHO_AGENT,
    canary_pools,
)
from workflow_core.workflows.errors import WorkflowDefinitionError
from workflow_core.workflows.pools import SERVED_OUTSIDE_THE_APP, STEERED, parse_pools, route_pool

TWO_POOLS = "pools:\n  alpha:\n    agents: []\n  beta:\n    agents: []\n    canary: true\n"


def test_the_canary_pools_are_the_hosted_the_opted_in_and_the_one_listing_the_probe():
    pools = parse_pools(TWO_POOLS)
    assert canary_pools(pools, ["default"]) == ["default", "beta"]
    assert canary_pools(pools, ["default", "alpha"]) == ["default", "alpha", "beta"]
    listed = parse_pools("pools:\n  canaries:\n    agents: [canary.probe, canary.undo]\n  other: {}\n")
    assert canary_pools(listed, ["default"]) == ["default", "canaries"]
    assert canary_pools(parse_pools(""), ["default"]) == ["default"]


@pytest.mark.parametrize("bad", ["pools:\n  a:\n    canary: maybe\n", "pools:\n  a:\n    canary: [1]\n"])
def test_a_malformed_opt_in_is_refused_by_name(bad):
    with pytest.raises(WorkflowDefinitionError, match="canary"):
        parse_pools(bad)


def test_the_routing_exception_names_the_canary_workflows_and_agents():
    assert {CANARY_WORKFLOW: CANARY_AGENTS, CANARY_ECHO_WORKFLOW: frozenset({ECHO_AGENT})} == STEERED
    assert {CANARY_ECHO_WORKFLOW} == SERVED_OUTSIDE_THE_APP


def test_only_the_canary_agents_of_the_canary_workflow_can_name_a_pool():
    pools = parse_pools(TWO_POOLS)
    canary = {"workflow": "sas-canary", "agent": "canary.probe", "kind": "work", "input": {"pool": "beta"}}
    assert route_pool(pools, canary) == "beta"
    undo = {**canary, "agent": "canary.undo", "kind": "compensate", "input": {"input": {"pool": "alpha"}}}
    assert route_pool(pools, undo) == "alpha"
    assert route_pool(pools, {**canary, "workflow": "order-fulfilment"}) == "default"  # others cannot steer
    assert route_pool(pools, {**canary, "agent": "payment.charge"}) == "default"
    assert route_pool(pools, {**canary, "input": {"pool": "nowhere"}}) == "default"  # undeclared: the rule
    assert route_pool(pools, {**canary, "input": {"pool": ["beta"]}}) == "default"
    assert route_pool(pools, {**canary, "input": "beta"}) == "default"


EDGE = (
    "pools:\n  edge:\n    agents: []\n    message_only: true\n    canary: true\n"
    "  quiet:\n    message_only: true\n"
)


def test_an_opted_in_message_only_pool_gets_the_echo_definition_every_other_the_canary():
    from workflow_core.canary import canary_workflow_of

    pools = parse_pools(
        EDGE + "  beta:\n    canary: true\n  old:\n    message_only: true\n    canary: true\n"
        "    agents: [canary.probe, canary.undo]\n"
    )
    assert canary_pools(pools, ["default"]) == ["default", "beta", "edge", "old"]  # quiet did not opt in
    assert {p: canary_workflow_of(pools, p, ["default"]) for p in canary_pools(pools, ["default"])} == {
        "default": "sas-canary",
        "beta": "sas-canary",  # opted in, hosted elsewhere by the app's own runner
        "edge": "sas-canary-echo",
        "old": "sas-canary",  # its runner implements canary.probe (the older opt-in)
    }
    assert canary_workflow_of(pools, "edge", ["default", "edge"]) == "sas-canary"  # hosted: the app serves it


def test_the_echo_canary_names_its_pool_for_conformance_echo_only():
    pools = parse_pools(EDGE)
    probe = {
        "workflow": "sas-canary-echo",
        "agent": "conformance.echo",
        "kind": "work",
        "input": {"pool": "edge"},
    }
    assert route_pool(pools, probe) == "edge"
    undo = {**probe, "kind": "compensate", "input": {"input": {"pool": "edge"}, "output": {}}}
    assert route_pool(pools, undo) == "edge"
    assert route_pool(pools, {**probe, "agent": "canary.probe"}) == "default"  # not its agent
    assert route_pool(pools, {**probe, "workflow": "conformance"}) == "default"  # the kit's own workflow
    assert route_pool(pools, {**probe, "input": {"pool": "nowhere"}}) == "default"


def test_every_scenario_has_its_echo_faults_and_the_same_bound_as_the_canary():
    from workflow_core.canary import ECHO_FAULTS, SCENARIOS, echo_input, expected_recovery_seconds

    assert list(ECHO_FAULTS) == list(SCENARIOS)
    assert echo_input("compensate", "edge") == {
        "scenario": "compensate",
        "pool": "edge",
        "finish_fault": "fail-permanently",
    }
    assert echo_input("scheduler-lost", "edge") == {"scenario": "scheduler-lost", "pool": "edge"}
    for name in SCENARIOS:
        bounds = {
            w: expected_recovery_seconds(name, watchdog_period=30, grace=30, workflow_name=w)
            for w in ("sas-canary", "sas-canary-echo")
        }
        assert bounds["sas-canary"] == bounds["sas-canary-echo"] > 0, bounds
    with pytest.raises(ValueError, match="not a canary workflow"):
        expected_recovery_seconds("retry", watchdog_period=30, grace=30, workflow_name="order-fulfilment")


def test_the_echo_definition_keeps_the_canary_shape_and_carries_the_faults():
    from workflow_core.workflows import get_workflow, resolve_step_input

    canary, echo = get_workflow("sas-canary"), get_workflow("sas-canary-echo")
    shape = lambda w: [  # noqa: E731
        (
            s.id,
            s.deadline_seconds,
            s.heartbeat_timeout_seconds,
            s.retry,
            s.compensation and s.compensation.retry,
        )
        for s in w.steps
    ]
    assert shape(echo) == shape(canary)
    assert {s.agent for s in echo.steps} | {s.compensator for s in echo.steps if s.compensator} == {
        "conformance.echo"
    }
    given = echo.validate_input({"scenario": "retry", "pool": "edge", "probe_fault": "fail"})
    assert resolve_step_input(echo.steps[0], given, {}) == {
        "value": "retry",
        "fault": "fail",
        "fault_attempts": 1,
        "pool": "edge",
    }
    assert resolve_step_input(echo.steps[1], given, {})["fault"] == "none"


def test_dispatch_and_the_watchdog_route_without_importing_the_canary():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for module in (
        "activities/scheduler/dispatch.py",
        "supervisor/step_decisions.py",
        "supervisor/watchdog.py",
    ):
        tree = ast.parse((root / module).read_text(encoding="utf-8"))
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not {m for m in imported if ".canary" in f".{m}"}, module
