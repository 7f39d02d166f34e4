"""The layers read from the folders: the core package imports no role and no tool.

``workflow_core`` is the floor (ledger, transport, definitions, settings, telemetry, contracts); the
roles (``orchestrators``, ``activities``, ``supervisor``, ``api``) stand on it; the tools that compose
roles (``devtools``, ``operator_cli``) stand on top. An import that reaches upward, at module level or
hidden inside a function, would make the floor depend on what stands on it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROLES = {"activities", "orchestrators", "supervisor", "api"}
TOOLS = {"agent_runner", "devtools", "operator_cli"}


def _imported_packages(path: Path) -> set[tuple[str, int]]:
    """Top-level package names imported anywhere in ``path`` (inside functions too), with lines."""
    found: set[tuple[str, int]] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {(alias.name.split(".")[0], node.lineno) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add((node.module.split(".")[0], node.lineno))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add((node.args[0].value.split(".")[0], node.lineno))
    return found


def _violations(package: str, forbidden: set[str]) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for name, line in sorted(_imported_packages(path))
        if name in forbidden
    ]


def test_the_core_imports_no_role_and_no_tool() -> None:
    assert _violations("workflow_core", ROLES | TOOLS) == []


@pytest.mark.parametrize("role", sorted(ROLES))
def test_a_role_imports_no_tool(role: str) -> None:
    assert _violations(role, TOOLS) == []


def test_the_walk_sees_imports_inside_functions(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import os\n\ndef f():\n    from supervisor import operator\n    import api.handlers\n"
        "    importlib.import_module('activities.worker.agent_worker')\n"
    )
    names = {name for name, _ in _imported_packages(module)}
    assert {"supervisor", "api", "activities", "os"} <= names


# The ledger's tables have one owner (workflow_core/ledger/families.py): roles and tools reach them
# through the ledger's methods and the typed stores on Services, never through a raw table client
# or a private attribute of the ledger.


def _raw_table_access(path: Path, root: Path = ROOT) -> list[str]:
    """``x.table_client()`` calls and ``<...ledger>._private`` attributes in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        if call and node.func.attr == "table_client":
            found.append(f"{path.relative_to(root)}:{node.lineno} calls .table_client()")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = node.value
            name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
            if name.lower().endswith("ledger"):
                found.append(f"{path.relative_to(root)}:{node.lineno} reads {name}.{node.attr}")
    return found


def test_no_role_or_tool_touches_the_ledgers_tables_directly() -> None:
    violations = [
        v
        for package in sorted(ROLES | TOOLS)
        for path in sorted((ROOT / package).rglob("*.py"))
        for v in _raw_table_access(path)
    ]
    assert violations == []


def test_the_table_access_check_sees_both_shapes(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "def f(services, ledger):\n    services.ledger.table_client()\n    ledger._steps.query()\n"
    )
    assert len(_raw_table_access(module, tmp_path)) == 2
