"""docs/operations.md says a purge leaves payload blobs to the container's lifecycle rule; the rule it
names must be the one infra/ provisions, over the whole payload container."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_lifecycle_rule_operations_md_names_is_provisioned_over_the_payload_container():
    docs = " ".join((ROOT / "docs" / "operations.md").read_text(encoding="utf-8").split())
    bicep = (ROOT / "infra" / "modules" / "storage.bicep").read_text(encoding="utf-8")
    assert "A purge leaves the instance's large payload blobs in place, by design" in docs
    for quoted in ("delete-old-payloads", "prefixMatch: ['${payloadContainerName}/']"):
        assert quoted in docs
    rule = bicep[bicep.index("name: 'delete-old-payloads'") :]
    rule = rule[: rule.index("\n      ]")]
    assert re.search(r"enabled: true", rule)
    assert re.search(r"prefixMatch: \[\s*'\$\{payloadContainerName\}/'\s*\]", rule)
    assert re.search(r"delete: \{\s*daysAfterModificationGreaterThan: payloadRetentionDays\s*\}", rule)
    main = (ROOT / "infra" / "main.bicep").read_text(encoding="utf-8")
    assert "payloadRetentionDays: payloadRetentionDays" in main
    assert re.search(r"param payloadRetentionDays int = 90", main) and "(90 days by default" in docs
