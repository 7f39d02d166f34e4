"""docs/agents.md, "Check an agent with the conformance kit", followed as written: each command it
shows (the Python runner's conformance agent, the Node.js agent) runs as a process, starting its
own Azurite, and every check passes; an agent that ignores the idempotency key (``forgetful_echo``)
fails, on the session's Azurite, with the crash check's line naming the doubled effect."""

from __future__ import annotations

import io
import re
import shlex
import subprocess

import pytest

from devtools.conformance import CHECKS
from operator_cli.cli import main as sas
from tests.helpers.fault_matrix import storage_queue_only
from tests.helpers.runner import ROOT, SAS_AGENT
from tests.test_own_workflow import blocks

SECTION = "## Check an agent with the conformance kit"


def section_commands() -> list[str]:
    text = (ROOT / "docs" / "agents.md").read_text(encoding="utf-8")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return blocks(section, "sh")[0].strip().splitlines()


def verdicts(table: str) -> dict[str, str]:
    """Each check's RESULT column (``pass`` / ``FAIL``) in the printed table."""
    return {name: m.group(1) for name, _ in CHECKS if (m := re.search(rf"{name}\s+(pass|FAIL)\b", table))}


@storage_queue_only  # the kit runs on Azurite's Storage Queues; its harness would take Service Bus
@pytest.mark.parametrize("command", section_commands())
def test_the_sections_command_passes_every_check(command):
    if "node" in command and not (ROOT / "examples" / "node-agent" / "node_modules").is_dir():
        pytest.fail("examples/node-agent has no node_modules: run `npm ci` there (./scripts/bootstrap does)")
    done = subprocess.run(shlex.split(command), cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert verdicts(done.stdout) == {name: "pass" for name, _ in CHECKS}, done.stdout
    assert f"{len(CHECKS)} of {len(CHECKS)} checks passed" in done.stdout


@storage_queue_only
def test_an_agent_that_ignores_the_idempotency_key_fails_the_crash_check(azurite):
    ports = f"{azurite.blob_port},{azurite.queue_port},{azurite.table_port}"
    agent = [SAS_AGENT, "--pool", "default", "--handlers", "tests.agent_runner.forgetful_echo"]
    out, err = io.StringIO(), io.StringIO()
    code = sas(
        ["conformance", "--azurite-ports", ports, "--", *agent, "--lock-seconds", "2"], stdout=out, stderr=err
    )
    table = out.getvalue()
    assert code == 5, table + err.getvalue()
    assert verdicts(table)["crash mid-step recovered once"] == "FAIL", table
    line = next(line for line in table.splitlines() if "crash mid-step recovered once" in line)
    assert re.search(r"the effect was made 2 times for idempotency key \S+:echo", line), line
    assert verdicts(table)["valid message, valid result"] == "pass", table
    assert "the agent's last output:" in table
