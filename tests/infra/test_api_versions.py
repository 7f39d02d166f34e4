"""No Bicep resource uses a property its declared API version lacks (api_version_properties.py)."""

from __future__ import annotations

from tests.infra import api_version_properties as avp
from tests.infra import bicep_checks as bc


def _declared(files) -> list[tuple[str, str, str, dict]]:
    result = []
    for bicep in files.values():
        for symbol, resource in bicep.section("resources").items():
            if resource.get("existing"):
                continue
            body, _condition = bc._unwrap(resource.get("config"))
            where = f"{bicep.rel}: {symbol}"
            result.append((where, resource.get("type", ""), resource.get("api_version", ""), body))
    return result


def test_every_property_exists_in_its_api_version():
    files, load_problems = bc.load()
    assert load_problems == []
    declared = _declared(files)
    assert declared and all(version for _w, _t, version, _b in declared)
    assert avp.problems(declared) == []


def test_every_table_row_is_used_and_sourced():
    """A row nobody uses is stale; each row names the file it came from."""
    files, _ = bc.load()
    used = {(t.lower(), p) for _w, t, _v, body in _declared(files) for p in avp.paths(body)}
    for (rtype, path), (first, source) in avp.FIRST_VERSION.items():
        assert (rtype.lower(), path) in used, (rtype, path)
        assert avp.SPECS in source and first in source


def test_the_keda_identity_on_2024_03_01_is_caught():
    files, _ = bc.load()
    apps = "Microsoft.App/containerApps"
    downgraded = [(w, t, "2024-03-01" if t == apps else v, b) for w, t, v, b in _declared(files)]
    found = avp.problems(downgraded)
    assert any("custom.identity (first in 2025-01-01" in p for p in found), found
