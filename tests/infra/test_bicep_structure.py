"""Offline validation of infra/*.bicep: it parses, declares what the app needs, wires every app setting
the code reads, grants least-privilege roles on the right scopes, and leaks no secret.

No Bicep compiler or Azure is needed (see bicep_checks.py). The mutation tests at the bottom prove that
each check really fails when the templates are broken the way it guards against.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.infra import bicep_checks as bc
from workflow_core import settings as app_settings

# The built-in role definition ids, as published in Azure's built-in roles reference.
BUILT_IN_ROLE_IDS = {
    "Azure Service Bus Data Owner": "090c5cfd-751d-490a-894a-3ce6f1109419",
    "Azure Service Bus Data Receiver": "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0",
    "Azure Service Bus Data Sender": "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39",
    "Storage Blob Data Owner": "b7e6dc6d-f1e8-4753-8033-0f276bb0955b",
    "Storage Blob Data Contributor": "ba92f5b4-2d11-453d-a403-e96b0029c9fe",
    "Storage Queue Data Contributor": "974c5e8b-45b9-4653-ba55-5f855dd0fb88",
    "Storage Table Data Contributor": "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3",
    "Monitoring Metrics Publisher": "3913510d-42f4-4e42-8a64-420c390055eb",
    "Durable Task Data Contributor": "0ad04412-c4d5-4796-b79c-f76d14c8d402",
    "Reader": "acdd72a7-3385-48ef-bd42-f606fba81ae7",
}
SERVICE_BUS_DATA_OWNER = BUILT_IN_ROLE_IDS["Azure Service Bus Data Owner"]


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
    roles = {**bc.REQUIRED_ROLES, **bc.OPTIONAL_ROLES, **bc.OPERATOR_ROLES}
    assert {name: guid for guid, (name, _scope) in roles.items()} == BUILT_IN_ROLE_IDS
    text = "".join(
        (bc.INFRA_DIR / "modules" / name).read_text(encoding="utf-8")
        for name in ("role-assignments.bicep", "durable-task-scheduler.bicep")
    )
    for guid in BUILT_IN_ROLE_IDS.values():
        assert f"'{guid}'" in text


def test_host_json(files):
    assert bc.check_host_json(bc.load_host_json()) == []


def test_service_bus_locks(files):
    assert bc.check_service_bus_locks(files) == []


def test_diagnostics_and_daily_cap(files):
    assert bc.check_diagnostics(files) == []


def test_alerts_on_stalled_instances_and_dead_lettered_results(files):
    assert bc.check_alerts(files) == []


def test_azd_conventions(files):
    assert bc.check_azd_conventions(files) == []


def test_durable_backend_choice(files):
    assert bc.check_durable_backend(files) == []


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


def test_removing_the_data_owner_role_of_a_queue_is_caught(tmp_path):
    problems = _problems_after(
        tmp_path,
        "modules/role-assignments.bicep",
        _drop_resource("resultQueueDataOwner"),
        bc.check_role_assignments,
    )
    assert problems == [
        "Azure Service Bus Data Owner of the app does not cover 'agent-results' (RESULT_QUEUE_NAME)"
    ]


def test_role_assignment_at_resource_group_scope_is_caught(tmp_path):
    rel = "modules/role-assignments.bicep"

    def unscope_owner(text: str) -> str:
        block = re.search(r"^resource workQueueDataOwner .*?^\}\n", text, re.MULTILINE | re.DOTALL)
        assert block is not None
        return text.replace(block.group(0), block.group(0).replace("  scope: workQueue\n", ""))

    problems = _problems_after(tmp_path, rel, unscope_owner, bc.check_role_assignments)
    assert any(
        "Azure Service Bus Data Owner must be scoped to a" in p and "resource group" in p for p in problems
    )


def test_data_owner_on_the_whole_namespace_is_caught(tmp_path):
    change = _replace(
        "name: guid(workQueue.id, principalId, roles.serviceBusDataOwner)\n  scope: workQueue",
        "name: guid(workQueue.id, principalId, roles.serviceBusDataOwner)\n  scope: serviceBus",
    )
    problems = _problems_after(tmp_path, "modules/role-assignments.bicep", change, bc.check_role_assignments)
    assert any(
        "Azure Service Bus Data Owner must be scoped to a Microsoft.ServiceBus/namespaces/queues" in p
        for p in problems
    )


def test_broader_operator_role_than_needed_is_caught(tmp_path):
    change = _replace("'4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0'", f"'{SERVICE_BUS_DATA_OWNER}'")
    problems = _problems_after(tmp_path, "modules/role-assignments.bicep", change, bc.check_role_assignments)
    assert any(SERVICE_BUS_DATA_OWNER in p and "least-privilege" in p and "operator" in p for p in problems)
    assert any("missing operator role assignment: Azure Service Bus Data Receiver" in p for p in problems)


def test_unconditional_operator_role_is_caught(tmp_path):
    change = _replace(
        "roleAssignments@2022-04-01' = if (hasOperator) {\n  name: guid(ledgerTable.id",
        "roleAssignments@2022-04-01' = {\n  name: guid(ledgerTable.id",
    )
    problems = _problems_after(tmp_path, "modules/role-assignments.bicep", change, bc.check_role_assignments)
    assert problems == [
        "modules/role-assignments.bicep: role assignment operatorLedgerTable: an operator role must be "
        "conditional on principalId being set",
        "Storage Table Data Contributor of the operator does not cover 'StepLedger' (LEDGER_TABLE_NAME)",
    ]


def test_operator_without_the_dead_letter_role_is_caught(tmp_path):
    problems = _problems_after(
        tmp_path,
        "modules/role-assignments.bicep",
        _drop_resource("operatorResultDeadLetters"),
        bc.check_role_assignments,
    )
    assert problems == [
        "Azure Service Bus Data Receiver of the operator does not cover 'agent-results' (RESULT_QUEUE_NAME)"
    ]


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
        "      appSettings: concat([\n",
        "      appSettings: concat([\n"
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


@pytest.mark.parametrize(
    "name", sorted(set(app_settings.DOCUMENTED_SETTINGS) - app_settings.OPTIONAL_CONNECTIONS)
)
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
        "      appSettings: concat([\n",
        "      appSettings: concat([\n"
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


# ----------------------------------------------------------------------------------------------------------
# Issue 12 fixes: each one fails when reverted
# ----------------------------------------------------------------------------------------------------------


def test_publishing_policy_without_location_is_caught(tmp_path):
    change = _replace("  name: 'ftp'\n  location: location\n", "  name: 'ftp'\n")
    problems = _problems_after(tmp_path, "modules/function-app.bicep", change, bc.check_function_app)
    assert problems == ["basicPublishingCredentialsPolicies ftpBasicAuth must set location"]


def test_ftps_state_on_flex_is_caught(tmp_path):
    change = _replace(
        "      http20Enabled: true\n", "      http20Enabled: true\n      ftpsState: 'Disabled'\n"
    )
    problems = _problems_after(tmp_path, "modules/function-app.bicep", change, bc.check_function_app)
    assert problems == ["siteConfig.ftpsState is not supported on Flex Consumption (ARM error 51021)"]


def test_ftp_skip_is_justified_in_the_bicep():
    text = (bc.INFRA_DIR / "modules" / "function-app.bicep").read_text(encoding="utf-8")
    (line,) = [line for line in text.splitlines() if "checkov:skip=CKV_AZURE_78" in line]
    assert "Flex Consumption" in line and "basicPublishingCredentialsPolicy" in line


def test_missing_durable_always_ready_is_caught(tmp_path):
    change = _replace(
        "param durableAlwaysReadyInstanceCount int = 1", "param durableAlwaysReadyInstanceCount int = 0"
    )
    problems = _problems_after(tmp_path, "main.bicep", change, bc.check_function_app)
    assert (
        len(problems) == 1 and "alwaysReady must keep at least 1 instance of the durable group" in problems[0]
    )


def test_zone_redundant_prod_with_one_always_ready_instance_is_caught(tmp_path):
    infra = _copy(tmp_path)
    _edit(
        infra,
        "main.prod.bicepparam",
        _replace("param durableAlwaysReadyInstanceCount = 2", "param durableAlwaysReadyInstanceCount = 1"),
    )
    files, _ = bc.load(infra)
    assert bc.check_param_files(files, infra) == [
        "main.prod.bicepparam: zoneRedundant needs durableAlwaysReadyInstanceCount >= 2 (the platform "
        "keeps at least two always-ready instances per scale group), is 1"
    ]


def _host_problems(tmp_path: Path, change: Callable[[dict], None]) -> list[str]:
    host = json.loads(bc.HOST_JSON.read_text(encoding="utf-8"))
    change(host)
    infra = _copy(tmp_path)
    (infra.parent / "host.json").write_text(json.dumps(host), encoding="utf-8")
    assert bc.run_all(infra) == bc.check_host_json(host), "run_all must read host.json beside infra/"
    return bc.check_host_json(host)


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("telemetryMode",), None, "telemetryMode must be 'OpenTelemetry'"),
        (
            ("extensions", "durableTask", "storageProvider", "maxQueuePollingInterval"),
            "00:00:30",
            "maxQueuePollingInterval must be at most 00:00:10",
        ),
        (
            ("extensions", "durableTask", "storageProvider", "maxQueuePollingInterval"),
            None,
            "at most 00:00:10",
        ),
        (("extensions", "serviceBus", "prefetchCount"), 16, "prefetchCount must be 0"),
        (
            ("extensions", "serviceBus", "maxAutoLockRenewalDuration"),
            "00:05:00",
            "maxAutoLockRenewalDuration must be at least functionTimeout",
        ),
        (("extensions", "durableTask", "storageProvider", "type"), "azureManaged", "must stay AzureStorage"),
    ],
)
def test_host_json_reverts_are_caught(tmp_path, path, value, expected):
    def change(host: dict) -> None:
        node = host
        for key in path[:-1]:
            node = node[key]
        if value is None:
            del node[path[-1]]
        else:
            node[path[-1]] = value

    problems = _host_problems(tmp_path, change)
    assert len(problems) == 1 and expected in problems[0], problems


def test_a_longer_function_timeout_than_the_lock_renewal_is_caught(tmp_path):
    problems = _host_problems(tmp_path, lambda host: host.update(functionTimeout="00:30:00"))
    assert problems == [
        "host.json serviceBus.maxAutoLockRenewalDuration must be at least functionTimeout "
        "('00:10:00' < '00:30:00')"
    ]


def test_short_service_bus_lock_is_caught(tmp_path):
    change = _replace(
        "param serviceBusLockDuration string = 'PT5M'", "param serviceBusLockDuration string = 'PT1M'"
    )
    problems = _problems_after(tmp_path, "main.bicep", change, bc.check_service_bus_locks)
    assert problems == [
        "Service Bus queue workQueue: lockDuration must be PT5M, is 'PT1M'",
        "Service Bus queue poolQueues: lockDuration must be PT5M, is 'PT1M'",
        "Service Bus queue answerQueues: lockDuration must be PT5M, is 'PT1M'",
        "Service Bus queue resultQueue: lockDuration must be PT5M, is 'PT1M'",
    ]


def test_duration_parsers():
    assert (
        bc.iso_seconds("PT5M") == 300 and bc.iso_seconds("P1DT1H") == 90000 and bc.iso_seconds("PT") is None
    )
    assert bc.timespan_seconds("00:10:00") == 600 and bc.timespan_seconds("1.00:00:01") == 86401
    assert bc.timespan_seconds("10m") is None


@pytest.mark.parametrize(
    ("before", "after", "shown"),
    [
        ("    category: 'StorageWrite'\n", "    categoryGroup: 'allLogs'\n", "['StorageDelete', 'allLogs']"),
        (
            "    category: 'StorageWrite'\n",
            "    category: 'StorageRead'\n",
            "['StorageDelete', 'StorageRead']",
        ),
    ],
    ids=["a category group", "StorageRead"],
)
def test_storage_logs_other_than_writes_and_deletes_are_caught(tmp_path, before, after, shown):
    problems = _problems_after(
        tmp_path, "modules/storage.bicep", _replace(before, after), bc.check_diagnostics
    )
    assert len(problems) == 3  # the blob, queue and table services share the list
    assert problems[0] == (
        "diagnostic setting blobDiagnostics (blobService): storage logs must list the categories "
        f"StorageWrite and StorageDelete (no category group, no StorageRead), are {shown}"
    )


def test_missing_daily_cap_is_caught(tmp_path):
    change = _replace("    workspaceCapping: {\n      dailyQuotaGb: dailyQuotaGb\n    }\n", "")
    problems = _problems_after(tmp_path, "modules/monitoring.bicep", change, bc.check_diagnostics)
    assert problems == ["Log Analytics workspace: workspaceCapping.dailyQuotaGb must be > 0, is None"]


def test_missing_stalled_instances_alert_is_caught(tmp_path):
    problems = _problems_after(
        tmp_path, "modules/monitoring.bicep", _drop_resource("stalledInstancesAlert"), bc.check_alerts
    )
    assert problems == ["no alert on stalled instances (customEvents named sas.instance_stalled)"]


def test_missing_dead_lettered_results_alert_is_caught(tmp_path):
    change = _replace("                resultQueueName\n", "                'agent-work'\n")
    problems = _problems_after(tmp_path, "modules/servicebus-alerts.bicep", change, bc.check_alerts)
    assert problems == [
        "no metric alert on DeadletteredMessages of the results queue 'agent-results' (GreaterThan 0)"
    ]


def test_workbook_source_id_not_lower_cased_is_caught(tmp_path):
    change = _replace("sourceId: toLower(appInsights.id)", "sourceId: appInsights.id")
    problems = _problems_after(tmp_path, "modules/monitoring.bicep", change, bc.check_alerts)
    assert problems == ["workbook workbook: sourceId must be toLower(<component>.id), is appInsights.id"]


def test_local_settings_example_has_no_worker_indexing_flag():
    values = json.loads((bc.INFRA_DIR.parent / "local.settings.json.example").read_text(encoding="utf-8"))
    assert "AzureWebJobsFeatureFlags" not in values["Values"]


def test_missing_azd_env_name_tag_is_caught(tmp_path):
    change = _replace("  'azd-env-name': environmentName\n", "")
    infra = _copy(tmp_path)
    _edit(infra, "main.bicep", change)
    files, _ = bc.load(infra)
    problems = bc.check_azd_conventions(files, infra)
    assert len(problems) == 1 and "azd-env-name" in problems[0]


def test_principal_id_not_mapped_for_azd_is_caught(tmp_path):
    infra = _copy(tmp_path)
    _edit(infra, "main.parameters.json", _replace('"${AZURE_PRINCIPAL_ID}"', '""'))
    files, _ = bc.load(infra)
    assert bc.check_azd_conventions(files, infra) == [
        "main.parameters.json must map principalId to ${AZURE_PRINCIPAL_ID}"
    ]


def test_durable_task_scheduler_by_default_is_caught(tmp_path):
    change = _replace(
        "param durableBackend string = 'AzureStorage'", "param durableBackend string = 'DurableTaskScheduler'"
    )
    problems = _problems_after(tmp_path, "main.bicep", change, bc.check_durable_backend)
    assert problems == [
        "main.bicep: param durableBackend must default to 'AzureStorage', is 'DurableTaskScheduler'"
    ]


def test_unconditional_durable_task_scheduler_is_caught(tmp_path):
    change = _replace(
        "module durableTaskScheduler 'modules/durable-task-scheduler.bicep' = if (useDurableTaskScheduler) {",
        "module durableTaskScheduler 'modules/durable-task-scheduler.bicep' = {",
    )
    problems = _problems_after(tmp_path, "main.bicep", change, bc.check_durable_backend)
    assert problems == ["main.bicep: the Durable Task Scheduler module must be conditional on durableBackend"]


def test_durable_task_scheduler_without_its_connection_is_caught(tmp_path):
    problems = _problems_after(
        tmp_path,
        "modules/function-app.bicep",
        _drop_app_setting("DURABLE_TASK_SCHEDULER_CONNECTION_STRING"),
        bc.check_durable_backend,
    )
    assert problems == [
        "DURABLE_TASK_SCHEDULER_CONNECTION_STRING must be set, only with the Durable Task Scheduler"
    ]


def test_durable_task_scheduler_without_its_role_is_caught(tmp_path):
    problems = _problems_after(
        tmp_path,
        "modules/durable-task-scheduler.bicep",
        _drop_resource("durableTaskDataContributorRole"),
        bc.check_role_assignments,
    )
    assert problems == [
        "missing role assignment: Durable Task Data Contributor on the Durable Task Scheduler"
    ]


def test_the_worker_owns_telemetry(tmp_path):
    """Without PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY the worker neither creates its trace-context
    propagator nor configures azure-monitor: the host's request span never reaches Python."""
    problems = _problems_after(
        tmp_path,
        "modules/function-app.bicep",
        _drop_app_setting("PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY"),
        bc.check_app_settings,
    )
    assert any("PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY must be 'true'" in p for p in problems), problems


def test_the_null_propagator_setting_is_refused(tmp_path):
    """PYTHON_ENABLE_OPENTELEMETRY alone leaves the worker's propagator None (issue 1881)."""
    change = _replace(
        "      appSettings: concat([\n",
        "      appSettings: concat([\n"
        "        {\n"
        "          name: 'PYTHON_ENABLE_OPENTELEMETRY'\n"
        "          value: 'true'\n"
        "        }\n",
    )
    problems = _problems_after(tmp_path, "modules/function-app.bicep", change, bc.check_app_settings)
    assert any("PYTHON_ENABLE_OPENTELEMETRY marks OpenTelemetry on" in p for p in problems), problems


def test_an_app_setting_overriding_host_jsons_durable_backend_is_caught(tmp_path):
    """The scale controller reads the backend from host.json only (issue on the Durable extension):
    an override in app settings is a second source it never sees."""
    change = _replace(
        "      appSettings: concat([\n",
        "      appSettings: concat([\n"
        "        {\n"
        "          name: 'AzureFunctionsJobHost__extensions__durableTask__storageProvider__type'\n"
        "          value: 'azureManaged'\n"
        "        }\n",
    )
    problems = _problems_after(tmp_path, "modules/function-app.bicep", change, bc.check_durable_backend)
    assert any("overrides host.json's Durable backend" in p for p in problems), problems


def test_the_operator_without_the_schedulers_dashboard_role_is_caught(tmp_path):
    problems = _problems_after(
        tmp_path,
        "modules/durable-task-scheduler.bicep",
        _drop_resource("operatorDashboardRole"),
        bc.check_role_assignments,
    )
    assert problems == [
        "missing operator role assignment: Durable Task Data Reader on the Durable Task Scheduler "
        "(its dashboard)"
    ]


def test_the_schedulers_ip_allow_list_is_a_parameter(files):
    scheduler = bc.declared(files, "Microsoft.DurableTask/schedulers")[0]
    assert scheduler.properties.get("ipAllowlist") == "ipAllowlist"
    assert "durableTaskSchedulerIpAllowlist" in files["main.bicep"].section("parameters")


@pytest.mark.parametrize(
    ("symbol", "where"),
    [
        ("namespaceReader", "Microsoft.ServiceBus/namespaces"),
        ("storageReader", "Microsoft.Storage/storageAccounts"),
        ("appInsightsReader", "Microsoft.Insights/components"),
    ],
)
def test_each_reader_doctor_reads_role_assignments_with_is_required(tmp_path, symbol, where):
    """Without Reader there, `sas doctor` cannot read back the roles infra granted on that resource."""
    problems = _problems_after(
        tmp_path, "modules/role-assignments.bicep", _drop_resource(symbol), bc.check_role_assignments
    )
    assert problems == [f"missing role assignment: Reader ({bc.READER}) on the {where}"]
