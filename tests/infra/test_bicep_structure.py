"""Offline validation of infra/*.bicep: it parses, declares what the app needs, wires every app setting
the code reads, grants least-privilege roles on the right scopes, and leaks no secret.

No Bicep compiler or Azure is needed (see bicep_checks.py). The mutation tests at the bottom prove that
each check really fails when the templates are broken the way it guards against.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.infra import bicep_checks as bc
from workflow_core import settings as app_settings

# The built-in role definition ids, as published in Azure's built-in roles reference.
BUILT_IN_ROLE_IDS = {
    "Azure Service Bus Data Sender": "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39",
    "Azure Service Bus Data Receiver": "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0",
    "Storage Blob Data Owner": "b7e6dc6d-f1e8-4753-8033-0f276bb0955b",
    "Storage Queue Data Contributor": "974c5e8b-45b9-4653-ba55-5f855dd0fb88",
    "Storage Table Data Contributor": "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3",
    "Monitoring Metrics Publisher": "3913510d-42f4-4e42-8a64-420c390055eb",
}
SERVICE_BUS_DATA_OWNER = "090c5cfd-751d-490a-894a-3ce6f1109419"


@pytest.fixture(scope="module")
def files() -> dict[str, bc.BicepFile]:
    loaded, problems = bc.load()
    assert problems == []
    return loaded


# ----------------------------------------------------------------------------------------------------------
# The templates as committed
# ----------------------------------------------------------------------------------------------------------


def test_every_bicep_file_parses():
    loaded, problems = bc.load()
    assert problems == []
    on_disk = {p.relative_to(bc.INFRA_DIR).as_posix() for p in bc.INFRA_DIR.rglob("*.bicep")}
    assert set(loaded) == on_disk
    assert {"main.bicep", "modules/function-app.bicep", "modules/role-assignments.bicep"} <= on_disk


def test_modules_resolve_and_are_all_used(files):
    assert bc.check_modules_resolve(files) == []


@pytest.mark.parametrize("resource_type", sorted(bc.REQUIRED_RESOURCE_TYPES))
def test_required_resource_is_declared(files, resource_type):
    assert bc.declared(files, resource_type), bc.REQUIRED_RESOURCE_TYPES[resource_type]


def test_required_resources(files):
    assert bc.check_required_resources(files) == []


def test_storage_account_tables_and_queues(files):
    assert bc.check_storage(files) == []


def test_service_bus_namespace_and_queues(files):
    assert bc.check_service_bus(files) == []


def test_flex_consumption_function_app(files):
    assert bc.check_function_app(files) == []


def test_every_documented_setting_is_set_identity_based(files):
    assert bc.check_app_settings(files) == []


def test_monitoring_alerts_and_views(files):
    assert bc.check_monitoring(files) == []


def test_role_assignments_least_privilege_on_resource_scopes(files):
    assert bc.check_role_assignments(files) == []


def test_role_ids_are_the_built_in_ones():
    assert {name: guid for guid, (name, _scope) in bc.REQUIRED_ROLES.items()} == BUILT_IN_ROLE_IDS
    text = (bc.INFRA_DIR / "modules" / "role-assignments.bicep").read_text(encoding="utf-8")
    for guid in BUILT_IN_ROLE_IDS.values():
        assert f"'{guid}'" in text


def test_no_secrets_anywhere(files):
    assert bc.check_no_secrets(files) == []


def test_outputs(files):
    assert bc.check_outputs(files) == []


def test_parameter_files(files):
    assert bc.check_param_files(files) == []
    assert (bc.INFRA_DIR / "main.dev.bicepparam").is_file()


def test_no_unused_params_or_vars(files):
    assert bc.check_no_unused_declarations(files) == []


def test_all_checks_pass():
    assert bc.run_all() == []


# ----------------------------------------------------------------------------------------------------------
# Each check fails on a broken copy (mutations of the Bicep text in a temporary folder)
# ----------------------------------------------------------------------------------------------------------


def _copy(tmp_path: Path) -> Path:
    target = tmp_path / "infra"
    shutil.copytree(bc.INFRA_DIR, target, ignore=shutil.ignore_patterns("*.sh"))
    return target


def _edit(infra: Path, rel: str, change: Callable[[str], str]) -> None:
    path = infra / rel
    before = path.read_text(encoding="utf-8")
    after = change(before)
    assert after != before, f"mutation of {rel} changed nothing"
    path.write_text(after, encoding="utf-8")


def _replace(old: str, new: str) -> Callable[[str], str]:
    def change(text: str) -> str:
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
        return text.replace(old, new)

    return change


def _drop_resource(symbol: str) -> Callable[[str], str]:
    """Remove ``resource <symbol> ... = {`` up to its closing ``}`` at column 0."""

    def change(text: str) -> str:
        pattern = re.compile(rf"^resource {re.escape(symbol)} .*?^\}}\n", re.MULTILINE | re.DOTALL)
        assert len(pattern.findall(text)) == 1, symbol
        return pattern.sub("", text)

    return change


def _drop_app_setting(name: str) -> Callable[[str], str]:
    def change(text: str) -> str:
        pattern = re.compile(rf"\n[ ]*\{{\n[ ]*name: '{re.escape(name)}'\n[ ]*value: [^\n]*\n[ ]*\}}")
        assert len(pattern.findall(text)) == 1, name
        return pattern.sub("", text)

    return change


def _problems_after(tmp_path: Path, rel: str, change: Callable[[str], str], check) -> list[str]:
    infra = _copy(tmp_path)
    _edit(infra, rel, change)
    files, problems = bc.load(infra)
    assert problems == [], problems
    found = check(files)
    assert bc.run_all(infra), "run_all must report the problem too"
    return found


def test_removing_the_service_bus_sender_role_is_caught(tmp_path):
    problems = _problems_after(
        tmp_path,
        "modules/role-assignments.bicep",
        _drop_resource("serviceBusDataSender"),
        bc.check_role_assignments,
    )
    assert problems == [
        "missing role assignment: Azure Service Bus Data Sender (69a216fc-b8fb-44d8-bc22-1f3c2cd27a39) "
        "on the Microsoft.ServiceBus/namespaces"
    ]


def test_role_assignment_at_resource_group_scope_is_caught(tmp_path):
    rel = "modules/role-assignments.bicep"

    def unscope_receiver(text: str) -> str:
        block = re.search(r"^resource serviceBusDataReceiver .*?^\}\n", text, re.MULTILINE | re.DOTALL)
        assert block is not None
        return text.replace(block.group(0), block.group(0).replace("  scope: serviceBus\n", ""))

    problems = _problems_after(tmp_path, rel, unscope_receiver, bc.check_role_assignments)
    assert any(
        "Azure Service Bus Data Receiver must be scoped to a" in p and "resource group" in p for p in problems
    )


def test_role_scoped_to_the_wrong_resource_is_caught(tmp_path):
    change = _replace(
        "name: guid(serviceBus.id, principalId, roles.serviceBusDataSender)\n  scope: serviceBus",
        "name: guid(serviceBus.id, principalId, roles.serviceBusDataSender)\n  scope: storage",
    )
    problems = _problems_after(tmp_path, "modules/role-assignments.bicep", change, bc.check_role_assignments)
    assert any(
        "Azure Service Bus Data Sender must be scoped to a Microsoft.ServiceBus" in p for p in problems
    )


def test_broader_role_than_needed_is_caught(tmp_path):
    change = _replace("'4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0'", f"'{SERVICE_BUS_DATA_OWNER}'")
    problems = _problems_after(tmp_path, "modules/role-assignments.bicep", change, bc.check_role_assignments)
    assert any(SERVICE_BUS_DATA_OWNER in p and "least-privilege" in p for p in problems)
    assert any("missing role assignment: Azure Service Bus Data Receiver" in p for p in problems)


def test_wrong_principal_type_is_caught(tmp_path):
    def change(text: str) -> str:
        return text.replace("principalType: 'ServicePrincipal'", "principalType: 'User'", 1)

    problems = _problems_after(tmp_path, "modules/role-assignments.bicep", change, bc.check_role_assignments)
    assert any("principalType must be ServicePrincipal" in p for p in problems)


def test_adding_a_secret_output_is_caught(tmp_path):
    change = _replace(
        "output id string = storage.id\n",
        "output id string = storage.id\noutput leaked string = storage.listKeys().keys[0].value\n",
    )
    problems = _problems_after(tmp_path, "modules/storage.bicep", change, bc.check_no_secrets)
    assert any("output leaked exposes a secret" in p for p in problems)
    assert any("storage.listKeys()" in p and "reads or holds a key" in p for p in problems)


def test_outputting_the_connection_string_is_caught(tmp_path):
    change = _replace(
        "output applicationInsightsId string = appInsights.id\n",
        "output applicationInsightsId string = appInsights.id\n"
        "output telemetry string = appInsights.properties.ConnectionString\n",
    )
    problems = _problems_after(tmp_path, "modules/monitoring.bicep", change, bc.check_no_secrets)
    assert problems == ["modules/monitoring.bicep: output telemetry exposes a secret (connectionstring)"]


def test_connection_string_app_setting_is_caught(tmp_path):
    change = _replace(
        "      appSettings: [\n",
        "      appSettings: [\n"
        "        {\n"
        "          name: 'AzureWebJobsStorage'\n"
        "          value: 'DefaultEndpointsProtocol=https;AccountName=x;AccountKey=${storage.name}'\n"
        "        }\n",
    )
    infra = _copy(tmp_path)
    _edit(infra, "modules/function-app.bicep", change)
    files, problems = bc.load(infra)
    assert problems == []
    assert any("AzureWebJobsStorage is set as a connection string" in p for p in bc.check_app_settings(files))
    secrets = bc.check_no_secrets(files)
    assert any("AccountKey" in p for p in secrets)
    assert "app setting AzureWebJobsStorage is a connection string" in secrets


@pytest.mark.parametrize("name", sorted(app_settings.DOCUMENTED_SETTINGS))
def test_dropping_any_documented_setting_is_caught(tmp_path, name):
    prefixes = (app_settings.STORAGE_CONNECTION, app_settings.SERVICE_BUS_CONNECTION)
    setting = f"{name}__credential" if name in prefixes else name
    problems = _problems_after(
        tmp_path, "modules/function-app.bicep", _drop_app_setting(setting), bc.check_app_settings
    )
    assert any(setting in p for p in problems), problems


def test_setting_that_drifts_from_the_documented_default_is_caught(tmp_path):
    change = _replace("param watchdogBatchSize int = 100", "param watchdogBatchSize int = 50")
    problems = _problems_after(tmp_path, "main.bicep", change, bc.check_app_settings)
    assert problems == ["app setting WATCHDOG_BATCH_SIZE is '50', the code documents '100'"]


def test_flex_deprecated_setting_is_caught(tmp_path):
    change = _replace(
        "      appSettings: [\n",
        "      appSettings: [\n"
        "        {\n          name: 'FUNCTIONS_WORKER_RUNTIME'\n          value: 'python'\n        }\n",
    )
    problems = _problems_after(tmp_path, "modules/function-app.bicep", change, bc.check_app_settings)
    assert problems == ["app setting FUNCTIONS_WORKER_RUNTIME is not supported on Flex Consumption"]


def test_service_bus_local_auth_is_caught(tmp_path):
    change = _replace("disableLocalAuth: true", "disableLocalAuth: false")
    problems = _problems_after(tmp_path, "modules/servicebus.bicep", change, bc.check_service_bus)
    assert any("disableLocalAuth must be true" in p for p in problems)


def test_queue_without_duplicate_detection_is_caught(tmp_path):
    def change(text: str) -> str:
        return text.replace("requiresDuplicateDetection: true", "requiresDuplicateDetection: false", 1)

    problems = _problems_after(tmp_path, "modules/servicebus.bicep", change, bc.check_service_bus)
    assert problems == ["Service Bus queue 'agent-work': requiresDuplicateDetection must be true"]


def test_missing_result_queue_is_caught(tmp_path):
    problems = _problems_after(
        tmp_path, "modules/servicebus.bicep", _drop_resource("resultQueue"), bc.check_service_bus
    )
    assert any("'agent-results' (RESULT_QUEUE_NAME) is not created" in p for p in problems)


def test_shared_key_storage_is_caught(tmp_path):
    change = _replace("allowSharedKeyAccess: false", "allowSharedKeyAccess: true")
    problems = _problems_after(tmp_path, "modules/storage.bicep", change, bc.check_storage)
    assert problems == ["storage account storage: allowSharedKeyAccess must be False, is True"]


def test_missing_ledger_table_is_caught(tmp_path):
    problems = _problems_after(
        tmp_path, "modules/storage.bicep", _drop_resource("ledgerTable"), bc.check_storage
    )
    assert any("'StepLedger' (LEDGER_TABLE_NAME) is not created" in p for p in problems)


def test_app_insights_local_auth_is_caught(tmp_path):
    change = _replace("DisableLocalAuth: true", "DisableLocalAuth: false")
    problems = _problems_after(tmp_path, "modules/monitoring.bicep", change, bc.check_monitoring)
    assert problems == ["Application Insights appInsights: DisableLocalAuth must be true"]


def test_missing_compensation_failed_alert_is_caught(tmp_path):
    problems = _problems_after(
        tmp_path, "modules/monitoring.bicep", _drop_resource("compensationFailedAlert"), bc.check_monitoring
    )
    assert any("no alert fires on compensation_failed" in p for p in problems)


def test_wrong_plan_is_caught(tmp_path):
    change = _replace("name: 'FC1'\n    tier: 'FlexConsumption'", "name: 'Y1'\n    tier: 'Dynamic'")
    problems = _problems_after(tmp_path, "modules/function-app.bicep", change, bc.check_function_app)
    assert any("sku must be FC1 / FlexConsumption" in p for p in problems)


def test_broken_bicep_is_reported(tmp_path):
    infra = _copy(tmp_path)
    _edit(
        infra,
        "modules/servicebus.bicep",
        _replace("    disableLocalAuth: true\n", "    disableLocalAuth: = true\n"),
    )
    files, problems = bc.load(infra)
    assert len(problems) == 1
    assert problems[0].startswith("modules/servicebus.bicep: does not parse as Bicep")
    assert "modules/servicebus.bicep" not in files
    assert bc.run_all(infra) == problems


def test_param_file_with_unknown_param_is_caught(tmp_path):
    infra = _copy(tmp_path)
    _edit(infra, "main.dev.bicepparam", lambda text: text + "param storageKey = 'abc'\n")
    files, problems = bc.load(infra)
    assert problems == []
    assert bc.check_param_files(files, infra) == [
        "main.dev.bicepparam: param storageKey is not declared in main.bicep"
    ]


def test_param_file_missing_a_required_param_is_caught(tmp_path):
    infra = _copy(tmp_path)
    _edit(infra, "main.dev.bicepparam", _replace("param environmentName = 'dev'\n", ""))
    files, _ = bc.load(infra)
    assert bc.check_param_files(files, infra) == [
        "main.dev.bicepparam: required param environmentName has no value"
    ]


def test_unused_param_is_caught(tmp_path):
    change = _replace("param tags object = {}\n", "param tags object = {}\n\nparam leftover string = 'x'\n")
    problems = _problems_after(tmp_path, "modules/identity.bicep", change, bc.check_no_unused_declarations)
    assert problems == ["modules/identity.bicep: param leftover is never used"]
