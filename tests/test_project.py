"""The project's seams: the Function App composes every role, and docs/config match the code."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from workflow_core import contracts
from workflow_core.settings import DOCUMENTED_SETTINGS

ROOT = Path(__file__).resolve().parents[1]


@lru_cache(maxsize=1)
def registered_functions() -> dict[str, object]:
    """``app.get_functions()`` may be called only once per app; the harness indexes it once per process."""
    from devtools.harness import app_functions

    return {f.get_function_name(): f for f in app_functions()}


def trigger_of(name: str) -> str:
    return registered_functions()[name].get_trigger().type


def test_function_app_registers_every_role_with_the_right_trigger():
    expected = {
        contracts.WORKFLOW_ORCHESTRATOR: "orchestrationTrigger",
        contracts.COMPENSATION_ORCHESTRATOR: "orchestrationTrigger",
        contracts.STEP_ORCHESTRATOR: "orchestrationTrigger",
        contracts.ACTIVITY_CREATE_STEPS: "activityTrigger",
        contracts.ACTIVITY_DISPATCH_STEP: "activityTrigger",
        contracts.ACTIVITY_CHECK_STEP: "activityTrigger",
        contracts.ACTIVITY_SCHEDULE_RETRY: "activityTrigger",
        contracts.ACTIVITY_GIVE_UP_STEP: "activityTrigger",
        contracts.ACTIVITY_PLAN_COMPENSATION: "activityTrigger",
        contracts.ACTIVITY_DISPATCH_COMPENSATION: "activityTrigger",
        contracts.ACTIVITY_CHECK_COMPENSATION: "activityTrigger",
        contracts.ACTIVITY_FINISH_COMPENSATION: "activityTrigger",
        contracts.WATCHDOG_FUNCTION: "timerTrigger",
        "http_start_workflow": "httpTrigger",
        "http_get_workflow": "httpTrigger",
        "http_get_workflow_steps": "httpTrigger",
        "http_list_workflows": "httpTrigger",
        "http_health": "httpTrigger",
    }
    for name, trigger in expected.items():
        assert name in registered_functions(), f"{name} is not registered"
        assert trigger_of(name) == trigger, name
    # Agents: the queue trigger matches AGENT_TRANSPORT (default servicebus in a bare import).
    for name in (contracts.WORKER_FUNCTION, contracts.RESULT_FUNCTION, contracts.DEAD_LETTER_FUNCTION):
        assert trigger_of(name) in ("serviceBusTrigger", "queueTrigger"), name


# The console's static files hold no data (api/functions.py); every route that reads or acts does.
ANONYMOUS_HTTP = {"http_console"}


def test_http_functions_require_a_function_key():
    seen = set()
    for name, fn in registered_functions().items():
        if fn.get_trigger().type == "httpTrigger":
            bindings = json.loads(fn.get_function_json())["bindings"]
            (trigger,) = [b for b in bindings if b["type"] == "httpTrigger"]
            expected = "anonymous" if name in ANONYMOUS_HTTP else "function"
            assert trigger["authLevel"].lower() == expected, name
            seen.add(name)
    assert seen >= ANONYMOUS_HTTP


def test_starter_and_watchdog_get_a_durable_client():
    for name in ("http_start_workflow", contracts.WATCHDOG_FUNCTION, contracts.RESULT_FUNCTION):
        types = [b["type"] for b in json.loads(registered_functions()[name].get_function_json())["bindings"]]
        assert "durableClient" in types, name


def test_host_json_bundle_and_task_hub():
    host = json.loads((ROOT / "host.json").read_text())
    assert host["version"] == "2.0"
    assert host["extensionBundle"]["version"] == "[4.*, 5.0.0)"
    assert host["extensions"]["durableTask"]["hubName"] == "%TASK_HUB_NAME%"
    max_deliveries = int(DOCUMENTED_SETTINGS["MAX_DELIVERY_COUNT"])
    assert host["extensions"]["queues"]["maxDequeueCount"] == max_deliveries


def test_local_settings_example_holds_every_setting_the_code_reads():
    values = json.loads((ROOT / "local.settings.json.example").read_text())["Values"]
    assert values["AzureWebJobsStorage"] == "UseDevelopmentStorage=true"
    assert "UseDevelopmentEmulator=true" in values["ServiceBusConnection"]
    missing = set(DOCUMENTED_SETTINGS) - set(values)
    assert not missing, f"local.settings.json.example lacks {sorted(missing)}"


def test_readme_configuration_table_matches_the_settings_module():
    readme = (ROOT / "README.md").read_text()
    documented = dict(re.findall(r"^\| `([A-Za-z_]+)` \| (.+?) \|", readme, flags=re.M))
    assert documented == {name: f"`{d}`" if d else "—" for name, d in DOCUMENTED_SETTINGS.items()}


def test_readme_opens_with_the_two_commands_and_ci_runs_the_test_one():
    head = (ROOT / "README.md").read_text().split("```")[1]
    commands = [line.split("#")[0].strip() for line in head.strip().splitlines()[1:]]
    assert commands == ["./scripts/start", "./scripts/test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "exec ./scripts/test" in ci
    for script in ("scripts/start", "scripts/test", "scripts/bootstrap"):
        assert (ROOT / script).stat().st_mode & 0o111, f"{script} is not executable"
