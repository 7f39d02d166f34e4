"""Agent pools: the pools file's rules, and which queue an agent's work goes to."""

from __future__ import annotations

import pytest

from workflow_core.workflows.errors import WorkflowDefinitionError
from workflow_core.workflows.loader import agent_pools, clear_workflow_cache, load_workflows
from workflow_core.workflows.pools import DEFAULT_POOL, parse_pools, pool_queue

POOLS = """
pools:
  provisioning:
    agents: [storage.create, storage.delete]
  notifications:
    agents: [email.send_welcome]
    message_only: true
"""


def test_agents_route_to_their_pool_and_the_rest_to_default():
    pools = parse_pools(POOLS)
    assert pools.names == ["default", "notifications", "provisioning"]
    assert pools.pool_of("storage.delete") == "provisioning"
    assert pools.pool_of("dns.register") == DEFAULT_POOL
    assert pool_queue("agent-work", pools.pool_of("storage.create")) == "agent-work-provisioning"
    assert pool_queue("agent-work", pools.pool_of("dns.register")) == "agent-work"
    assert pools.is_message_only("notifications") and not pools.is_message_only("provisioning")
    assert not pools.is_message_only(DEFAULT_POOL)


def test_a_logic_app_pool_is_message_only():
    pools = parse_pools("pools:\n  flows: {agents: [crm.create], kind: logicApp, message_only: true}\n")
    assert pools.pools["flows"].kind == "logicApp" and pools.is_message_only("flows")


def test_no_pools_file_means_everything_in_default(tmp_path):
    clear_workflow_cache()
    pools = agent_pools(tmp_path)
    assert pools.names == ["default"] and pools.pool_of("anything") == "default"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("pools:\n  a: {agents: [x]}\n  b: {agents: [x]}\n", "agent 'x' is in pools 'a' and 'b'"),
        ("pools:\n  Bad_Name: {agents: [x]}\n", "pool 'Bad_Name'"),
        ("pools:\n  a: {agent: [x]}\n", "a.agent"),
        ("pools:\n  a: {agents: [x]\n", "not valid YAML"),
        ("pools:\n  " + "a" * 21 + ": {}\n", "1-20 lowercase"),
        ("pools:\n  flows: {kind: logicApp}\n", "pool 'flows': a logicApp pool holds no storage rights"),
        ("pools:\n  flows: {kind: powerAutomate, message_only: true}\n", "flows.kind"),
    ],
)
def test_a_bad_pools_file_is_refused_naming_the_problem(text, needle):
    with pytest.raises(WorkflowDefinitionError) as err:
        parse_pools(text)
    assert needle in str(err.value) and str(err.value).startswith("pools.yaml: ")


def test_pool_queue_refuses_a_name_that_would_make_a_bad_queue():
    assert pool_queue("agent-work", "default") == "agent-work"
    with pytest.raises(ValueError):
        pool_queue("agent-work", "Not a pool")


def test_the_pools_file_is_not_read_as_a_workflow(tmp_path):
    (tmp_path / "pools.yaml").write_text(POOLS)
    clear_workflow_cache()
    assert load_workflows(tmp_path) == {}
    assert agent_pools(tmp_path).pool_of("email.send_welcome") == "notifications"
    clear_workflow_cache()
