"""A newcomer's own workflow and agent, added exactly as docs/agents.md says ("Your own workflow and
agent, end to end"), in a copy of the repository: the project's lint (ruff) passes on it, `sas lint` is
clean, the demo runs it to success, and the tests that check every definition pass with it, none of
them edited.

The files and the import line are taken from the doc's own blocks, so the doc cannot drift from what
works. The copy runs on this checkout's interpreter with the copy as its working directory (what
``./scripts/demo`` and ``.venv/bin/sas`` run, minus the set-up of a second ``.venv``): ``python -m``
puts the working directory first on the import path, so the copy's modules are the ones imported.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Your own workflow and agent, end to end"


def doc_section() -> str:
    text = (ROOT / "docs" / "agents.md").read_text(encoding="utf-8")
    return text.split(SECTION, 1)[1].split("\n## ", 1)[0]


def blocks(section: str, lang: str) -> list[str]:
    """The fenced blocks of ``lang`` in the section, indentation of the list item removed."""
    found = []
    for match in re.finditer(rf"^( *)```{lang}\n(.*?)^ *```", section, re.S | re.M):
        indent = len(match.group(1))
        found.append("\n".join(line[indent:] for line in match.group(2).splitlines()) + "\n")
    return found


@pytest.fixture(scope="module")
def copy_with_own_workflow(tmp_path_factory) -> Path:
    section = doc_section()
    (workflow,) = blocks(section, "yaml")
    agent_module, import_line = blocks(section, "python")
    assert "`workflows/say-hello.yaml`" in section and "`activities/worker/handlers/greetings.py`" in section
    assert "`./scripts/demo say-hello`" in section and ".venv/bin/sas lint" in section

    repo = tmp_path_factory.mktemp("newcomer") / "repo"
    ignore = shutil.ignore_patterns(".venv", "node_modules", ".git", "__pycache__", ".*cache", "*.egg-info")
    shutil.copytree(ROOT, repo, ignore=ignore)
    (repo / "node_modules").symlink_to(ROOT / "node_modules")  # Azurite, as ./scripts/bootstrap installs it
    (repo / "workflows" / "say-hello.yaml").write_text(workflow, encoding="utf-8")
    (repo / "activities" / "worker" / "handlers" / "greetings.py").write_text(agent_module, encoding="utf-8")
    init = repo / "activities" / "worker" / "handlers" / "__init__.py"
    text = init.read_text(encoding="utf-8")
    anchor = "from activities.worker.handlers import faults\n"
    assert anchor in text and "right after the `faults`" in section, "the doc says: after the faults import"
    init.write_text(text.replace(anchor, anchor + import_line.strip() + "\n", 1), encoding="utf-8")
    return repo


def run(repo: Path, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], cwd=repo, capture_output=True, text=True, timeout=timeout)


def test_the_copy_with_the_recipe_passes_ruff_as_written(copy_with_own_workflow):
    """The project's lint, as ``./scripts/test`` runs it, over the copy: the recipe's files and import
    line, placed where the doc says, trip no rule (an unused ``noqa`` is RUF100, an import out of
    name order I001)."""
    for argv in (("check", "."), ("format", "--check", ".")):
        done = run(copy_with_own_workflow, "-m", "ruff", *argv, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr


def test_sas_lint_is_clean_with_the_new_workflow(copy_with_own_workflow):
    done = run(copy_with_own_workflow, "-m", "operator_cli", "lint")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok  say-hello: 1 step(s), 2 agent(s), sample input" in done.stdout


def test_the_demo_runs_the_new_workflow_on_its_sample_input(copy_with_own_workflow):
    done = run(copy_with_own_workflow, "-m", "devtools.demo", "say-hello")
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert "FINISHED: succeeded" in done.stdout and "0 made twice" in done.stdout, done.stdout


def test_the_demo_catches_the_new_agent_going_silent(copy_with_own_workflow):
    done = run(copy_with_own_workflow, "-m", "devtools.demo", "say-hello", "--stall", "greet")
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert "RETRY scheduled: attempt 2" in done.stdout and "FINISHED: succeeded" in done.stdout


def test_the_tests_over_every_definition_pass_unedited(copy_with_own_workflow):
    """The tests that once named the shipped workflows (and failed for a new one) run in the copy."""
    done = run(
        copy_with_own_workflow,
        "-m",
        "pytest",
        "-v",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
        "tests/workflows/test_shipped_workflows.py",
        "tests/workflows/test_lint.py",
        "tests/activities/test_handlers.py",
        "tests/api/test_start.py::test_unknown_workflow_is_a_404_listing_the_known_ones",
        "tests/api/test_list_and_health.py::test_health_is_ok_when_settings_and_definitions_load",
        "tests/test_demo.py::test_every_workflow_runs_on_its_sample_input_or_says_what_to_pass",
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:]
    assert "test_every_workflow_runs_on_its_sample_input_or_says_what_to_pass[say-hello] PASSED" in (
        done.stdout
    )
