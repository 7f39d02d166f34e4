"""The watchdog's Azure Function: its bindings as the host indexes them, and its body."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import azure.durable_functions as df
from azure.functions.timer import TimerRequest

import supervisor
from supervisor import watchdog
from tests.helpers.durable import RecordingClient
from tests.helpers.rows import NOW, make_step
from workflow_core import clock
from workflow_core.contracts import WATCHDOG_FUNCTION
from workflow_core.ledger import StepStatus
from workflow_core.runtime import reset_services

REPO = Path(__file__).resolve().parents[2]


def _function_json(blueprint) -> dict:
    app = df.DFApp()
    app.register_blueprint(blueprint)
    (function,) = app.get_functions()
    assert function.get_function_name() == WATCHDOG_FUNCTION
    return json.loads(function.get_function_json())


def test_blueprint_registers_a_timer_with_a_durable_client():
    bindings = {b["type"]: b for b in _function_json(supervisor.blueprint)["bindings"]}
    assert set(bindings) == {"timerTrigger", "durableClient"}
    timer = bindings["timerTrigger"]
    assert timer["schedule"] == "%WATCHDOG_SCHEDULE%"
    assert timer["runOnStartup"] is False  # off unless WATCHDOG_RUN_ON_STARTUP says otherwise
    assert bindings["durableClient"]["name"] == "client"


def test_run_on_startup_is_read_from_the_settings_at_import():
    script = (
        "import json, azure.durable_functions as df, supervisor\n"
        "app = df.DFApp(); app.register_blueprint(supervisor.blueprint)\n"
        "(f,) = app.get_functions()\n"
        "print(json.dumps([b.get('runOnStartup') for b in json.loads(f.get_function_json())['bindings']]))\n"
    )
    env = {
        **os.environ,
        "AzureWebJobsStorage": "UseDevelopmentStorage=true",
        "AGENT_TRANSPORT": "storage-queue",
        "WATCHDOG_RUN_ON_STARTUP": "true",
        "PYTHONPATH": str(REPO),
    }
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert True in json.loads(done.stdout.strip().splitlines()[-1])


def test_function_body_runs_a_tick_with_the_apps_services(app_env, monkeypatch, services):
    for name, value in app_env.items():
        monkeypatch.setenv(name, value)
    reset_services()
    try:
        make_step(services.ledger, "wf-fn", StepStatus.RUNNING)
        client = RecordingClient({"wf-fn": "Running"})
        body = watchdog.supervisor_watchdog._function.get_user_function().__wrapped__  # under the client shim
        with clock.use_clock(lambda: NOW):
            asyncio.run(body(timer=TimerRequest(past_due=True), client=client))
        assert [name for _, name, _ in client.events] == ["result:create_storage:1"]
    finally:
        reset_services()
