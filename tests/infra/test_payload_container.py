"""Offline checks of the large-payload container in infra/: the container the app's
PAYLOAD_CONTAINER_NAME names exists, private; a lifecycle rule deletes its blobs a retention period
after their last write, that period a parameter whose default outlives any workflow; and the app's
identity may read and write blobs there (Storage Blob Data Contributor on that container only, checked
with the other roles by ``bicep_checks.check_role_assignments``). Each check fails on a broken copy."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from tests.infra import bicep_checks as bc
from tests.infra.test_bicep_structure import _drop_resource, _edit, _replace
from workflow_core import settings as app_settings

CONTAINER = "Microsoft.Storage/storageAccounts/blobServices/containers"
POLICY = "Microsoft.Storage/storageAccounts/managementPolicies"
MIN_RETENTION_DAYS = 30  # longer than any workflow here runs, with its retries, resumes and compensation


def check_payload_container(files: dict[str, bc.BicepFile]) -> list[str]:
    resolver = bc.Resolver(files)
    name = app_settings.DOCUMENTED_SETTINGS["PAYLOAD_CONTAINER_NAME"]
    problems = []
    containers = {resolver.value(r.file, r.config.get("name")): r for r in bc.declared(files, CONTAINER)}
    container = containers.get(name)
    if container is None:
        problems.append(
            f"blob container {name!r} (PAYLOAD_CONTAINER_NAME) is not created (have {sorted(containers)})"
        )
    elif resolver.value(container.file, container.properties.get("publicAccess")) != "None":
        problems.append(f"blob container {name!r} must not allow public access")
    rules = [
        (policy.file, rule)
        for policy in bc.declared(files, POLICY)
        for rule in (resolver.value(policy.file, policy.properties.get("policy")) or {}).get("rules") or []
    ]
    deleting = [rule for file, rule in rules if _deletes_payloads(rule, name, resolver, file)]
    if not deleting:
        problems.append(f"no enabled lifecycle rule deletes the blobs of {name!r} after their last write")
    for rule in deleting:
        days = rule["definition"]["actions"]["baseBlob"]["delete"]["daysAfterModificationGreaterThan"]
        if not isinstance(days, int) or days < MIN_RETENTION_DAYS:
            problems.append(
                f"lifecycle rule {rule.get('name')!r} deletes payloads after {days!r} days; a workflow "
                f"or its operator may need them longer (at least {MIN_RETENTION_DAYS})"
            )
    return problems


def _interpolated(text: Any, resolver: bc.Resolver, file: str) -> Any:
    """``'${param}/'`` with each ``${name}`` replaced by what the resolver makes of it."""
    if not isinstance(text, str):
        return text
    return re.sub(r"\$\{(\w+)\}", lambda m: str(resolver.value(file, m.group(1))), text)


def _deletes_payloads(rule: Any, container: str, resolver: bc.Resolver, file: str) -> bool:
    try:
        definition = rule["definition"]
        delete = definition["actions"]["baseBlob"]["delete"]
        prefixes = [_interpolated(p, resolver, file) for p in definition["filters"]["prefixMatch"]]
    except (KeyError, TypeError):
        return False
    return (
        rule.get("enabled") is True
        and rule.get("type") == "Lifecycle"
        and f"{container}/" in prefixes
        and "daysAfterModificationGreaterThan" in delete
    )


def _problems_after(tmp_path: Path, rel: str, change, check) -> list[str]:
    infra = tmp_path / "infra"
    shutil.copytree(bc.INFRA_DIR, infra, ignore=shutil.ignore_patterns("*.sh"))
    _edit(infra, rel, change)
    files, problems = bc.load(infra)
    assert problems == [], problems
    return check(files)


def test_the_payload_container_and_its_lifecycle_rule_are_provisioned():
    files, problems = bc.load()
    assert problems == []
    assert check_payload_container(files) == []


def test_the_retention_default_is_a_parameter_documented_with_its_reason():
    text = (bc.INFRA_DIR / "main.bicep").read_text(encoding="utf-8")
    assert "param payloadRetentionDays int = 90" in text
    assert "outlive the longest-running workflow" in text


def test_a_missing_payload_container_is_caught(tmp_path):
    found = _problems_after(
        tmp_path, "modules/storage.bicep", _drop_resource("payloadContainer"), check_payload_container
    )
    assert len(found) == 1
    assert found[0].startswith("blob container 'sas-payloads' (PAYLOAD_CONTAINER_NAME) is not created")


def test_a_missing_lifecycle_rule_is_caught(tmp_path):
    found = _problems_after(
        tmp_path, "modules/storage.bicep", _drop_resource("lifecycle"), check_payload_container
    )
    assert found == ["no enabled lifecycle rule deletes the blobs of 'sas-payloads' after their last write"]


def test_a_retention_shorter_than_a_workflow_may_need_is_caught(tmp_path):
    found = _problems_after(
        tmp_path,
        "main.bicep",
        _replace("param payloadRetentionDays int = 90", "param payloadRetentionDays int = 7"),
        check_payload_container,
    )
    assert found == [
        "lifecycle rule 'delete-old-payloads' deletes payloads after 7 days; a workflow or its operator "
        "may need them longer (at least 30)"
    ]


def test_a_payload_role_on_the_whole_account_is_caught(tmp_path):
    found = _problems_after(
        tmp_path,
        "modules/role-assignments.bicep",
        _replace("  scope: payloadContainer\n", "  scope: storage\n"),
        bc.check_role_assignments,
    )
    assert found == [
        "modules/role-assignments.bicep: role assignment payloadBlobDataContributor: Storage Blob Data "
        "Contributor must be scoped to a Microsoft.Storage/storageAccounts/blobServices/containers resource, "
        "is scoped to storage",
        "missing role assignment: Storage Blob Data Contributor (ba92f5b4-2d11-453d-a403-e96b0029c9fe) "
        "on the Microsoft.Storage/storageAccounts/blobServices/containers",
    ]


def test_a_missing_payload_role_is_caught(tmp_path):
    found = _problems_after(
        tmp_path,
        "modules/role-assignments.bicep",
        _drop_resource("payloadBlobDataContributor"),
        bc.check_role_assignments,
    )
    assert found == [
        "missing role assignment: Storage Blob Data Contributor (ba92f5b4-2d11-453d-a403-e96b0029c9fe) "
        "on the Microsoft.Storage/storageAccounts/blobServices/containers"
    ]
