"""Every shell command README.md and docs/ show, checked as written.

Each command line of a fenced block (``sh``/``bash``/``console``, or an unlabelled block whose line
starts with a command) falls under exactly one rule below; a line no rule knows fails the test, so
a new command in the docs is either covered or listed here with the reason it is left out.

* ``curl http://localhost:7071/...``: **run**, with the host swapped for the demo server (the app's
  real HTTP functions on the in-process durable host): no 5xx, and a state-changing call passes the
  door (``Content-Type``, ``X-SAS-Client``);
* ``./scripts/demo ...``: **run**, each as its own process, as a newcomer types it (``--serve`` runs
  until stopped: ``tests/test_demo.py`` starts and stops it; here its options are checked);
* ``.venv/bin/sas ...`` / ``sas ...``: **parsed** by the CLI itself (every command, argument and
  option exists; ``[optional]`` parts included); the README's operator commands also run against
  the demo server (``test_readme_operator_commands.py``); the docs' examples name instances that
  do not exist;
* ``.venv/bin/sas-agent ...``: **parsed** by its command (it serves until stopped:
  ``tests/agent_runner/test_doc_section.py`` runs the docs' command as a process);
* ``.venv/bin/python bench/X.py``: **run** with ``--help``; every option shown exists;
* ``.venv/bin/python -m pytest ...``: every path exists and every ``-m`` marker is declared (the
  suite itself is what CI runs);
* left out, with the reason: ``./scripts/test`` (CI runs it: ``.ci/run``), ``./scripts/start`` and
  ``func`` (Azure Functions Core Tools cannot be installed here), ``scripts/check-infra`` (CI runs
  it from ``./scripts/test``), ``az``/``azd``/``infra/deploy.sh`` and ``curl`` to ``*.azurewebsites.net``
  (an Azure subscription and a login); for these the script or file named must exist.
"""

from __future__ import annotations

import glob
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest

from operator_cli.cli import cli as sas_cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "workflows" / "README.md"]
COMMAND = re.compile(r"^(curl|\./scripts/|\.venv/bin/|sas |scripts/|infra/|az |azd |func |KEY=)")
LEFT_OUT = {
    "./scripts/test": "CI runs it (.ci/run)",
    "./scripts/start": "needs Azure Functions Core Tools, which cannot be installed here",
    "scripts/check-infra": "./scripts/test runs it",
    "infra/deploy.sh": "needs an Azure subscription and `az login`",
    "az": "needs an Azure subscription and `az login`",
    "azd": "needs an Azure subscription and `azd auth login`",
    "func": "Azure Functions Core Tools cannot be installed here",
    "KEY=$(az": "needs an Azure subscription and `az login`",
}


def doc_commands() -> list[tuple[str, str]]:
    """(file: line, command) for every command line of every fenced block; continuations joined."""
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
            lang, body = block.groups()
            if lang not in ("", "sh", "bash", "shell", "console"):
                continue
            line_no = text[: block.start()].count("\n") + 2
            pending = ""
            for offset, raw in enumerate(body.splitlines()):
                line = (pending + " " + raw.strip()).strip() if pending else raw.strip()
                if line.endswith("\\"):
                    pending = line[:-1]
                    continue
                pending = ""
                if COMMAND.match(line):
                    found.append((f"{doc.relative_to(ROOT)}:{line_no + offset}", _strip_comment(line)))
    return found


def _strip_comment(line: str) -> str:
    return re.split(r"\s+#\s", line, maxsplit=1)[0].strip()


def _optional_parts_included(command: str) -> str:
    """``[--limit 100]`` -> ``--limit 100``; ``[...]`` (more of the same) dropped."""
    return re.sub(r"\[([^\]]*)\]", lambda m: "" if m.group(1) == "..." else m.group(1), command)


COMMANDS = doc_commands()


def test_the_docs_show_commands_and_each_falls_under_a_rule():
    assert len(COMMANDS) > 40, COMMANDS  # the extraction finds the docs' commands at all
    unknown = [(where, c) for where, c in COMMANDS if _rule(c) is None]
    assert unknown == [], "commands in the docs no rule covers (add one, or a reason to LEFT_OUT)"


def _rule(command: str) -> str | None:
    if command.startswith("curl"):
        return "curl-azure" if "azurewebsites.net" in command else "curl-local"
    if command.startswith("./scripts/demo"):
        return "demo-serve" if "--serve" in command else "demo"
    if command.startswith(".venv/bin/sas-agent "):
        return "sas-agent"
    if command.startswith((".venv/bin/sas ", "sas ", ".venv/bin/python -m operator_cli")):
        return "sas"
    if command.startswith(".venv/bin/python bench/"):
        return "bench"
    if command.startswith(".venv/bin/python -m pytest"):
        return "pytest"
    if command.startswith(".venv/bin/python -m devtools."):
        return "tool"
    for prefix in LEFT_OUT:
        if command == prefix or command.startswith(prefix + " "):
            return "left-out"
    return None


def _of(rule: str) -> list[tuple[str, str]]:
    return [(where, c) for where, c in COMMANDS if _rule(c) == rule]


@pytest.mark.parametrize(("where", "command"), _of("tool"), ids=[w for w, _ in _of("tool")])
def test_every_tool_shown_exists_and_answers_help(where, command):
    """A ``python -m devtools.<tool>`` line: the module exists and its ``--help`` runs (the tool itself
    writes files, so its own test runs it)."""
    module = shlex.split(command)[2]
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "usage:" in done.stdout, f"{where}: {done.stderr}"


@pytest.mark.parametrize(("where", "command"), _of("sas"), ids=[w for w, _ in _of("sas")])
def test_every_sas_command_shown_parses(where, command):
    words = shlex.split(_optional_parts_included(command))
    args = _globbed(words[3:] if words[0].endswith("python") else words[1:])  # or -m operator_cli
    sub = sas_cli.get_command(click.Context(sas_cli), args[0])
    assert sub is not None, f"{where}: sas has no command {args[0]!r}"
    try:
        sub.make_context(args[0], args[1:]).close()
    except click.UsageError as exc:
        pytest.fail(f"{where}: {command!r}: {exc.format_message()}")


@pytest.mark.parametrize(("where", "command"), _of("sas-agent"), ids=[w for w, _ in _of("sas-agent")])
def test_every_sas_agent_command_shown_parses(where, command):
    from agent_runner.cli import main

    try:
        main.make_context("sas-agent", shlex.split(command)[1:]).close()
    except click.UsageError as exc:
        pytest.fail(f"{where}: {command!r}: {exc.format_message()}")


def _globbed(words: list[str]) -> list[str]:
    """What the shell passes: a pattern expanded from the project's root, placeholders filled."""
    out: list[str] = []
    for word in words:
        word = word.replace("<instance>", "wf-123").replace("<step>", "register_dns")
        if "*" in word:
            out.extend(str(ROOT / p) for p in sorted(glob.glob(word, root_dir=ROOT)))
        else:
            out.append(word)
    return out


@pytest.mark.parametrize(("where", "command"), _of("bench"), ids=[w for w, _ in _of("bench")])
def test_every_benchmark_shown_runs_and_has_the_options_shown(where, command):
    words = shlex.split(_optional_parts_included(command))
    script = ROOT / words[1]
    assert script.exists(), where
    done = subprocess.run(
        [sys.executable, str(script), "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, (where, done.stderr)
    for option in (w for w in words[2:] if w.startswith("--")):
        assert option in done.stdout, f"{where}: {script.name} has no {option}"


@pytest.mark.parametrize(("where", "command"), _of("pytest"), ids=[w for w, _ in _of("pytest")])
def test_every_pytest_command_shown_names_real_paths_and_markers(where, command):
    words = shlex.split(command)[3:]
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    markers = {m.split(":")[0] for m in declared["markers"]}
    for i, word in enumerate(words):
        if word.startswith("tests"):
            assert (ROOT / word).exists(), f"{where}: no {word}"
        if word == "-m":
            named = set(re.findall(r"[a-z_]+", words[i + 1])) - {"not", "and", "or"}
            assert named <= markers, f"{where}: undeclared marker(s) {named - markers}"


@pytest.mark.parametrize(("where", "command"), _of("left-out"), ids=[w for w, _ in _of("left-out")])
def test_what_is_left_out_names_files_that_exist(where, command):
    first = shlex.split(command.replace("$(", " "))[0]
    if "/" in first:
        assert (ROOT / first).exists(), f"{where}: no {first}"


@pytest.mark.parametrize(("where", "command"), _of("demo-serve"), ids=[w for w, _ in _of("demo-serve")])
def test_the_demo_server_shown_has_the_options_shown(where, command):
    """It serves until stopped: ``tests/test_demo.py`` starts and stops it; here, its options."""
    words = shlex.split(command)
    done = subprocess.run(
        [sys.executable, "-m", "devtools.demo", "--serve", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    for option in (w for w in words[1:] if w.startswith("--") and w != "--serve"):
        assert option in done.stdout, f"{where}: --serve has no {option}"


def _once(rule: str) -> list[tuple[str, str]]:
    """Each distinct command of ``rule`` once, with every place that shows it."""
    places: dict[str, list[str]] = {}
    for where, command in _of(rule):
        places.setdefault(command, []).append(where)
    return [(", ".join(wheres), command) for command, wheres in places.items()]


@pytest.mark.parametrize(("where", "command"), _once("demo"), ids=[w for w, _ in _once("demo")])
def test_every_demo_command_shown_runs(where, command):
    done = subprocess.run(shlex.split(command), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (where, done.stdout[-2000:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr


def test_every_local_curl_shown_answers_without_a_server_error_and_passes_the_door(demo):
    runs = _of("curl-local")
    assert runs, "the docs show curl examples"
    for where, command in runs:
        words = [w.replace("http://localhost:7071", demo.url) for w in shlex.split(command)]
        done = subprocess.run(
            [*words, "-s", "-o", "/dev/null", "-w", "%{http_code}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        status = int(done.stdout[-3:])
        assert 200 <= status < 500, (where, status)
        if "-X" in words and words[words.index("-X") + 1] == "POST":
            assert status not in (401, 403, 415), (where, status)  # the door let it through
