"""``sas lint``: the rules every definition passes, one line per problem naming the file and field."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from operator_cli.cli import main as sas
from workflow_core.workflows import parse_workflow, version_of
from workflow_core.workflows.loader import lint_definition, lint_directory, skeleton_input

GOOD = """
name: say-hello
description: Greets someone, then records it.
input:
  required: [person]
  properties:
    person: {type: object}
    greeting: {type: string, default: hello}
sample_input: {person: {name: Ada}}
steps:
  - id: greet
    agent: greet.send
    input: {to: $input.person.name, text: $input.greeting}
    deadline_seconds: 60
    compensation: {agent: greet.retract, deadline_seconds: 60}
  - parallel:
      - id: log_a
        agent: greet.log
        input: {what: $steps.greet.output}
        deadline_seconds: 60
      - id: log_b
        agent: greet.log
        deadline_seconds: 60
"""
AGENTS = {"greet.send", "greet.retract", "greet.log"}


def lint(text: str, agents=AGENTS) -> list[str]:
    return [str(p) for p in lint_definition(parse_workflow(text), source="say-hello.yaml", agents=agents)]


def test_a_good_definition_is_clean():
    assert lint(GOOD) == []


def test_every_agent_without_a_handler_is_named_at_its_field():
    problems = lint(GOOD, agents={"greet.send"})
    assert [p.split(": ")[1] for p in problems] == [
        "steps[0].compensation.agent",
        "steps[1].parallel[0].agent",
        "steps[1].parallel[1].agent",
    ]
    assert "agent 'greet.retract' has no handler; register one with @agent('greet.retract')" in problems[0]


def test_an_empty_description_is_a_problem():
    assert lint(GOOD.replace("description: Greets someone, then records it.", "")) == [
        "say-hello.yaml: description: empty; say what the workflow does, for operators"
    ]


@pytest.mark.parametrize(
    ("sample", "expected"),
    [
        ("{}", "sample_input: missing required field 'person'"),
        ("{person: Ada}", "sample_input: field 'person' must be an object, got string"),
        ("{person: {name: Ada}, extra: 1}", "sample_input: unknown field 'extra'"),
        (
            "{person: {first: Ada}}",
            "sample_input: steps[0].input.to: $input.person.name cannot be resolved: "
            "the workflow input has no 'name' under person",
        ),
    ],
)
def test_a_sample_input_the_schema_or_a_step_refuses_is_a_problem(sample, expected):
    problems = lint(GOOD.replace("sample_input: {person: {name: Ada}}", f"sample_input: {sample}"))
    assert len(problems) == 1 and problems[0].startswith(f"say-hello.yaml: {expected}"), problems


def test_the_sample_input_is_not_part_of_the_version():
    """Editing an example must not make a new version or move a running instance."""
    other = parse_workflow(GOOD.replace("{person: {name: Ada}}", "{person: {name: Grace}}"))
    without = parse_workflow(GOOD.replace("sample_input: {person: {name: Ada}}", ""))
    assert version_of(parse_workflow(GOOD)) == version_of(other) == version_of(without)
    assert version_of(parse_workflow(GOOD.replace("deadline_seconds: 60", "deadline_seconds: 61", 1))) != (
        version_of(without)
    )


def test_the_skeleton_names_every_required_field_by_type():
    definition = parse_workflow(GOOD.replace("required: [person]", "required: [person, greeting]"))
    assert skeleton_input(definition) == {"person": {}, "greeting": "..."}


def write(folder: Path, name: str, text: str) -> None:
    (folder / name).write_text(text, encoding="utf-8")


def test_a_directory_reports_every_file_on_its_own(tmp_path):
    write(tmp_path, "say-hello.yaml", GOOD)
    broken = GOOD.replace("name: say-hello", "name: broken").replace("agent:", "agnt:", 1)
    write(tmp_path, "broken.yaml", broken)
    write(tmp_path, "misnamed.yaml", GOOD)
    definitions, problems = lint_directory(tmp_path, agents=AGENTS)
    assert sorted(definitions) == ["say-hello"]
    assert [str(p) for p in problems] == [
        "broken.yaml: steps[0].agnt: unknown key; did you mean 'agent'?",
        "misnamed.yaml: name: 'say-hello' must match the file name ('misnamed')",
    ]


def run_sas(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return sas(list(argv), stdout=out, stderr=err), out.getvalue(), err.getvalue()


def test_sas_lint_is_clean_on_the_repository():
    code, out, err = run_sas("lint")
    assert code == 0, out + err
    assert "ok  provision-tenant: 3 step(s), 5 agent(s), sample input" in out


def test_sas_lint_exits_2_with_one_line_per_problem(tmp_path):
    write(tmp_path, "say-hello.yaml", GOOD.replace("sample_input: {person: {name: Ada}}", "sample_input: {}"))
    code, out, err = run_sas("lint", "--directory", str(tmp_path))
    assert code == 2
    assert out.splitlines() == [
        *(
            f"say-hello.yaml: {field}: agent {name!r} has no handler; register one with @agent({name!r}) "
            "in a module of activities/worker/handlers/ imported by its __init__.py (docs/agents.md)"
            for field, name in (
                ("steps[0].agent", "greet.send"),
                ("steps[0].compensation.agent", "greet.retract"),
                ("steps[1].parallel[0].agent", "greet.log"),
                ("steps[1].parallel[1].agent", "greet.log"),
            )
        ),
        "say-hello.yaml: sample_input: missing required field 'person'",
    ], out
    assert err == "5 problem(s) in 1 file(s)\n"
