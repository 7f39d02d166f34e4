"""Which API version of a resource type first has a property the Bicep uses, with the source that says so.

ARM ignores (or refuses) a property the declared API version does not know: a Bicep file that uses a
property newer than its ``@<api-version>`` deploys without it (the KEDA rule's ``identity`` on
``Microsoft.App/containerApps@2024-03-01`` is silently dropped, and the pool never scales from 0). Each
row: (resource type, property path) -> (first API version that has it, where that is written). A path
is the resource body's keys from the top, ``[]`` for any list item. Versions compare as ISO dates
(a ``-preview`` suffix sorts after its date, which is what ARM means too).
"""

from __future__ import annotations

SPECS = "Azure/azure-rest-api-specs"

FIRST_VERSION: dict[tuple[str, str], tuple[str, str]] = {
    ("Microsoft.App/containerApps", "properties.template.scale.rules[].custom.identity"): (
        "2025-01-01",
        f"{SPECS} specification/app/resource-manager/Microsoft.App/stable/2025-01-01/CommonDefinitions.json"
        " (CustomScaleRule.identity; no such property in stable/2024-03-01)",
    ),
    ("Microsoft.Web/sites", "properties.functionAppConfig"): (
        "2023-12-01",
        f"{SPECS} specification/web/resource-manager/Microsoft.Web/stable/2023-12-01/CommonDefinitions.json"
        " (SiteProperties.functionAppConfig: Flex Consumption)",
    ),
    ("Microsoft.Web/sites/config", "properties.globalValidation.excludedPaths"): (
        "2020-06-01",
        f"{SPECS} specification/web/resource-manager/Microsoft.Web/stable/2020-06-01/WebApps.json"
        " (SiteAuthSettingsV2 GlobalValidation.excludedPaths)",
    ),
}


def paths(value: object, prefix: str = "") -> set[str]:
    """Every key path in a resource body (``[]`` for a list item)."""
    found: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                continue
            path = f"{prefix}.{key}" if prefix else key
            found.add(path)
            found |= paths(item, path)
    elif isinstance(value, list):
        for item in value:
            found |= paths(item, f"{prefix}[]")
    return found


def problems(resources: list[tuple[str, str, str, dict]]) -> list[str]:
    """``resources``: (where, type, api version, body). A property used below its first version."""
    result = []
    for where, rtype, version, body in resources:
        used = paths(body)
        for (table_type, path), (first, source) in FIRST_VERSION.items():
            if table_type.lower() == rtype.lower() and path in used and version < first:
                result.append(f"{where}: {rtype}@{version} has no {path} (first in {first}: {source})")
    return result
