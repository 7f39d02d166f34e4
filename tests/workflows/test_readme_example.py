"""The schema example in workflows/README.md is a valid definition (docs that cannot rot)."""

from __future__ import annotations

import re

from workflow_core.workflows import DEFAULT_DIRECTORY, parse_workflow


def test_readme_schema_example_parses():
    text = (DEFAULT_DIRECTORY / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
    definition = parse_workflow(block, source="README.md")
    assert definition.name == "provision-tenant"
    assert definition.steps[0].retry.max_interval_seconds == 300
    assert definition.validate_input({"tenant_id": "t"}) == {"tenant_id": "t", "region": "westeurope"}
