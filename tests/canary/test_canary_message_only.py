"""A message-only pool that opts in (``canary: true``) is exercised with ``sas-canary-echo``, served by
its own agent through the conformance echo contract, in the in-process durable host on Azurite (real
orchestrators, result handler, watchdog; the harness's virtual clock): every scenario passes within
its stated recovery, and a pool without an agent fails with a verdict naming the pool and the agent."""

from __future__ import annotations

import contextlib
from datetime import timedelta

import pytest

from devtools.harness import PatternHarness
from supervisor.canary import latest_verdicts, verify_runs
from supervisor.canary.runs import start_canary_run
from tests.helpers.message_only_echo import MessageOnlyEcho
from workflow_core.canary import ECHO_FAULTS, SCENARIOS, expected_recovery_seconds

PERIOD, GRACE = 30.0, 30.0
EDGE = "pools:\n  edge:\n    message_only: true\n    canary: true\n"
EXPECTED_AGENT_WORK = {  # what the agent saw, in order: the fault where the scenario puts it
    "lost-reply": [
        ("probe", "work", 1, "silent"),
        ("probe", "work", 2, "echo"),
        ("finish", "work", 1, "echo"),
    ],
    "retry": [("probe", "work", 1, "fail"), ("probe", "work", 2, "echo"), ("finish", "work", 1, "echo")],
    "compensate": [
        ("probe", "work", 1, "echo"),
        ("finish", "work", 1, "fail-permanently"),
        ("probe", "compensate", 1, "undone"),
    ],
    "scheduler-lost": [("probe", "work", 1, "echo"), ("finish", "work", 1, "echo")],
    "heartbeat-stops": [
        ("probe", "work", 1, "heartbeat-then-silent"),
        ("probe", "work", 2, "echo"),
        ("finish", "work", 1, "echo"),
    ],
}


@pytest.fixture
def edge(azurite):
    """The app hosts ``default`` only; ``edge`` is message-only and opted in, nobody serves it yet."""
    settings = {"WATCHDOG_GRACE_SECONDS": str(int(GRACE))}
    with PatternHarness(
        azurite, settings=settings, extra_workflows={"pools": EDGE}, hosted_pools=["default"]
    ) as h:
        yield h


def _start(h: PatternHarness, scenario: str) -> str:
    return h.host.run_async(start_canary_run(h.host.client, h.services, scenario, "edge"))


def _verdict(h: PatternHarness, iid: str, *, later: float = 0.0):
    now = h.now() + timedelta(seconds=later)
    return next(
        v for v in verify_runs(h.ledger, watchdog_period=PERIOD, grace=GRACE, now=now) if v.instance_id == iid
    )


def test_the_scenario_table_and_the_agent_expectations_agree():
    assert list(EXPECTED_AGENT_WORK) == list(SCENARIOS) == list(ECHO_FAULTS)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_each_scenario_passes_in_a_message_only_pool_served_by_its_echo_agent(edge, scenario):
    h = edge
    agent = MessageOnlyEcho(h, "edge")
    iid = _start(h, scenario)
    record = h.ledger.get_instance(iid)
    assert record.workflow == "sas-canary-echo"
    bound = expected_recovery_seconds(
        scenario, watchdog_period=PERIOD, grace=GRACE, workflow_name=record.workflow
    )
    h.run_until(
        lambda: h.ledger.get_instance(iid).status.value not in ("Running", "Compensating"),
        timeout=timedelta(seconds=bound * 2),
    )
    verdict = _verdict(h, iid)
    assert verdict.outcome == "passed" and verdict.pool == "edge", verdict
    assert verdict.recovery_seconds is not None and verdict.recovery_seconds <= verdict.expected_seconds
    assert agent.seen == EXPECTED_AGENT_WORK[scenario]  # the pool's agent did the run's work, the fault too
    summary = latest_verdicts(h.ledger, now=h.now(), pools=["default", "edge"])
    assert summary["pools"]["edge"]["state"] == "passed" and summary["pools"]["default"]["state"] == "none"


@pytest.mark.parametrize("scenario", ["retry", "compensate"])
def test_a_message_only_pool_without_an_agent_fails_naming_the_pool_and_the_agent(edge, scenario):
    h = edge
    iid = _start(h, scenario)
    with contextlib.suppress(TimeoutError):
        h.run_until(lambda: False, timeout=timedelta(minutes=10))
    verdict = _verdict(h, iid, later=600)
    assert verdict.outcome == "failed" and verdict.pool == "edge", verdict
    assert verdict.cause.startswith("pool 'edge':") and "no agent took any attempt" in verdict.cause
    assert "running agent serving conformance.echo?" in verdict.cause, verdict.cause


def test_a_tick_runs_the_echo_canary_in_the_message_only_pool_and_the_canary_in_the_hosted_one(edge):
    from supervisor.canary.runs import canary_tick
    from workflow_core.settings import canary_settings

    h = edge
    MessageOnlyEcho(h, "edge")
    done = h.host.run_async(
        canary_tick(h.services, h.host.client, canary_settings({"CANARY_ENABLED": "true"}), now=h.now())
    )
    assert sorted(done["started"]) == ["default", "edge"]
    workflows = {pool: h.ledger.get_instance(iid).workflow for pool, iid in done["started"].items()}
    assert workflows == {"default": "sas-canary", "edge": "sas-canary-echo"}
    with contextlib.suppress(TimeoutError):
        h.run_until(lambda: False, timeout=timedelta(minutes=10))
    verify_runs(h.ledger, watchdog_period=PERIOD, grace=GRACE, now=h.now())
    summary = latest_verdicts(h.ledger, now=h.now(), pools=["default", "edge"])
    assert {p: s["state"] for p, s in summary["pools"].items()} == {"default": "passed", "edge": "passed"}


@pytest.mark.parametrize("scenario", ["lost-reply", "retry", "compensate", "heartbeat-stops"])
def test_the_sas_agent_echo_serves_the_same_run(azurite, scenario):
    """The same definition served by ``sas-agent --handlers agent_runner.conformance_echo`` (the app's
    worker, which claims in the ledger: here in process, serving the pool's queue)."""
    import agent_runner.conformance_echo  # noqa: F401 - registers conformance.echo in this process
    from workflow_core.canary import echo_input

    settings = {"WATCHDOG_GRACE_SECONDS": str(int(GRACE))}
    pools = {"pools": EDGE}
    with PatternHarness(
        azurite, settings=settings, extra_workflows=pools, hosted_pools=["default", "edge"]
    ) as h:
        iid = h.start_workflow("sas-canary-echo", echo_input(scenario, "edge"))
        bound = expected_recovery_seconds(scenario, watchdog_period=PERIOD, grace=GRACE)
        h.run_until(
            lambda: h.ledger.get_instance(iid).status.value not in ("Running", "Compensating"),
            timeout=timedelta(seconds=bound * 2),
        )
        verdict = _verdict(h, iid)
    assert verdict.outcome == "passed" and verdict.pool == "edge", verdict


def test_post_canary_runs_names_the_definition_the_pool_gets(edge):
    import json

    import azure.functions as func

    h = edge

    def post(body: dict):
        request = func.HttpRequest(
            "POST",
            f"{h.host.base_url}/api/canary/runs",
            headers={"Content-Type": "application/json", "X-SAS-Client": "test"},
            params={},
            body=json.dumps(body).encode(),
        )
        response = h.host.call("http_canary_run", request, client=h.host.client)
        return response.status_code, json.loads(response.get_body())

    status, body = post({"scenario": "compensate", "pool": "edge"})
    assert status == 202 and (body["pool"], body["workflow"]) == ("edge", "sas-canary-echo"), body
    given = json.loads(h.ledger.get_instance(body["instanceId"]).input_ref)
    assert given == {
        "scenario": "compensate",
        "pool": "edge",
        "finish_fault": "fail-permanently",
        "probe_fault": "none",
        "probe_fault_attempts": 1,
        "finish_fault_attempts": 1,
    }
    status, body = post({"scenario": "retry"})
    assert status == 202 and (body["pool"], body["workflow"]) == ("default", "sas-canary"), body
    status, problem = post({"scenario": "retry", "pool": "edge", "workflow": "sas-canary"})
    assert status == 400 and "unknown field 'workflow'" in json.dumps(problem)  # no steering by the caller
