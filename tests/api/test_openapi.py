"""docs/openapi.yaml documents exactly the routes the blueprint registers, and is self-consistent."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import azure.durable_functions as df
import azure.functions as func
import pytest
import yaml

import api

REPO = Path(__file__).resolve().parents[2]
HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}
PLACEHOLDER = re.compile(r"\{([^}]+)\}")


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return yaml.safe_load((REPO / "docs" / "openapi.yaml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def route_prefix() -> str:
    """host.json's ``extensions.http.routePrefix`` (the Functions default is ``api``)."""
    host = json.loads((REPO / "host.json").read_text(encoding="utf-8"))
    prefix = host.get("extensions", {}).get("http", {}).get("routePrefix", "api")
    return f"/{prefix}" if prefix else ""


@pytest.fixture(scope="module")
def registered(route_prefix) -> dict[tuple[str, str], list[str]]:
    """(normalised path, method) -> route parameter names, for every HTTP function of the blueprint."""
    app = df.DFApp(http_auth_level=func.AuthLevel.FUNCTION)
    app.register_blueprint(api.blueprint)
    found: dict[tuple[str, str], list[str]] = {}
    for function in app.get_functions():
        trigger = function.get_trigger()
        path = f"{route_prefix}/{trigger.route}"
        for method in trigger.methods:
            found[(normalise(path), method.value.lower())] = PLACEHOLDER.findall(path)
    return found


def normalise(path: str) -> str:
    # OpenAPI treats /a/{x} and /a/{y} as the same path (and forbids listing both), so compare shapes.
    return PLACEHOLDER.sub("{}", path)


def documented(spec) -> dict[tuple[str, str], tuple[str, dict[str, Any]]]:
    return {
        (normalise(path), method): (path, operation)
        for path, item in spec["paths"].items()
        for method, operation in item.items()
        if method in HTTP_METHODS
    }


def test_every_registered_route_is_documented_and_vice_versa(spec, registered):
    assert set(registered) == set(documented(spec))


def test_path_parameters_match_the_templates(spec, registered):
    for key, (path, operation) in documented(spec).items():
        declared = [
            p["name"]
            for p in [*spec["paths"][path].get("parameters", []), *operation.get("parameters", [])]
            if p.get("in") == "path"
        ]
        assert sorted(declared) == sorted(PLACEHOLDER.findall(path)), (path, key[1])
        assert len(declared) == len(registered[key]), (path, key[1])


def test_operations_need_a_function_key(spec):
    schemes = spec["components"]["securitySchemes"]
    assert {(s["type"], s["in"], s["name"]) for s in schemes.values()} == {
        ("apiKey", "query", "code"),
        ("apiKey", "header", "x-functions-key"),
    }
    assert spec["security"], "a global security requirement is expected"
    anonymous = {op["operationId"] for _, op in documented(spec).values() if op.get("security") == []}
    assert anonymous == {"console"}, "only the console's static files are anonymous"


def test_the_anonymous_operation_is_the_anonymous_route():
    app = df.DFApp(http_auth_level=func.AuthLevel.FUNCTION)
    app.register_blueprint(api.blueprint)
    anonymous = [
        f.get_trigger().route
        for f in app.get_functions()
        if f.get_trigger().auth_level == func.AuthLevel.ANONYMOUS
    ]
    assert anonymous == ["console/{*path}"]


def test_every_error_response_is_a_problem(spec):
    def content_of(response):
        if "$ref" in response:
            response = spec["components"]["responses"][response["$ref"].rsplit("/", 1)[-1]]
        return response.get("content", {})

    for _, operation in documented(spec).values():
        for status, response in operation["responses"].items():
            if int(status) >= 400:
                assert set(content_of(response)) == {"application/problem+json"}, (
                    operation["operationId"],
                    status,
                )


def test_operations_have_unique_ids_and_json_responses(spec):
    ids = [operation["operationId"] for _, operation in documented(spec).values()]
    assert len(ids) == len(set(ids))
    for _, operation in documented(spec).values():
        assert operation["responses"], operation["operationId"]


def test_every_reference_resolves(spec):
    def resolve(ref: str) -> Any:
        assert ref.startswith("#/"), ref
        node: Any = spec
        for part in ref[2:].split("/"):
            assert part in node, f"unresolved $ref {ref}"
            node = node[part]
        return node

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "$ref" in node:
                resolve(node["$ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    assert spec["openapi"].startswith("3.0.")
    walk(spec)


def test_the_document_passes_an_openapi_validator(spec):
    validator = pytest.importorskip(
        "openapi_spec_validator", reason="openapi-spec-validator is not installed (requirements-dev.txt)"
    )
    validator.validate(spec)
