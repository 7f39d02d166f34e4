"""The Logic App agent (``examples/logic-app-agent``) keeps the message contract, checked statically
(``tests/examples/logic_app_contract.py``: no Logic Apps runtime runs here): its field reads and
writes resolve in the published schemas, its action graph keeps the contract's order, and a renamed
field or a removed branch is caught (the mutation tests below)."""

from __future__ import annotations

import copy
import json
import re

import pytest

from tests.examples import logic_app_contract as contract


@pytest.fixture
def workflow():
    return contract.load_workflow()


@pytest.fixture
def schemas():
    return contract.load_schemas()


def test_the_workflow_keeps_the_contract(workflow, schemas):
    assert contract.problems(workflow, schemas) == []


def test_the_project_files_are_a_logic_apps_standard_project():
    """host.json names the workflows extension bundle; the Service Bus connection is the built-in
    connector on the app's managed identity (no connection string); every parameter the workflow
    uses is declared in parameters.json from an app setting; the workflow is stateful."""
    host = json.loads((contract.EXAMPLE / "host.json").read_text())
    assert host["extensionBundle"]["id"] == "Microsoft.Azure.Functions.ExtensionBundle.Workflows"
    connections = json.loads((contract.EXAMPLE / "connections.json").read_text())
    bus = connections["serviceProviderConnections"]["serviceBus"]
    assert bus["serviceProvider"]["id"] == "/serviceProviders/serviceBus"
    assert bus["parameterValues"]["authProvider"] == {"Type": "ManagedServiceIdentity"}
    assert "connectionString" not in bus["parameterValues"]
    parameters = json.loads((contract.EXAMPLE / "parameters.json").read_text())
    text = (contract.WORKFLOW).read_text()
    used = set(re.findall(r"parameters\('(\w+)'\)", text))
    assert used == set(parameters), used ^ set(parameters)
    assert all(p["value"].startswith("@appsetting('SAS_") for p in parameters.values())
    workflow = json.loads(text)
    assert workflow["kind"] == "Stateful"
    [trigger] = workflow["definition"]["triggers"].values()
    assert trigger["inputs"]["serviceProviderConfiguration"]["operationId"] == "peekLockQueueMessagesV2"


@pytest.mark.parametrize("schema", ["work-message", "result-message", "heartbeat-message"])
def test_renaming_reply_token_in_a_schema_is_caught(workflow, schemas, schema):
    props = schemas[schema]["properties"]
    props["reply_token_v4"] = props.pop("reply_token")
    if "reply_token" in schemas[schema].get("required", []):
        schemas[schema]["required"] = [
            "reply_token_v4" if r == "reply_token" else r for r in schemas[schema]["required"]
        ]
    found = contract.problems(workflow, schemas)
    assert any("reply_token" in line for line in found), found


def test_renaming_current_in_the_answer_schema_is_caught(workflow, schemas):
    props = schemas["attempt-status"]["properties"]
    props["is_current"] = props.pop("current")
    found = contract.problems(workflow, schemas)
    assert any("reads current, which attempt-status" in line for line in found), found


def _remove(workflow: dict, *names: str, rewire: dict[str, dict]) -> dict:
    """The workflow without the top-level actions ``names``, ``rewire`` giving new runAfters."""
    changed = copy.deepcopy(workflow)
    top = changed["definition"]["actions"]
    for name in names:
        del top[name]
    for name, run_after in rewire.items():
        top[name]["runAfter"] = run_after
    return changed


def test_removing_the_current_check_before_the_effect_is_caught(workflow, schemas):
    mutated = _remove(
        workflow,
        "Refuse_stale_attempt",
        rewire={"Call_remote_service": {"Stop_without_an_answer": ["Succeeded"]}},
    )
    found = contract.problems(mutated, schemas)
    assert "effect Call_remote_service does not come after the answer's `current` check" in found, found


def test_removing_the_whole_ask_before_effect_branch_is_caught(workflow, schemas):
    mutated = _remove(
        workflow,
        "Initialize_correlation_id",
        "Initialize_answer",
        "Asking_heartbeat",
        "Send_asking_heartbeat",
        "Wait_for_the_answer",
        "Stop_without_an_answer",
        "Refuse_stale_attempt",
        rewire={"Call_remote_service": {"Refuse_blob_input": ["Succeeded"]}},
    )
    found = contract.problems(mutated, schemas)
    line = "effect Call_remote_service does not come after the asking heartbeat (answer_queue)"
    assert line in found, found


def test_completing_before_the_reply_is_caught(workflow, schemas):
    mutated = copy.deepcopy(workflow)
    mutated["definition"]["actions"]["Complete_after_success_reply"]["runAfter"] = {
        "Call_remote_service": ["Succeeded"]
    }
    found = contract.problems(mutated, schemas)
    assert any(line.startswith("Complete_after_success_reply completes the work message") for line in found)


def test_completing_whatever_the_reply_did_is_caught(workflow, schemas):
    """A completion that also runs when the reply failed to send completes without a reply."""
    mutated = copy.deepcopy(workflow)
    mutated["definition"]["actions"]["Complete_after_failure_reply"]["runAfter"] = {
        "Send_failure_reply": ["Succeeded", "Failed"]
    }
    found = contract.problems(mutated, schemas)
    assert any(line.startswith("Complete_after_failure_reply completes the work message") for line in found)


def test_checks_out_of_order_are_caught(workflow, schemas):
    """The blob-input check moved before the misrouting check (docs/agents.md gives the order)."""
    mutated = copy.deepcopy(workflow)
    top = mutated["definition"]["actions"]
    top["Refuse_blob_input"]["runAfter"] = {"Refuse_expired_work": ["Succeeded"]}
    top["Refuse_misrouted_work"]["runAfter"] = {"Refuse_blob_input": ["Succeeded"]}
    top["Initialize_correlation_id"]["runAfter"] = {"Refuse_misrouted_work": ["Succeeded"]}
    found = contract.problems(mutated, schemas)
    assert "Refuse_blob_input does not come after Refuse_misrouted_work: the checks are out of order" in found
