"""A pool with ``hosting: 'logicApp'`` (``kind: logicApp`` in workflows/pools.yaml): main.bicep deploys
``modules/agent-pool-logicapp.bicep`` for it, with the Logic App's system identity instead of a pool
identity, and the app keeps its send-only right on the pool's queue; the module's roles, identity and
storage are checked by ``pool_checks.check_logic_app_pool``, and each check fails on a broken copy."""

from __future__ import annotations

import re

import pytest

from tests.infra import pool_checks as pc
from tests.infra.test_agent_pools_validation import _problems
from tests.infra.test_bicep_structure import _problems_after, _replace

FLOWS = {
    "name": "flows",
    "hosting": "logicApp",
    "agent": "crm.create",
    "serviceUrl": "https://crm.example/api",
}
POOLS = [{"name": "default", "hosting": "app"}, FLOWS]


def test_a_logic_app_pool_gets_its_module_and_no_pool_identity(files):
    ev = pc.PoolEvaluator(files, POOLS)
    assert _problems(files, POOLS) == {}
    assert [p["name"] for p in ev.var("logicAppPools")] == ["flows"]
    assert ev.var("remotePools") == []  # its identity is the Logic App's own, not agent-pool.bicep's
    assert ev.module_param(pc.SERVICE_BUS, "poolQueueNames") == ["agent-work-flows"]
    assert ev.module_param(pc.ROLE_ASSIGNMENTS, "remotePoolQueueNames") == ["agent-work-flows"]  # send only
    assert ev.module_param(pc.ROLE_ASSIGNMENTS, "hostedPoolQueueNames") == []
    assert ev.module_param("modules/function-app.bicep", "hostedPools") == "default"
    assert ev.module_param(pc.LOGIC_APP, "poolQueueName", FLOWS) == "agent-work-flows"
    assert ev.module_param(pc.LOGIC_APP, "agent", FLOWS) == "crm.create"
    assert ev.module_param(pc.LOGIC_APP, "serviceUrl", FLOWS) == "https://crm.example/api"
    assert ev.module_param(pc.LOGIC_APP, "workflowPlanId", FLOWS) == ""  # a plan of its own
    plan = "/subscriptions/s/resourceGroups/r/providers/Microsoft.Web/serverfarms/p"
    shared = {**FLOWS, "workflowPlanId": plan}
    assert ev.module_param(pc.LOGIC_APP, "workflowPlanId", shared).endswith("/serverfarms/p")


@pytest.mark.parametrize(
    "pool",
    [
        {k: v for k, v in FLOWS.items() if k != "serviceUrl"},
        {k: v for k, v in FLOWS.items() if k != "agent"},
        {**FLOWS, "name": "default"},
    ],
    ids=["no serviceUrl", "no agent", "the default pool"],
)
def test_a_logic_app_pool_without_what_it_needs_is_refused(files, pool):
    assert set(_problems(files, [pool])) == {"logicAppPoolsWithoutAgentOrService"}


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (
            "  name: guid(poolQueue.id, logicApp.id, roles.serviceBusDataReceiver)\n  scope: poolQueue\n",
            "  name: guid(poolQueue.id, logicApp.id, roles.serviceBusDataReceiver)\n  scope: serviceBus\n",
            "on serviceBus is refused",
        ),
        (
            "appPrincipalId, roles.serviceBusDataSender)\n  scope: answerQueue\n",
            "appPrincipalId, roles.serviceBusDataSender)\n  scope: resultQueue\n",
            "'appPrincipalId'",
        ),
        ("    type: 'SystemAssigned'\n", "    type: 'None'\n", "runs as its system-assigned identity"),
        ("    allowSharedKeyAccess: false\n", "    allowSharedKeyAccess: true\n", "SharedKeyAccess false"),
        (
            "          value: 'Microsoft.Azure.Functions.ExtensionBundle.Workflows'\n",
            "          value: 'Microsoft.Azure.Functions.ExtensionBundle'\n",
            "the workflows extension bundle must be set",
        ),
    ],
    ids=["namespace-wide receive", "app sends no answers", "no system identity", "shared keys", "bundle"],
)
def test_a_broken_logic_app_pool_is_caught(tmp_path, before, after, expected):
    problems = _problems_after(tmp_path, pc.LOGIC_APP, _replace(before, after), pc.check_logic_app_pool)
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("environment", ["dev", "x" * 64, "Prod.EU_west(2)"])
def test_the_logic_app_names_follow_their_rules(files, environment):
    """Site and plan: at most 60 letters, digits and dashes; storage account: 3-24 lower-case letters
    and digits (Microsoft Learn, "Naming rules and restrictions for Azure resources"), for the longest
    pool name and any environment name azd accepts."""
    pool = {**FLOWS, "name": "p" * 20}
    suffix = pc.PoolEvaluator(files, [pool], environment=environment).module_param(
        pc.LOGIC_APP, "nameSuffix", pool
    )
    text = files[pc.LOGIC_APP].text
    names = dict(re.findall(r"^var (name|planName|storageAccountName) = '(.*)'$", text, re.M))
    filled = {
        key: value.replace("${uniqueString(nameSuffix, poolName)}", pc.TOKEN)
        .replace("${nameSuffix}", suffix)
        .replace("${poolName}", pool["name"])
        for key, value in names.items()
    }
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]{0,58}[a-z0-9]", filled["name"]), filled
    assert re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9-]{0,58}[a-zA-Z0-9]", filled["planName"]), filled
    assert re.fullmatch(r"[a-z0-9]{3,24}", filled["storageAccountName"]), filled
    assert "--" not in filled["name"], filled
