"""The README's operator commands, as written, against the demo server (``./scripts/demo --serve``).

Each ``.venv/bin/sas`` line of the README's Operators section runs as a separate process (the
installed console script, the way a newcomer types it), pointed at the demo's Azurite and tables by
environment settings; placeholders are filled with the demo's CompensationFailed instance.
"""

from __future__ import annotations

import glob
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from devtools.azurite import env_for

ROOT = Path(__file__).resolve().parents[2]
SAS = Path(sys.executable).parent / "sas"


def readme_commands() -> list[str]:
    section = (
        (ROOT / "README.md").read_text(encoding="utf-8").split("## Operators", 1)[1].split("\n## ", 1)[0]
    )
    return [
        line.split("  #")[0].strip() for line in section.splitlines() if line.startswith(".venv/bin/sas ")
    ]


def _argv(command: str, instance: str) -> list[str]:
    words = shlex.split(command.replace("<instance>", instance).replace("<step>", "charge_payment"))
    expanded = [SAS.as_posix()]
    for word in words[1:]:
        expanded.extend(sorted(glob.glob(word, root_dir=ROOT)) if "*" in word else [word])
    return expanded


def test_the_readme_operator_commands_work_against_the_demo_server(demo):
    commands = readme_commands()
    verbs = [c.split()[1] for c in commands]
    assert {"list", "stalled", "show", "retry", "versions", "replay-check"} <= set(verbs), verbs
    instance = demo.instances["compensation-failed"]
    env = {
        **os.environ,
        **env_for(demo.harness.azurite),
        "LEDGER_TABLE_NAME": demo.tables[0],
        "DEADLINE_INDEX_TABLE_NAME": demo.tables[1],
    }
    outputs = {}
    for command in commands:
        done = subprocess.run(
            _argv(command, instance),
            input="y\n",  # the confirmation prompt of retry
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        outputs[command.split()[1]] = done.stdout
    assert instance in outputs["list"]
    assert "charge_payment" in outputs["show"]
    assert "provision-tenant@" in outputs["versions"]

    # The CLI's retry is a ledger intent; the demo's watchdog enacts it: the refund runs again.
    ledger = demo.harness.ledger
    deadline = time.monotonic() + 30
    while (
        ledger.get(instance, "charge_payment").status.value != "Compensated" and time.monotonic() < deadline
    ):
        time.sleep(0.2)
    assert ledger.get(instance, "charge_payment").status.value == "Compensated"


def test_the_readme_lists_every_exit_code_sas_uses():
    """Every ``EXIT_*`` of operator_cli/ is in the README's list, and the list names no other."""
    import re

    used = set()
    for path in (ROOT / "operator_cli").glob("*.py"):
        used |= {int(n) for n in re.findall(r"^EXIT_\w+ = (\d+)$", path.read_text(encoding="utf-8"), re.M)}
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## Operators", 1)[1]
    listed = section.split("Exit codes:", 1)[1].split("Each instance is pinned", 1)[0]
    numbers = {int(n) for n in re.findall(r"(?:^|[ ,(])(\d) (?=[a-z`])", listed, re.M)}
    assert used == numbers == set(range(8)), (used, numbers)
