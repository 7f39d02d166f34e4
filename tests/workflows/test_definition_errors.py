"""Broken definitions fail to load with a message that names the file and the field."""

from __future__ import annotations

import textwrap

import pytest

from workflow_core.workflows import (
    WorkflowDefinitionError,
    clear_workflow_cache,
    load_workflows,
    parse_workflow,
)

BASE = """
name: demo
input:
  required: [who]
  properties:
    who: {type: string}
    note: {type: string}
steps:
  - id: first
    agent: demo.first
    deadline_seconds: 60
    input: {who: $input.who}
  - id: second
    agent: demo.second
    deadline_seconds: 60
    input: {from_first: $steps.first.output.value}
"""


def _load(text: str) -> None:
    parse_workflow(textwrap.dedent(text), source="demo.yaml")


def _error(text: str) -> str:
    with pytest.raises(WorkflowDefinitionError) as info:
        _load(text)
    message = str(info.value)
    assert message.startswith("demo.yaml: ")
    return message


def test_base_definition_is_valid():
    _load(BASE)


def test_reference_to_unknown_step():
    message = _error(BASE.replace("$steps.first.output.value", "$steps.frist.output.value"))
    assert "steps[1].input.from_first: $steps.frist.output.value refers to unknown step 'frist'" in message


def test_reference_to_a_later_step():
    text = BASE.replace("input: {who: $input.who}", "input: {who: $steps.second.output.name}")
    message = _error(text)
    assert "steps[0].input.who" in message and "'second', which does not run before 'first'" in message


def test_reference_to_its_own_step():
    message = _error(BASE.replace("$steps.first.output.value", "$steps.second.output.value"))
    assert "does not run before 'second'" in message


def test_nested_references_are_checked_too():
    message = _error(
        BASE.replace("input: {who: $input.who}", "input: {payload: {list: [$steps.nope.output]}}")
    )
    assert "steps[0].input.payload.list[0]" in message and "unknown step 'nope'" in message


def test_malformed_reference():
    message = _error(BASE.replace("$input.who", "$inputs.who"))
    assert "'$inputs.who' is not a valid reference" in message and "$$" in message


def test_reference_to_an_optional_input_field_without_default():
    message = _error(BASE.replace("$input.who", "$input.note"))
    assert "input field 'note', which is not a required input field and has no default" in message


def test_reference_to_an_undeclared_input_field():
    assert "input field 'whom'" in _error(BASE.replace("$input.who", "$input.whom"))


def test_duplicate_step_id():
    message = _error(BASE.replace("id: second", "id: first"))
    assert "steps[1].id: duplicate step id 'first' (first used by steps[0])" in message


@pytest.mark.parametrize(
    ("retry", "field", "expected"),
    [
        ("{max_attempts: 0}", "max_attempts", "greater than or equal to 1"),
        ("{backoff_coefficient: 0.5}", "backoff_coefficient", "greater than or equal to 1"),
        ("{jitter: 1.5}", "jitter", "less than or equal to 1"),
        ("{initial_interval_seconds: 0}", "initial_interval_seconds", "greater than 0"),
        ("{max_attempts: two}", "max_attempts", "valid integer"),
        ("{max_atempts: 2}", "max_atempts", "unknown key; did you mean 'max_attempts'?"),
    ],
)
def test_bad_retry_numbers(retry, field, expected):
    text = BASE.replace(
        "    deadline_seconds: 60\n    input: {who",
        f"    deadline_seconds: 60\n    retry: {retry}\n    input: {{who",
    )
    message = _error(text)
    assert f"steps[0].retry.{field}: " in message and expected in message


def test_max_interval_below_initial_interval():
    text = BASE.replace(
        "    deadline_seconds: 60\n    input: {who",
        "    deadline_seconds: 60\n"
        "    retry: {initial_interval_seconds: 30, max_interval_seconds: 10}\n"
        "    input: {who",
    )
    assert (
        "steps[0].retry: max_interval_seconds (10) must not be smaller than initial_interval_seconds (30)"
        in _error(text)
    )


@pytest.mark.parametrize("bad_id", ["has space", "slash/inside", "-leading-dash", "x" * 101])
def test_bad_step_id_characters(bad_id):
    message = _error(BASE.replace("id: first", f"id: '{bad_id}'").replace("steps.first.", f"steps.{bad_id}."))
    assert "steps[0].id: " in message and "step id" in message


def test_bad_agent_and_workflow_names():
    assert "steps[0].agent: agent 'Demo First'" in _error(
        BASE.replace("agent: demo.first", "agent: Demo First")
    )
    assert "name: workflow name 'Demo_Flow'" in _error(BASE.replace("name: demo", "name: Demo_Flow"))


def test_bad_deadline_and_compensation():
    assert "steps[0].deadline_seconds: " in _error(
        BASE.replace("deadline_seconds: 60", "deadline_seconds: 0", 1)
    )
    text = BASE.replace(
        "    input: {who: $input.who}", "    input: {who: $input.who}\n    compensation: {agent: demo.undo}"
    )
    assert "steps[0].compensation.deadline_seconds: Field required" in _error(text)


def test_unknown_field_and_missing_steps():
    assert "steps[0].deadlin_seconds: unknown key; did you mean 'deadline_seconds'?" in _error(
        BASE.replace(
            "deadline_seconds: 60\n    input: {who",
            "deadlin_seconds: 60\n    deadline_seconds: 60\n    input: {who",
        )
    )
    assert "steps: Field required" in _error("name: demo\n")
    assert "steps: needs at least 1 entries, got 0" in _error("name: demo\nsteps: []\n")


@pytest.mark.parametrize(
    ("wrong", "right", "where"),
    [
        ("steps:", "stepz:", "stepz"),
        ("    agent: demo.first", "    agnet: demo.first", "steps[0].agnet"),
        ("  - id: first", "  - idd: first", "steps[0].idd"),
    ],
)
def test_a_misspelt_key_is_reported_as_a_misspelling_and_nothing_else(wrong, right, where):
    assert wrong in BASE, wrong
    message = _error(BASE.replace(wrong, right, 1))
    meant = wrong.strip().lstrip("- ").split(":")[0]
    assert message.endswith(f"{where}: unknown key; did you mean {meant!r}?"), message
    assert "Field required" not in message and "Tuple should" not in message and message.count(";") == 1


def test_a_misspelt_parallel_group_is_not_an_empty_list():
    message = _error(
        "name: demo\ninput: {}\nsteps:\n  - paralel:\n    - {id: a, agent: demo.do, deadline_seconds: 5}\n"
    )
    assert message.endswith("steps[0].paralel: unknown key; did you mean 'parallel'?"), message


def test_input_schema_errors():
    assert "required fields ['whom'] are not declared under properties" in _error(
        BASE.replace("[who]", "[who, whom]")
    )
    assert "default 3 is not of type string" in _error(
        BASE.replace("note: {type: string}", "note: {type: string, default: 3}")
    )
    assert "input.properties.who.type: " in _error(BASE.replace("who: {type: string}", "who: {type: text}"))


def test_yaml_problems():
    assert "not valid YAML" in _error("name: [unclosed\n")
    assert "found duplicate key 'deadline_seconds'" in _error(
        BASE.replace("deadline_seconds: 60", "deadline_seconds: 60\n    deadline_seconds: 90", 1)
    )
    assert "top level must be a mapping" in _error("- just\n- a list\n")


def test_directory_errors_name_the_file(tmp_path):
    clear_workflow_cache()
    (tmp_path / "demo.yaml").write_text(BASE, encoding="utf-8")
    assert sorted(load_workflows(tmp_path)) == ["demo"]

    (tmp_path / "other.yaml").write_text(BASE, encoding="utf-8")
    clear_workflow_cache()
    with pytest.raises(WorkflowDefinitionError, match=r"other\.yaml: name: 'demo' must match the file name"):
        load_workflows(tmp_path)

    with pytest.raises(WorkflowDefinitionError, match="does not exist"):
        load_workflows(tmp_path / "missing")
    clear_workflow_cache()
