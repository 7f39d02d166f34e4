"""Every resource name the template builds, for environment names azd accepts but Azure's naming rules
refuse (``dev_1``, ``a.b``, 64 characters, upper case, parentheses), checked offline against each
resource type's rules (Microsoft Learn, "Naming rules and restrictions for Azure resources").

No Bicep compiler runs here, so the names are evaluated from main.bicep's own expressions by a small
evaluator of the functions they use (interpolation, toLower, replace, take, empty, uniqueString and
the conditional operator); an expression it does not know fails the test rather than being guessed.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.infra import bicep_checks as bc
from tests.infra.pool_checks import PoolEvaluator

TOKEN = "a1b2c3d4e5f6g"  # uniqueString(): 13 lower-case letters and digits

# prefix of the name in main.bicep -> (resource, min, max, allowed pattern, first, last)
RULES: dict[str, tuple[str, int, int, str, str, str]] = {
    "func-": ("Microsoft.Web/sites", 2, 60, r"[a-z0-9-]+", r"[a-z0-9]", r"[a-z0-9]"),
    "plan-": ("Microsoft.Web/serverfarms", 1, 60, r"[a-zA-Z0-9-]+", r"[a-zA-Z0-9]", r"[a-zA-Z0-9]"),
    "sb-": ("Microsoft.ServiceBus/namespaces", 6, 50, r"[a-zA-Z0-9-]+", r"[a-zA-Z]", r"[a-zA-Z0-9]"),
    "log-": (
        "Microsoft.OperationalInsights/workspaces",
        4,
        63,
        r"[a-zA-Z0-9-]+",
        r"[a-zA-Z0-9]",
        r"[a-zA-Z0-9]",
    ),
    "appi-": ("Microsoft.Insights/components", 1, 260, r"[^%&\\?/]+", r".", r"[^ .]"),
    "id-": (
        "Microsoft.ManagedIdentity/userAssignedIdentities",
        3,
        128,
        r"[a-zA-Z0-9_-]+",
        r"[a-zA-Z0-9]",
        r".",
    ),
    # Container Apps environment of the containerApp agent pools (agent-pool-containerapp.bicep)
    "cae-": (
        "Microsoft.App/managedEnvironments",
        2,
        60,
        r"[a-z0-9-]+",
        r"[a-z]",
        r"[a-z0-9]",
    ),
    "dts-": ("Microsoft.DurableTask/schedulers", 3, 64, r"[a-zA-Z0-9-]+", r"[a-zA-Z0-9]", r"[a-zA-Z0-9]"),
    "alert-": ("Microsoft.Insights/metricAlerts", 1, 260, r"[^*#&+:<>?@%{}\\/]+", r".", r"[^ .]"),
    "st": ("Microsoft.Storage/storageAccounts", 3, 24, r"[a-z0-9]+", r"[a-z0-9]", r"[a-z0-9]"),
    "app-package-": ("blob container", 3, 63, r"[a-z0-9-]+", r"[a-z0-9]", r"[a-z0-9]"),
}
NASTY = ["dev", "dev_1", "a.b", "x" * 64, "UPPERCASE", "feature(1)", "a-b-c", "--", "Prod.EU_west(2)"]


def names_in_main(main: bc.BicepFile) -> list[Any]:
    """Every name expression of main.bicep built from the environment: variables and module
    parameters whose text starts with a known prefix."""
    found = [
        v["value"] for k, v in main.section("variables").items() if k.endswith("Name") and k != "baseName"
    ]
    for _path, params, _condition in bc.modules_of(main).values():
        found += [value for key, value in params.items() if key == "name" or key.endswith("Name")]
    return [f for f in found if isinstance(f, str | dict) and "resourceToken" in str(f)]


@pytest.mark.parametrize("environment", NASTY)
def test_every_resource_name_follows_its_rules_for_any_environment_name_azd_accepts(environment):
    files, problems = bc.load()
    assert problems == []
    main = files["main.bicep"]
    declared = main.section("parameters")["environmentName"]
    assert "64" in str(declared.get("decorators"))  # azd's own limit, not a tighter one
    evaluator = PoolEvaluator(files, environment=environment)
    checked = set()
    for expr in names_in_main(main):
        name = evaluator.value(expr)
        prefix = next((p for p in sorted(RULES, key=len, reverse=True) if name.startswith(p)), None)
        assert prefix is not None, f"no naming rule for {name!r}"
        resource, low, high, allowed, first, last = RULES[prefix]
        assert low <= len(name) <= high, (resource, name, len(name))
        assert re.fullmatch(allowed, name), (resource, name)
        assert re.fullmatch(first, name[0]) and re.fullmatch(last, name[-1]), (resource, name)
        assert "--" not in name or prefix in ("appi-", "alert-", "id-"), (resource, name)
        checked.add(prefix)
    assert checked >= {"func-", "plan-", "sb-", "log-", "appi-", "id-", "st", "app-package-"}, checked


def test_the_raw_environment_name_reaches_no_resource_name():
    files, _ = bc.load()
    main = files["main.bicep"]
    for expr in names_in_main(main):
        assert "environmentName" not in str(expr), expr
    assert "environmentName" not in str(main.section("variables")["baseName"]["value"])
