"""AcrPull for the containerApp pools' identities (modules/agent-pool-registry-pull.bicep).

The same deployment creates those identities, so nobody could grant the role before the first revision
pulls its image: the template grants it, on the registry only, to the containerApp pools only, and the
container apps wait for it.
"""

from __future__ import annotations

from tests.infra import bicep_checks as bc
from tests.infra import pool_checks as pc

ACR_PULL = "7f951dda-4ed3-4680-a7ca-43fe172d538d"


def test_acr_pull_on_the_registry_only(files):
    assignments = bc.declared(files, "Microsoft.Authorization/roleAssignments")
    (assignment,) = [a for a in assignments if a.file == bc.REGISTRY_PULL]
    function = bc._node(assignment.properties["roleDefinitionId"], "function")
    role = bc.Resolver(files).value(bc.REGISTRY_PULL, function["parameters"]["resource_name_1"])
    assert role == ACR_PULL
    assert bc.scope_symbol(assignment) == "registry"
    registry = bc._symbols(files, bc.REGISTRY_PULL)["registry"]
    assert registry.type == "Microsoft.ContainerRegistry/registries" and registry.existing
    assert assignment.properties["principalType"] == "ServicePrincipal"
    loop = files[bc.REGISTRY_PULL].section("resources")["acrPull"]["config"]
    assert "pull" in str(loop["loop_type"])  # only the pools that run on Container Apps


def test_main_grants_it_before_the_container_apps_start(files):
    ev = pc.PoolEvaluator(files)
    modules = {path: (params, condition) for path, params, condition in ev.modules.values()}
    _params, condition = modules[bc.REGISTRY_PULL]
    assert "agentPoolRegistryId" in bc.dotted(condition) and "containerAppPools" in bc.dotted(condition)
    text = files[bc.MAIN].text
    container_apps = text[text.index("module agentPoolContainerApps") :]
    assert "agentPoolRegistryPull" in container_apps[: container_apps.index("\n}\n")]
    assert "registryServer: agentPoolRegistryLoginServer" in container_apps


def test_the_login_server_comes_from_the_registry_id_when_not_given(files):
    registry_id = (
        "/subscriptions/s/resourceGroups/rg-shared/providers/Microsoft.ContainerRegistry/registries/a"
    )
    registry_id = registry_id.replace("registries/a", "registries/acr")
    ev = pc.PoolEvaluator(files)
    ev.params["agentPoolRegistryId"] = registry_id
    assert ev.value("registryIdParts")[2] == "s" and ev.value("registryIdParts")[4] == "rg-shared"
