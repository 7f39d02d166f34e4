"""Which pools a canary tick covers, and the one routing exception the canary has (pure: no Azurite)."""

from __future__ import annotations

import pytest

from workflow_core.canary import canary_pools, route_pool
from workflow_core.workflows.errors import WorkflowDefinitionError
from workflow_core.workflows.pools import parse_pools

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


def test_only_the_canary_agents_of_the_canary_workflow_can_name_a_pool():
    from workflow_core.workflows.pools import parse_pools

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
