"""The newcomer's demo (``./scripts/demo``) runs every workflow in workflows/ and shows the recovery."""

from __future__ import annotations

import io

import pytest

from devtools import demo
from workflow_core.workflows import load_workflows


def run_demo(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = demo.main(list(argv), out=out)
    return code, out.getvalue()


@pytest.mark.parametrize("workflow", sorted(load_workflows()))
def test_every_workflow_runs_on_its_sample_input_or_says_what_to_pass(workflow, capsys):
    """Whatever is in workflows/: with a ``sample_input`` it succeeds; without one (and required
    fields) the demo says in one line what to pass instead of starting anything."""
    definition = load_workflows()[workflow]
    code, text = run_demo(workflow)
    if definition.sample_input is None and definition.input.required:
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and "--input '" in err, err
        return
    assert code == 0, text
    assert "FINISHED: succeeded" in text
    assert "0 made twice" in text


def test_the_shipped_workflows_carry_their_sample_input():
    for workflow in ("provision-tenant", "onboard-tenant", "order-fulfilment"):
        assert load_workflows()[workflow].sample_input, workflow


@pytest.fixture
def own_workflow(tmp_path, monkeypatch):
    """workflows/ holding one definition without a sample input (its agents exist)."""
    from workflow_core.workflows import loader

    (tmp_path / "say-hello.yaml").write_text(
        """
name: say-hello
description: Greets someone.
input:
  required: [name, times]
  properties:
    name: {type: string}
    times: {type: integer}
steps:
  - id: greet
    agent: email.send_welcome
    input: {to: $input.name}
    deadline_seconds: 60
"""
    )
    monkeypatch.setattr(loader, "DEFAULT_DIRECTORY", tmp_path)
    loader.clear_workflow_cache()
    yield tmp_path
    loader.clear_workflow_cache()


def test_a_workflow_without_a_sample_input_says_what_to_pass(capsys, own_workflow):
    code, _ = run_demo("say-hello")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("error: say-hello has no sample input; pass one with --input")
    assert """--input '{"name": "...", "times": 1}'""" in err
    assert "sample_input: to workflows/say-hello.yaml" in err


def test_an_input_the_schema_refuses_is_one_line_not_a_400(capsys, own_workflow):
    code, _ = run_demo("say-hello", "--input", '{"name": 7}')
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "400" not in err, err
    assert "--input is not a valid input for say-hello: missing required field 'times'" in err
    assert "field 'name' must be a string, got integer" in err


def test_a_stalled_step_is_detected_and_retried():
    code, text = run_demo("provision-tenant", "--stall", "register_dns")
    assert code == 0, text
    assert "OVERDUE" in text and "RETRY scheduled: attempt 2" in text
    assert "SUCCEEDED on attempt 2" in text and "FINISHED: succeeded" in text


def test_a_failing_step_is_compensated_in_reverse_order():
    code, text = run_demo("order-fulfilment", "--fail", "ship_order")
    assert code == 0, text
    undo = [line.split()[1] for line in text.splitlines() if "COMPENSATING: undo" in line]
    assert undo == ["ship_order", "charge_payment", "reserve_stock"]
    assert "FINISHED: compensated" in text


def test_unknown_step_is_a_clear_error(capsys):
    code, _ = run_demo("provision-tenant", "--fail", "nope")
    assert code == 2
    assert "has no step 'nope'" in capsys.readouterr().err


def test_a_scheduler_killed_between_steps_is_resumed_and_each_step_runs_once():
    code, text = run_demo("provision-tenant", "--kill-scheduler", "create_storage")
    assert code == 0, text
    assert "ORCHESTRATION TERMINATED (create_storage is done, nothing is in flight)" in text
    assert "watchdog: resume instance" in text
    assert "FINISHED: Succeeded after 1 resume(s) by the watchdog" in text
    assert "create_storage x1, register_dns x1, send_welcome x1" in text
    assert "0 made twice" in text


def test_a_scheduler_terminated_mid_step_is_resumed_by_the_watchdog():
    code, text = run_demo("provision-tenant", "--terminate", "register_dns")
    assert code == 0, text
    assert "watchdog decisions: resume_instance" in text
    assert "FINISHED: Succeeded after 1 resume(s)" in text and "0 made twice" in text


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("provision-tenant", "--input", "{not json"), "--input is not valid JSON"),
        (("provision-tenant", "--input", "[1, 2]"), "--input must be a JSON object"),
    ],
)
def test_a_bad_input_is_one_error_line(capsys, argv, expected):
    code, _ = run_demo(*argv)
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {expected}") and err.count("\n") == 1, err


@pytest.mark.parametrize("argv", [["order-fulfilment"], ["--serve", "--port", "1"]], ids=["demo", "serve"])
def test_a_broken_workflow_file_is_one_error_line(capsys, broken_definitions, argv):
    """The plain demo and ``--serve`` alike: one line naming the file, before anything is started
    (``--serve`` once printed a 44-line traceback)."""
    code, _ = run_demo(*argv)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"workflows/{broken_definitions}; did you mean 'agent'?" in err


def test_an_agent_without_a_handler_is_one_error_line(capsys, tmp_path, monkeypatch):
    from workflow_core.workflows import loader

    for path in loader.DEFAULT_DIRECTORY.glob("*.yaml"):
        text = path.read_text().replace("agent: email.send_welcome", "agent: email.send_postcard")
        (tmp_path / path.name).write_text(text)
    monkeypatch.setattr(loader, "DEFAULT_DIRECTORY", tmp_path)
    loader.clear_workflow_cache()
    try:
        code, _ = run_demo("provision-tenant")
    finally:
        loader.clear_workflow_cache()
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "no handler: email.send_postcard (used by" in err and "@agent(name)" in err


# ``python -m devtools.demo`` with the console demo's fixed places moved: a developer's running demo
# (port 7071, Azurite on 10000-10002, the checkout's .azurite/ and local.settings.json) is never touched.
SERVE = """import sys
from devtools import console_demo, demo
console_demo.DEFAULT_PORT = int(sys.argv[1])
console_demo.AZURITE_PORTS = tuple(int(p) for p in sys.argv[2].split(","))
console_demo.STATE = console_demo.Path(sys.argv[3]) / "azurite"
console_demo.LOCAL_SETTINGS = console_demo.Path(sys.argv[3]) / "local.settings.json"
sys.exit(demo.main(sys.argv[4:]))
"""


@pytest.fixture
def places(tmp_path):
    """Free ports for the demo's default HTTP port and its default Azurite, and a folder for its state."""
    import contextlib
    import socket

    with contextlib.ExitStack() as held:  # all bound at once: four distinct ports
        sockets = [held.enter_context(socket.socket()) for _ in range(4)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        port, *azurite = (s.getsockname()[1] for s in sockets)
    return {"port": port, "azurite": tuple(azurite), "folder": tmp_path}


def serve(places, *argv: str):
    """``python -m devtools.demo --serve`` in its own process at ``places``, its output on a pipe."""
    import subprocess
    import sys
    from pathlib import Path

    ports = ",".join(map(str, places["azurite"]))
    return subprocess.Popen(
        [sys.executable, "-c", SERVE, str(places["port"]), ports, str(places["folder"]), "--serve", *argv],
        cwd=Path(__file__).resolve().parent.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def read_until(proc, marker: str, seconds: float = 180) -> str:
    """The process's output up to the line holding ``marker`` (or all of it, if it ends first)."""
    import time

    lines: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not any(marker in line for line in lines):
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
    return "".join(lines)


def test_sigterm_stops_the_console_demo_and_the_azurite_it_started(places):
    """``./scripts/demo --serve`` under a service manager or ``kill``: SIGTERM stops it like Ctrl-C,
    and the Azurite it started on the default ports goes with it (it once kept running)."""
    import signal

    from devtools.azurite import port_open

    table_port = places["azurite"][2]
    proc = serve(places)
    try:
        text = read_until(proc, "console :")
        assert "console :" in text, text
        assert f"console : http://127.0.0.1:{places['port']}/api/console/" in text
        assert port_open(table_port) and (places["folder"] / "azurite").is_dir()
        assert (places["folder"] / "local.settings.json").is_file()
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "stopped" in rest and "Traceback" not in rest, rest
    assert not port_open(table_port)


def test_help_names_serve(capsys):
    with pytest.raises(SystemExit):
        demo._parse(["--help"])
    assert "--serve" in capsys.readouterr().out


def test_a_second_console_demo_moves_over_lists_its_faults_and_a_newcomers_start_succeeds(places):
    """Another demo has the default port: this one takes the next free port and an Azurite of its own
    (never the other's ledger), says how to point ``sas`` at it, lists the faults it seeded with (all
    cleared), and a newcomer's own start through its API runs to Succeeded."""
    import json
    import re
    import signal
    import socket
    import time
    import urllib.request

    from operator_cli.cli import main as sas

    default_port = places["port"]
    other = socket.socket()
    other.bind(("127.0.0.1", default_port))  # another demo (or func start) has the default port
    other.listen()
    proc = serve(places)
    try:
        text = read_until(proc, "Ctrl-C")
        assert "Ctrl-C" in text, text
        assert f"port {default_port} is taken" in text
        own = re.search(r"starting Azurite on (\d+)-(\d+) for this demo", text)
        assert own and int(own.group(1)) != places["azurite"][0], text
        assert f"state in {places['folder'] / 'azurite' / 'demo-'}" in text
        faults = text.split("all cleared now")[1].split("console :")[0]
        assert "register_dns (dns.register)" in faults and "charge_payment (payments.refund)" in faults
        url = re.search(r"console : (http://127\.0\.0\.1:(\d+))/api/console/", text)
        assert url and int(url.group(2)) != default_port
        hint = re.search(r"--connection-string '([^']+)' list", text)
        assert hint, text

        out = io.StringIO()
        assert sas(["--connection-string", hint.group(1), "list"], stdout=out, stderr=out) == 0, (
            out.getvalue()
        )
        assert "demo-running-" in out.getvalue()

        body = json.dumps({"tenant_id": "newcomer", "admin_email": "me@example.com"}).encode()
        request = urllib.request.Request(
            f"{url.group(1)}/api/workflows/provision-tenant/instances",
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "X-SAS-Client": "curl"},
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            instance_id = json.loads(answer.read())["instanceId"]
        status = None
        until = time.monotonic() + 60
        while time.monotonic() < until and status not in ("Succeeded", "Compensated", "Failed"):
            with urllib.request.urlopen(f"{url.group(1)}/api/instances/{instance_id}", timeout=30) as got:
                status = json.loads(got.read())["record"]["status"]
            time.sleep(0.5)
        assert status == "Succeeded"

        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        other.close()
    assert proc.returncode == 0 and "Traceback" not in rest, rest
    with socket.socket() as s:
        s.settimeout(0.2)
        assert s.connect_ex(("127.0.0.1", int(own.group(2)))) != 0  # its own Azurite went with it
