"""The agent pools in ``infra/`` (``agentPools``): what the default deploys (what it did before pools), what
docs/deploy.md's three-pool example deploys, and that each pool check fails on a broken copy.

No Bicep compiler runs here: ``pool_checks.PoolEvaluator`` evaluates main.bicep's pool variables and the
module parameters built from them (see pool_checks.py).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from pycep import BicepParser

from tests.infra import bicep_checks as bc
from tests.infra import pool_checks as pc
from tests.infra.test_bicep_structure import _problems_after, _replace
from workflow_core import settings as app_settings

DEPLOY_DOC = bc.INFRA_DIR.parent / "docs" / "deploy.md"
ANSWER_QUEUES = ["agent-results-answers-dns1", "agent-results-answers-dns2"]


def documented_example() -> tuple[list[dict], dict]:
    """The ``bicep`` block of docs/deploy.md's "Agent pools": its agentPools and its other params."""
    section = DEPLOY_DOC.read_text(encoding="utf-8").split("## Agent pools", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bicep\n(.*?)```", section, re.DOTALL)
    tree = BicepParser().parse(text=re.sub(r"^param(\s+\w+\s*=)", r"var\1", block, flags=re.MULTILINE))
    values = {name: var["value"] for name, var in tree["variables"].items()}
    return values.pop("agentPools"), values


@pytest.mark.parametrize("check", pc.POOL_CHECKS, ids=lambda check: check.__name__)
def test_the_committed_templates_pass(files, check):
    assert check(files) == []


def test_by_default_the_deployment_is_what_it_was_before_pools(files):
    ev = pc.PoolEvaluator(files)
    assert ev.var("pools") == [
        {
            "name": "default",
            "queue": "agent-work",
            "hosting": "app",
            "messageOnly": False,
            "answerQueues": [],
            "image": "",
            "maxReplicas": 10,
        }
    ]
    assert ev.module_param("modules/function-app.bicep", "hostedPools") == "default"
    assert ev.module_param(pc.SERVICE_BUS, "poolQueueNames") == []
    assert ev.module_param(pc.SERVICE_BUS, "answerQueueNames") == []
    assert ev.module_param(pc.ROLE_ASSIGNMENTS, "defaultPoolHosted") is True
    assert ev.module_param(pc.ROLE_ASSIGNMENTS, "hostedPoolQueueNames") == []
    assert ev.module_param(pc.ROLE_ASSIGNMENTS, "remotePoolQueueNames") == []
    assert ev.var("remotePools") == []  # the agent-pool module loops over nothing: no pool identity
    assert ev.module_condition(pc.CONTAINER_APPS) is False
    assert [p["queue"] for p in ev.module_param(pc.ALERTS, "pools")] == ["agent-work"]


def test_hosted_pools_matches_the_codes_default_once_the_code_documents_it(files, monkeypatch):
    """HOSTED_POOLS is built from agentPools, not a literal: the app-settings check compares the value the
    default agentPools gives with the default the code documents (workflow_core/settings.py)."""
    documented = {**app_settings.DOCUMENTED_SETTINGS, "HOSTED_POOLS": "default"}
    monkeypatch.setattr(app_settings, "DOCUMENTED_SETTINGS", documented)
    assert bc.check_app_settings(files) == []
    monkeypatch.setitem(documented, "HOSTED_POOLS", "default,other")
    assert bc.check_app_settings(files) == [
        "app setting HOSTED_POOLS is 'default', the code documents 'default,other'"
    ]


def test_a_list_without_the_default_pool_still_has_it_hosted_by_the_app(files):
    ev = pc.PoolEvaluator(files, [{"name": "slow", "hosting": "external"}])
    assert [(p["name"], p["queue"], p["hosting"]) for p in ev.var("pools")] == [
        ("default", "agent-work", "app"),
        ("slow", "agent-work-slow", "external"),
    ]
    assert ev.module_param("modules/function-app.bicep", "hostedPools") == "default"


def test_the_documented_three_pool_example(files):
    pools, others = documented_example()
    assert set(others) <= set(files[bc.MAIN].section("parameters"))
    assert all(pc.POOL_NAME.match(pool["name"]) for pool in pools)
    assert {pool["hosting"] for pool in pools} == {"app", "external", "containerApp"}
    ev = pc.PoolEvaluator(files, pools)
    queues = {p["name"]: p["queue"] for p in ev.var("pools")}
    assert queues == {
        "default": "agent-work",
        "provisioning": "agent-work-provisioning",
        "dns": "agent-work-dns",
    }
    # a queue per pool (the default pool's is the work queue itself), an alert per pool
    assert ev.module_param(pc.SERVICE_BUS, "poolQueueNames") == ["agent-work-provisioning", "agent-work-dns"]
    assert [p["queue"] for p in ev.module_param(pc.ALERTS, "pools")] == list(queues.values())
    # the app receives only what it hosts and may only send to the rest
    assert ev.module_param("modules/function-app.bicep", "hostedPools") == "default"
    assert ev.module_param(pc.ROLE_ASSIGNMENTS, "defaultPoolHosted") is True
    assert ev.module_param(pc.ROLE_ASSIGNMENTS, "hostedPoolQueueNames") == []
    assert ev.module_param(pc.ROLE_ASSIGNMENTS, "remotePoolQueueNames") == [
        "agent-work-provisioning",
        "agent-work-dns",
    ]
    # an identity per pool served elsewhere, with its own queue; no storage for the message-only one
    per_pool = {
        pool["name"]: {
            key: ev.module_param(pc.AGENT_POOL, key, pool)
            for key in ("identityName", "poolQueueName", "scalesOnQueue", "messageOnly", "answerQueueNames")
        }
        for pool in ev.var("remotePools")
    }
    assert per_pool == {
        "provisioning": {
            "identityName": f"id-sas-dev-{pc.TOKEN}-pool-provisioning",
            "poolQueueName": "agent-work-provisioning",
            "scalesOnQueue": True,
            "messageOnly": False,
            "answerQueueNames": [],
        },
        "dns": {
            "identityName": f"id-sas-dev-{pc.TOKEN}-pool-dns",
            "poolQueueName": "agent-work-dns",
            "scalesOnQueue": False,
            "messageOnly": True,
            "answerQueueNames": ANSWER_QUEUES,
        },
    }
    # the message-only pool that asks: its answer queues exist, the app may send there (Data Sender) and
    # the pool's identity receive (Data Receiver, in agent-pool.bicep over answerQueueNames)
    assert ev.module_param(pc.SERVICE_BUS, "answerQueueNames") == ANSWER_QUEUES
    assert ev.module_param(pc.ROLE_ASSIGNMENTS, "answerQueueNames") == ANSWER_QUEUES
    # ... and the app knows them, so `sas doctor` probes each (ANSWER_QUEUES)
    assert ev.module_param("modules/function-app.bicep", "answerQueues") == ",".join(ANSWER_QUEUES)
    # Container Apps only for the pool that asks
    assert ev.module_condition(pc.CONTAINER_APPS) is True
    assert [p["name"] for p in ev.module_param(pc.CONTAINER_APPS, "pools")] == ["provisioning"]
    assert ev.module_param(pc.CONTAINER_APPS, "pools")[0]["maxReplicas"] == 5


@pytest.mark.parametrize("environment", ["dev", "x" * 64, "Prod.EU_west(2)"])
def test_pool_resource_names_follow_their_rules_for_the_longest_pool_name(files, environment):
    longest = "a1-" + "b" * 17  # 20 characters, as workflows/pools.yaml allows
    assert pc.POOL_NAME.match(longest)
    ev = pc.PoolEvaluator(files, [{"name": longest, "hosting": "containerApp", "image": "i"}], environment)
    (pool,) = ev.var("containerAppPools")
    identity = ev.module_param(pc.AGENT_POOL, "identityName", pool)
    assert len(identity) <= 128 and re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_-]+", identity)
    app = f"ca-{longest}-{ev.module_param(pc.CONTAINER_APPS, 'appNameSuffix')}"  # as the module names it
    assert "name: 'ca-${pool.name}-${appNameSuffix}'" in (bc.INFRA_DIR / pc.CONTAINER_APPS).read_text()
    assert len(app) <= 32 and re.fullmatch(r"[a-z][a-z0-9-]*[a-z0-9]", app) and "--" not in app, app
    alert = f"{ev.module_param(pc.ALERTS, 'poolAlertNamePrefix')}-{longest}"
    assert len(alert) <= 260 and not re.search(r"[*#&+:<>?@%{}\\/]", alert)
    queue = pool["queue"]
    assert len(queue) <= 260 and re.fullmatch(r"[a-z0-9][a-z0-9._-]*[a-z0-9]", queue)


# ----------------------------------------------------------------------------------------------------------
# Each check fails on a broken copy
# ----------------------------------------------------------------------------------------------------------


def _scope_of(symbol: str, old: str, new: str):
    """Change the ``scope:`` of one resource block."""

    def change(text: str) -> str:
        block = re.search(rf"^resource {symbol} .*?^\}}\n", text, re.MULTILINE | re.DOTALL)
        assert block is not None and f"  scope: {old}\n" in block.group(0), symbol
        return text.replace(block.group(0), block.group(0).replace(f"  scope: {old}\n", f"  scope: {new}\n"))

    return change


@pytest.mark.parametrize(
    ("symbol", "old", "new", "expected"),
    [
        (
            "poolQueueReceiver",
            "poolQueue",
            "serviceBus",
            "Azure Service Bus Data Receiver must be scoped to poolQueue or answerQueues "
            "(Microsoft.ServiceBus/namespaces/queues), is scoped to serviceBus "
            "(Microsoft.ServiceBus/namespaces)",
        ),
        (
            "poolQueueReceiver",
            "poolQueue",
            "resultQueue",
            "Azure Service Bus Data Receiver must be scoped to poolQueue",
        ),
        (
            "ledgerTableContributor",
            "ledgerTable",
            "storage",
            "Storage Table Data Contributor must be scoped to ledgerTable or deadlineIndexTable or "
            "remoteEffectsTable "
            "(Microsoft.Storage/storageAccounts/tableServices/tables), is scoped to storage "
            "(Microsoft.Storage/storageAccounts)",
        ),
        (
            "payloadContributor",
            "payloadContainer",
            "storage",
            "Storage Blob Data Contributor must be scoped to payloadContainer",
        ),
    ],
    ids=["namespace-wide receive", "receive results", "account-wide tables", "account-wide blobs"],
)
def test_a_pool_identity_with_a_wider_scope_is_caught(tmp_path, symbol, old, new, expected):
    problems = _problems_after(
        tmp_path, pc.AGENT_POOL, _scope_of(symbol, old, new), pc.check_pool_role_assignments
    )
    assert any(expected in p for p in problems), problems


def test_a_pool_identity_with_a_role_beyond_its_table_is_caught(tmp_path):
    change = _replace(
        "  storageBlobDataContributor: 'ba92f5b4-2d11-453d-a403-e96b0029c9fe'\n",
        "  storageBlobDataContributor: '974c5e8b-45b9-4653-ba55-5f855dd0fb88'\n",
    )
    problems = _problems_after(tmp_path, pc.AGENT_POOL, change, pc.check_pool_role_assignments)
    assert any("'974c5e8b-45b9-4653-ba55-5f855dd0fb88' is not one of a pool's" in p for p in problems)


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (
            "resource ledgerTableContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = if "
            "(!messageOnly) {",
            "resource ledgerTableContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {",
            "ledgerTableContributor: a storage role must be conditional on !messageOnly",
        ),
        (
            "resource poolQueueScaler 'Microsoft.Authorization/roleAssignments@2022-04-01' = if "
            "(scalesOnQueue) {",
            "resource poolQueueScaler 'Microsoft.Authorization/roleAssignments@2022-04-01' = {",
            "poolQueueScaler: Data Owner on the pool's queue only when KEDA scales on it",
        ),
    ],
    ids=["storage for a message-only pool", "Manage for a pool nobody scales"],
)
def test_an_unconditional_pool_role_is_caught(tmp_path, before, after, expected):
    problems = _problems_after(
        tmp_path, pc.AGENT_POOL, _replace(before, after), pc.check_pool_role_assignments
    )
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize(
    ("symbol", "old", "new"),
    [
        ("hostedPoolQueueDataOwner", "hostedPoolQueues[i]", "remotePoolQueues[i]"),
        ("answerQueueDataReceiver", "answerQueues[i]", "remotePoolQueues[i]"),
    ],
    ids=["a pool it does not host", "a work queue with the answer queues' receiver"],
)
def test_the_app_receiving_a_pool_it_does_not_host_is_caught(tmp_path, symbol, old, new):
    problems = _problems_after(
        tmp_path, pc.ROLE_ASSIGNMENTS, _scope_of(symbol, old, new), pc.check_pool_role_assignments
    )
    assert any(symbol in p and "remotePoolQueues" in p for p in problems), problems


def test_a_pool_queue_that_drifts_from_the_work_queue_is_caught(tmp_path):
    def change(text: str) -> str:
        block = text.split("resource poolQueues ", 1)[1].split("\n}]\n", 1)[0]
        return text.replace(
            block, block.replace("maxDeliveryCount: maxDeliveryCount", "maxDeliveryCount: 10")
        )

    problems = _problems_after(tmp_path, pc.SERVICE_BUS, change, pc.check_pool_queues)
    assert problems == [
        "modules/servicebus.bicep: pool queues' maxDeliveryCount is 10, the work queue's maxDeliveryCount: "
        "a pool's queue has the work queue's settings"
    ]


def test_a_pool_alert_on_another_queue_is_caught(tmp_path):
    change = _replace("                pool.queue\n", "                resultQueueName\n")
    problems = _problems_after(tmp_path, pc.ALERTS, change, pc.check_pool_alerts)
    assert problems == [
        "modules/servicebus-alerts.bicep: no DeadletteredMessages alert (GreaterThan 0) per pool on the "
        "pool's own queue"
    ]


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (
            "      activeRevisionsMode: 'Single'\n",
            "      activeRevisionsMode: 'Single'\n      secrets: [\n        {\n          name: 'sb'\n"
            "          value: 'x'\n        }\n      ]\n",
            "configuration.secrets must not be set",
        ),
        (
            "      activeRevisionsMode: 'Single'\n",
            "      activeRevisionsMode: 'Single'\n      ingress: {\n        external: true\n"
            "        targetPort: 80\n      }\n",
            "configuration.ingress must not be set",
        ),
        (
            "              identity: poolIdentities[i].id\n",
            "              auth: [\n                {\n                  secretRef: 'sb'\n"
            "                  triggerParameter: 'connection'\n                }\n              ]\n",
            "the scale rule authenticates with the pool identity, no auth",
        ),
        (
            "              value: poolIdentities[i].properties.clientId\n            }\n            {\n"
            "              name: 'APPLICATIONINSIGHTS_CONNECTION_STRING'",
            "              secretRef: 'client'\n            }\n            {\n"
            "              name: 'APPLICATIONINSIGHTS_CONNECTION_STRING'",
            "env AZURE_CLIENT_ID reads a secret",
        ),
        ("        minReplicas: 0\n", "        minReplicas: 1\n", "scale from minReplicas 0"),
        ("            pool.name\n          ]\n", "            'default'\n          ]\n", "sas-agent --pool"),
    ],
    ids=["secrets", "ingress", "scale rule auth", "secret env", "no scale to zero", "wrong pool"],
)
def test_a_container_app_with_a_secret_or_an_opening_is_caught(tmp_path, before, after, expected):
    problems = _problems_after(tmp_path, pc.CONTAINER_APPS, _replace(before, after), pc.check_container_apps)
    assert any(expected in p for p in problems), problems


def test_container_apps_by_default_are_caught(tmp_path):
    change = _replace(
        "module agentPoolContainerApps 'modules/agent-pool-containerapp.bicep' = "
        "if (!empty(containerAppPools)) {",
        "module agentPoolContainerApps 'modules/agent-pool-containerapp.bicep' = {",
    )
    problems = _problems_after(tmp_path, bc.MAIN, change, pc.check_pool_parameter)
    assert problems == [f"{pc.CONTAINER_APPS} must not be deployed unless a pool asks for it"]


def test_a_default_other_than_one_app_hosted_pool_is_caught(tmp_path):
    change = _replace(
        "param agentPools array = [\n  {\n    name: 'default'\n    hosting: 'app'\n",
        "param agentPools array = [\n  {\n    name: 'default'\n    hosting: 'external'\n",
    )
    problems = _problems_after(tmp_path, bc.MAIN, change, pc.check_pool_parameter)
    assert problems[0].startswith("main.bicep: param agentPools must default to")


def test_a_shipped_parameter_file_that_opts_in_is_caught(tmp_path):
    infra = tmp_path / "infra"
    shutil.copytree(bc.INFRA_DIR, infra)
    path = infra / "main.dev.bicepparam"
    path.write_text(path.read_text() + "param agentPools = []\n")
    files, _ = bc.load(infra)
    assert pc.check_pool_parameter(files, infra) == [
        "main.dev.bicepparam sets agentPools: the shipped environments keep the default pool"
    ]


def test_the_scale_rule_identity_form_is_cited_in_the_bicep():
    text = Path(bc.INFRA_DIR / pc.CONTAINER_APPS).read_text(encoding="utf-8")
    assert "learn.microsoft.com/azure/container-apps/managed-identity#scale-rules" in text


def _looped_over(files, path: str, symbol: str) -> tuple[str, Any]:
    """The array a looped resource of ``path`` iterates, and the resource (scope, role, principal)."""
    raw = files[path].section("resources")[symbol]["config"]
    resource = next(
        r
        for r in bc.declared(files, bc.SERVICE_BUS_QUEUE)
        + bc.declared(files, "Microsoft.Authorization/roleAssignments")
        if r.file == path and r.symbol == symbol
    )
    return raw["loop_type"]["detail"]["array_name"], resource


def _role(files, path: str, assignment) -> str:
    function = bc._node(assignment.properties["roleDefinitionId"], "function")
    return bc.Resolver(files).value(path, function["parameters"]["resource_name_1"])


def test_each_answer_queue_exists_with_the_apps_sender_and_the_pools_receiver(files):
    """The queue the Node example's ANSWER_QUEUE names is created (servicebus.bicep), the app's identity
    may send its answers there and only there (role-assignments.bicep), and the asking pool's identity
    may receive them (agent-pool.bicep): without all three the pool's every step waits for an answer.
    The app may receive there too: doctor reads its own probe answer back (api/diagnostics_queues.py)."""
    source, queue = _looped_over(files, pc.SERVICE_BUS, "answerQueues")
    assert source == "answerQueueNames" and queue.config["name"] == "queueName"
    ttl = bc.iso_seconds(queue.properties["defaultMessageTimeToLive"])
    assert ttl is not None and ttl <= 600  # an answer nobody read in time is of no use
    source, sender = _looped_over(files, pc.ROLE_ASSIGNMENTS, "answerQueueDataSender")
    assert source == "answerQueueNames" and bc.scope_symbol(sender) == "answerQueues"
    assert _role(files, pc.ROLE_ASSIGNMENTS, sender) == bc.SERVICE_BUS_DATA_SENDER
    assert sender.properties["principalId"] == "principalId"  # the app's identity
    source, probe = _looped_over(files, pc.ROLE_ASSIGNMENTS, "answerQueueDataReceiver")
    assert source == "answerQueueNames" and bc.scope_symbol(probe) == "answerQueues"
    assert _role(files, pc.ROLE_ASSIGNMENTS, probe) == bc.SERVICE_BUS_DATA_RECEIVER
    assert probe.properties["principalId"] == "principalId"
    source, receiver = _looped_over(files, pc.AGENT_POOL, "answerQueueReceiver")
    assert source == "answerQueueNames" and bc.scope_symbol(receiver) == "answerQueues"
    assert _role(files, pc.AGENT_POOL, receiver) == bc.SERVICE_BUS_DATA_RECEIVER
    assert bc.dotted(receiver.properties["principalId"]) == "poolIdentity.properties.principalId"
    for path in (pc.SERVICE_BUS, pc.ROLE_ASSIGNMENTS, pc.AGENT_POOL):
        existing = bc._symbols(files, path)["answerQueues"]
        assert existing.type == bc.SERVICE_BUS_QUEUE


def test_every_module_that_takes_the_pools_waits_for_their_validation(files):
    """ "Fails before creating anything" rests on dependsOn, not on ARM's preflight."""
    text = files[bc.MAIN].text
    for module in (
        "serviceBus",
        "roleAssignments",
        "serviceBusAlerts",
        "agentPool",
        "agentPoolRegistryPull",
        "agentPoolContainerApps",
    ):
        body = text[text.index(f"module {module} ") :]
        body = body[: body.index("\n}")]
        depends = body[body.index("dependsOn") :] if "dependsOn" in body else ""
        assert "agentPoolsValidation" in depends, module


def test_the_registry_scope_never_indexes_an_empty_id(files):
    ev = pc.PoolEvaluator(files)
    parts = ev.value("registryIdParts")
    assert len(parts) > 4 and parts[2] and parts[4]  # resourceGroup(parts[2], parts[4]) is well formed


def test_the_app_is_told_what_doctor_reads_back_and_may_read_it(files):
    """api/diagnostics_rbac.py reads the roles infra granted: the app settings name the namespace, the
    storage account, the component, the app's principal and each remote pool's (with messageOnly: whether
    it holds storage roles), and the app is Reader on each of the three."""
    _site, settings = bc.app_settings_of(files)
    assert {
        "SERVICE_BUS_NAMESPACE_ID",
        "STORAGE_ACCOUNT_ID",
        "APPLICATION_INSIGHTS_ID",
        "APP_PRINCIPAL_ID",
        "AGENT_POOL_IDENTITIES",
        "ANSWER_QUEUES",
    } <= set(settings)
    text = files[bc.MAIN].text
    call = text[text.index("module functionApp ") :]
    identities = call[call.index("agentPoolIdentities: [for (pool, i) in remotePools:") :]
    for key in (
        "principalId: agentPool[i].outputs.principalId",
        "queue: pool.queue",
        "messageOnly: pool.messageOnly",
        "answerQueues: pool.answerQueues",
    ):
        assert key in identities[: identities.index("}]")]
    readers = {
        bc.scope_symbol(a)
        for a in bc.declared(files, "Microsoft.Authorization/roleAssignments")
        if a.file == pc.ROLE_ASSIGNMENTS
        and a.properties["principalId"] == "principalId"
        and _role(files, pc.ROLE_ASSIGNMENTS, a) == bc.READER
    }
    assert readers == {"serviceBus", "storage", "appInsights"}
