"""Parallel step groups in definitions: ``{parallel: [step, ...]}`` items under ``steps``."""

from __future__ import annotations

import textwrap

import pytest

from workflow_core.workflows import ParallelGroup, WorkflowDefinitionError, get_workflow, parse_workflow
from workflow_core.workflows.store import version_of

GROUPED = """
name: demo
input:
  required: [who]
  properties:
    who: {type: string}
steps:
  - id: first
    agent: demo.first
    deadline_seconds: 60
    input: {who: $input.who}
  - parallel:
      - id: left
        agent: demo.left
        deadline_seconds: 30
        input: {value: $steps.first.output.value}
        compensation: {agent: demo.unleft, deadline_seconds: 30}
      - id: right
        agent: demo.right
        deadline_seconds: 45
        input: {who: $input.who}
  - id: last
    agent: demo.last
    deadline_seconds: 60
    input: {left: $steps.left.output, right: $steps.right.output.value}
"""


def _parse(text: str):
    return parse_workflow(textwrap.dedent(text), source="demo.yaml")


def _error(text: str) -> str:
    with pytest.raises(WorkflowDefinitionError) as info:
        _parse(text)
    message = str(info.value)
    assert message.startswith("demo.yaml: ")
    return message


def test_group_loads_with_steps_flat_and_stages_grouped():
    definition = _parse(GROUPED)

    assert definition.step_ids == ["first", "left", "right", "last"]
    assert [[step.id for step in stage] for stage in definition.stages] == [
        ["first"],
        ["left", "right"],
        ["last"],
    ]
    assert isinstance(definition.items[1], ParallelGroup)
    assert definition.step("right").deadline_seconds == 45
    assert definition.agents_used() == {"demo.first", "demo.left", "demo.unleft", "demo.right", "demo.last"}


def test_the_derived_views_are_computed_once_and_leave_the_definition_itself_alone():
    """``steps``, ``stages`` and the positions are cached on the (frozen) definition, as the scheduler
    asks for them on every replay: asking must not change what the definition dumps, hashes to or
    equals, and a step that is not there is still a KeyError naming the steps that are."""
    definition = _parse(GROUPED)
    pristine = _parse(GROUPED)
    dumped, version = definition.model_dump(), version_of(definition)

    assert definition.steps is definition.steps and definition.stages is definition.stages
    assert [definition.position_of(s) for s in ("first", "left", "right", "last")] == [0, 1, 2, 3]
    assert definition.step("right") is definition.stages[1][1]
    assert definition.step_ids == ["first", "left", "right", "last"]
    definition.step_ids.append("mutated")  # a copy each time: the cached positions do not move
    assert definition.step_ids == ["first", "left", "right", "last"]
    with pytest.raises(KeyError, match="has no step 'nope'; steps: first, left, right, last"):
        definition.position_of("nope")

    assert definition.model_dump() == dumped == pristine.model_dump()
    assert definition == pristine and version_of(definition) == version == version_of(pristine)


def test_a_step_in_a_group_may_not_use_its_siblings_output():
    message = _error(
        GROUPED.replace("{who: $input.who}\n  - id: last", "{v: $steps.left.output}\n  - id: last")
    )
    assert (
        "steps[1].parallel[1].input.v: $steps.left.output refers to step 'left', which runs in the same "
        "parallel group as 'right'; a step in a group can only use outputs of steps before the group"
    ) in message


def test_a_step_in_a_group_may_not_use_a_later_step():
    message = _error(GROUPED.replace("{value: $steps.first.output.value}", "{value: $steps.last.output}"))
    assert "steps[1].parallel[0].input.value" in message
    assert "'last', which does not run before 'left'" in message


def test_groups_cannot_nest():
    nested = GROUPED.replace(
        "      - id: right\n",
        "      - parallel:\n          - {id: a, agent: demo.a, deadline_seconds: 5}\n"
        "          - {id: b, agent: demo.b, deadline_seconds: 5}\n      - id: right\n",
    )
    message = _error(nested)
    assert "steps[1].parallel: [1]: parallel groups cannot be nested" in message


def test_duplicate_id_across_a_group_is_rejected():
    message = _error(GROUPED.replace("- id: right", "- id: first"))
    assert "steps[1].parallel[1].id: duplicate step id 'first' (first used by steps[0])" in message
    message = _error(GROUPED.replace("- id: last", "- id: left"))
    assert "steps[2].id: duplicate step id 'left' (first used by steps[1].parallel[0])" in message


def test_a_group_needs_two_steps_and_names_the_field_of_a_bad_member():
    single = GROUPED.replace(
        "      - id: right\n        agent: demo.right\n        deadline_seconds: 45\n"
        "        input: {who: $input.who}\n",
        "",
    ).replace("right: $steps.right.output.value", "right: x")
    assert "steps[1].parallel: needs at least 2 entries, got 1" in _error(single)
    message = _error(GROUPED.replace("deadline_seconds: 45", "deadline_seconds: -1"))
    assert "steps[1].parallel[1].deadline_seconds: Input should be greater than 0" in message


def test_unknown_key_next_to_parallel_is_an_error():
    message = _error(GROUPED.replace("  - parallel:", "  - name: dns\n    parallel:"))
    assert "steps[1].name: Extra inputs are not permitted" in message


def test_shipped_onboard_tenant_runs_its_dns_records_in_parallel():
    definition = get_workflow("onboard-tenant")
    assert [[step.id for step in stage] for stage in definition.stages] == [
        ["create_storage"],
        ["register_portal_dns", "register_files_dns"],
        ["send_welcome"],
    ]
    assert definition.agents_used() == {
        "storage.create",
        "storage.delete",
        "dns.register",
        "dns.unregister",
        "email.send_welcome",
    }
