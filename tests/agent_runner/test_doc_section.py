"""docs/agents.md, "Run an agent outside the Function App", followed as written: the module it shows,
saved as it says, served by the ``sas-agent`` command it shows (as a process, from that module's
folder), runs the say-hello workflow (the section before it) to success with the harness's scheduler
and watchdog; SIGTERM then stops the runner with exit code 0."""

from __future__ import annotations

import re
import runpy
import shlex
import signal
from datetime import timedelta

import azure.durable_functions as df
import pytest

from activities.common import step_output
from tests.helpers.runner import ROOT, SAS_AGENT
from tests.test_own_workflow import blocks, doc_section

SECTION = "## Run an agent outside the Function App"


def section() -> str:
    text = (ROOT / "docs" / "agents.md").read_text(encoding="utf-8")
    return text.split(SECTION, 1)[1].split("\n## ", 1)[0]


@pytest.fixture
def harness_options(tmp_path):
    (say_hello,) = blocks(doc_section(), "yaml")
    (module,) = blocks(section(), "python")
    assert "saved as\n   `greetings.py` in the folder you start the runner from" in section()
    (tmp_path / "greetings.py").write_text(module, encoding="utf-8")
    runpy.run_path(str(tmp_path / "greetings.py"))  # the app checks every agent has a handler
    return {
        "clock": "real",
        "watchdog_every": timedelta(seconds=2),
        "extra_workflows": {"say-hello": say_hello},
        "serve_work": False,
    }


def test_the_section_runs_say_hello_on_a_sas_agent_process(harness, start_runner, tmp_path):
    (shell,) = blocks(section(), "sh")
    exports, command = shell.strip().splitlines()
    assert exports == "export AzureWebJobsStorage=UseDevelopmentStorage=true AGENT_TRANSPORT=storage-queue"
    argv = shlex.split(command)
    assert argv[0] == ".venv/bin/sas-agent"
    # the harness's Azurite, tables and queues stand in for the exported local defaults
    runner = start_runner(argv=[SAS_AGENT, *argv[1:]], cwd=tmp_path)

    sample = re.search(r"sample_input: (\{.*\})", doc_section()).group(1)
    iid = harness.start_workflow("say-hello", {"name": "Ada", "email": "ada@example.org"})
    assert sample == "{name: Ada, email: ada@example.org}"
    status = harness.run_until_complete(iid, timeout=timedelta(seconds=60))
    assert status.runtime_status == df.OrchestrationRuntimeStatus.Completed, runner.output()
    assert step_output(harness.steps(iid)["greet"]) == {"to": "ada@example.org", "text": "Hello, Ada!"}

    runner.signal(signal.SIGTERM)
    assert runner.wait(30) == 0, runner.output()
    assert "with agents greetings.apologise, greetings.send" in runner.output()
