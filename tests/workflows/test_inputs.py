"""Validating a workflow's input and resolving a step's input mapping."""

from __future__ import annotations

import pytest

from workflow_core.workflows import (
    StepInputError,
    WorkflowInputError,
    get_workflow,
    parse_workflow,
    resolve_step_input,
)

TENANT = get_workflow("provision-tenant")

DEMO = parse_workflow(
    """
name: demo
input:
  required: [count, flag, ratio, tags, meta]
  properties:
    count: {type: integer}
    flag: {type: boolean}
    ratio: {type: number}
    tags: {type: array}
    meta: {type: object}
    label: {type: string, default: none}
steps:
  - id: first
    agent: demo.first
    deadline_seconds: 60
    input:
      count: $input.count
      everything: $input
      nested: {deep: [$input.meta.owner, literal, 3]}
      price: $$5
  - id: second
    agent: demo.second
    deadline_seconds: 60
    input:
      whole: $steps.first.output
      item: $steps.first.output.items.1.name
"""
)
GOOD = {"count": 2, "flag": True, "ratio": 0.5, "tags": ["a"], "meta": {"owner": "ops"}}


def test_valid_input_gets_defaults_and_is_not_mutated():
    given = dict(GOOD)
    assert DEMO.validate_input(given) == {**GOOD, "label": "none"}
    assert given == GOOD


def _problems(data):
    with pytest.raises(WorkflowInputError) as info:
        DEMO.validate_input(data)
    assert str(info.value).startswith("invalid input for workflow 'demo': ")
    return info.value.problems


def test_missing_field():
    assert _problems({k: v for k, v in GOOD.items() if k != "flag"}) == ["missing required field 'flag'"]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("count", "2", "field 'count' must be an integer, got string"),
        ("count", True, "field 'count' must be an integer, got boolean"),
        ("count", 2.5, "field 'count' must be an integer, got number"),
        ("flag", 1, "field 'flag' must be a boolean, got integer"),
        ("ratio", None, "field 'ratio' must be a number, got null"),
        ("tags", "a", "field 'tags' must be an array, got string"),
        ("meta", [], "field 'meta' must be an object, got array"),
    ],
)
def test_wrong_type(field, value, message):
    assert _problems({**GOOD, field: value}) == [message]


def test_integer_is_a_number():
    assert DEMO.validate_input({**GOOD, "ratio": 1})["ratio"] == 1


def test_not_an_object_and_unknown_fields():
    assert _problems(["count"]) == ["input must be a JSON object, got array"]
    assert _problems({**GOOD, "colour": "red"}) == [
        "unknown field 'colour' (known fields: count, flag, label, meta, ratio, tags)"
    ]


def test_all_problems_are_reported_together():
    assert len(_problems({"count": "x"})) == 5


def test_resolve_references_nested_values_and_escapes():
    data = DEMO.validate_input(GOOD)
    resolved = resolve_step_input(DEMO.step("first"), data, {})
    assert resolved == {
        "count": 2,
        "everything": data,
        "nested": {"deep": ["ops", "literal", 3]},
        "price": "$5",
    }
    second = resolve_step_input(
        DEMO.step("second"), data, {"first": {"items": [{"name": "a"}, {"name": "b"}]}}
    )
    assert second == {"whole": {"items": [{"name": "a"}, {"name": "b"}]}, "item": "b"}


def test_resolution_is_pure():
    data = DEMO.validate_input(GOOD)
    outputs = {"first": {"items": [{"name": "a"}, {"name": "b"}]}}
    resolve_step_input(DEMO.step("second"), data, outputs)["whole"]["items"].append("x")
    assert outputs == {"first": {"items": [{"name": "a"}, {"name": "b"}]}}
    assert resolve_step_input(DEMO.step("first"), data, {}) == resolve_step_input(
        DEMO.step("first"), data, {}
    )


@pytest.mark.parametrize(
    ("outputs", "message"),
    [
        (
            {},
            "step 'second' input.whole: $steps.first.output needs the output of step 'first', "
            "which has none yet",
        ),
        (
            {"first": {"items": []}},
            "$steps.first.output.items.1.name cannot be resolved: "
            "the output of step 'first' has no '1' under items",
        ),
        ({"first": {}}, "has no 'items' under (top level)"),
    ],
)
def test_missing_reference_errors(outputs, message):
    with pytest.raises(StepInputError) as info:
        resolve_step_input(DEMO.step("second"), DEMO.validate_input(GOOD), outputs)
    assert message in str(info.value)


def test_tenant_defaults():
    assert TENANT.validate_input({"tenant_id": "t", "admin_email": "a@b"})["region"] == "westeurope"
