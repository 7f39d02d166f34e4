"""The ledger's layout has one owner (workflow_core/ledger/families.py): every family has a purge
rule, no module declares a ``~`` key of its own, and the purge deletes every family outside an
instance's partition by its name in the registry."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from workflow_core.ledger import families
from workflow_core.ledger.families import FAMILIES, Family, Purge
from workflow_core.ledger.purge import PURGERS

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "workflow_core",
    "activities",
    "orchestrators",
    "supervisor",
    "api",
    "devtools",
    "operator_cli",
    "agent_runner",
)


def test_a_family_without_a_purge_rule_cannot_be_declared():
    with pytest.raises(ValueError, match="needs a purge rule"):
        Family("orphans", "ledger", "~orphans", "<id>", "someone", Purge.PARTITION, " ")
    with pytest.raises(ValueError, match="needs a purge rule"):
        Family("orphans", "ledger", "~orphans", "<id>", "someone", "whenever", "because")  # type: ignore[arg-type]
    assert all(f.rule.strip() and isinstance(f.purge, Purge) for f in FAMILIES)


def _tilde_keys(path: Path, root: Path = ROOT) -> list[str]:
    """Module-level constants whose value is a ``~`` key (a partition or row-key family)."""
    found = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value.startswith("~"):
            found.append(f"{path.relative_to(root)}:{node.lineno} {value.value!r}")
    return found


def test_no_module_declares_a_ledger_key_family_outside_the_registry():
    owner = Path(families.__file__).resolve()
    declared = [
        key
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.resolve() != owner
        for key in _tilde_keys(path)
    ]
    assert declared == [], "declare the family in workflow_core/ledger/families.py, with its purge rule"


def test_the_check_sees_a_new_family(tmp_path):
    module = tmp_path / "feature.py"
    module.write_text('NOTES_PARTITION = "~notes"\nOTHER = "plain"\n')
    assert _tilde_keys(module, tmp_path) == ["feature.py:1 '~notes'"]


def test_the_purge_deletes_every_family_outside_the_partition_by_its_name():
    outside = {f.name for f in FAMILIES if f.purge in (Purge.POINTED, Purge.NAMED)}
    assert set(PURGERS) == outside


def test_operations_md_shows_the_instance_state_table_as_the_code_decides_it():
    from workflow_core.ledger.instance_state import Action, decision_table

    actions = [a.value for a in Action]
    lines = [f"| instance status | {' | '.join(actions)} |", "|---|" + "---|" * len(actions)]
    lines += [f"| {status} | {' | '.join(cells[a] for a in actions)} |" for status, cells in decision_table()]
    assert "\n".join(lines) in (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
