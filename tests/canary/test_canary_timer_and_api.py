"""The canary's tick (start through the one starter, terminate for scheduler-lost, judge later), run by
the maintenance timer, and ``GET /api/canary``, in the in-process durable host with the real ledger on
Azurite."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import azure.functions as func
import pytest

from devtools.harness import PatternHarness
from supervisor.canary import runs as canary
from workflow_core.canary import SCENARIOS
from workflow_core.settings import canary_settings

HOUR = timedelta(hours=1)
ON = canary_settings({"CANARY_ENABLED": "true"})


@pytest.fixture
def harness_options(monkeypatch):
    monkeypatch.delenv("CANARY_ENABLED", raising=False)
    return {}


def _get(h: PatternHarness, **params: str):
    request = func.HttpRequest("GET", f"{h.host.base_url}/api/canary", params=params, body=b"")
    response = h.host.call("http_canary", request, client=h.host.client)
    return response.status_code, json.loads(response.get_body())


def _hour_of(scenario: str) -> datetime:
    return datetime(2030, 1, 1, tzinfo=UTC) + list(SCENARIOS).index(scenario) * HOUR


def test_the_scenario_rotates_each_period():
    seen = [canary.scenario_for(_hour_of("lost-reply") + n * HOUR, HOUR) for n in range(len(SCENARIOS))]
    assert sorted(seen) == sorted(SCENARIOS)


def test_a_tick_starts_a_run_and_a_later_tick_records_its_verdict(harness, monkeypatch):
    h = harness
    monkeypatch.setenv("CANARY_ENABLED", "true")
    assert _get(h)[1]["state"] == "none"
    done = h.host.run_async(canary.canary_tick(h.services, h.host.client, ON, now=_hour_of("scheduler-lost")))
    assert list(done["started"]) == ["default"]  # one run per canary pool: here the one hosted pool
    iid = done["started"]["default"]
    assert done["scenario"] == "scheduler-lost" and h.host.get_status(iid).runtime_status.name == "Terminated"
    h.run_until(lambda: h.ledger.get_instance(iid).status.value == "Succeeded", timeout=timedelta(minutes=10))
    later = h.host.run_async(canary.canary_tick(h.services, h.host.client, ON, now=h.now()))
    assert later["judged"] == [iid]
    status, body = _get(h)
    assert status == 200 and body["state"] == "passed" and body["enabled"] is True
    assert (
        body["pools"]["default"]["state"] == "passed"
        and body["pools"]["default"]["last"]["instance_id"] == iid
    )
    (verdict,) = body["verdicts"]
    assert verdict["instance_id"] == iid and verdict["scenario"] == "scheduler-lost"
    assert verdict["recovery_seconds"] <= verdict["expected_seconds"]


@pytest.mark.parametrize("limit", ["0", "51", "-1", "abc", "1e3", "9" * 400, ""])
def test_a_bad_limit_is_a_clear_400(harness, limit):
    status, body = _get(harness, limit=limit)
    assert status == 400 and "limit" in json.dumps(body)


def test_off_the_canary_says_so_and_how_to_turn_it_on_and_still_judges_a_run_by_hand(harness, monkeypatch):
    h = harness
    status, body = _get(h)
    assert status == 200 and body["state"] == "off" and body["enabled"] is False
    assert "CANARY_ENABLED=true" in body["how_to_enable"]
    iid = h.start_workflow("sas-canary", {"scenario": "retry"})  # as `sas canary run` does
    h.run_until_complete(iid)
    off = canary_settings({})
    done = h.host.run_async(canary.canary_tick(h.services, h.host.client, off, now=h.now()))
    assert done["started"] == {} and done["judged"] == [iid]
    _, body = _get(h)
    assert body["state"] == "off" and body["verdicts"][0]["instance_id"] == iid
    monkeypatch.setenv("CANARY_SCHEDULE", "0 0 9 * * 1")  # weekly: no even period
    _, body = _get(h)
    assert body["state"] == "off" and "CANARY_SCHEDULE" in body["how_to_enable"]


def test_an_unknown_scenario_is_refused_by_name(harness):
    with pytest.raises(ValueError, match="unknown canary scenario 'nope'"):
        harness.host.run_async(canary.start_canary_run(harness.host.client, harness.services, "nope"))


def _list(h: PatternHarness, route: str, name: str, **params: str):
    request = func.HttpRequest("GET", f"{h.host.base_url}/api/{route}", params=params, body=b"")
    response = h.host.call(name, request, client=h.host.client)
    return response.status_code, json.loads(response.get_body())


def test_canary_runs_are_hidden_from_the_default_list_and_the_inbox(harness):
    h = harness
    canary_id = h.start_workflow("sas-canary", {"scenario": "compensate"})
    # the message-only pool's canary: hidden the same way (nobody serves it here; it only has to exist)
    echo_id = h.start_workflow("sas-canary-echo", {"scenario": "retry", "pool": "default"})
    other_id = h.start_workflow("provision-tenant", {"tenant_id": "t1", "admin_email": "a@example.net"})
    h.run_until_complete(canary_id)
    h.run_until_complete(other_id)
    for iid in (canary_id, echo_id, other_id):  # all flagged: only the ordinary one reaches the inbox
        record = h.ledger.get_instance(iid)
        h.ledger.update_instance(record, actor="test", reason="flag", needs_attention=True)

    def ids(**params: str) -> set[str]:
        status, body = _list(h, "instances", "http_list_instances", **params)
        assert status == 200, body
        return {i["instanceId"] for i in body["instances"]}

    assert ids() == {other_id}
    assert ids(canary="include") == {canary_id, echo_id, other_id}
    assert ids(workflow="sas-canary") == {canary_id}
    assert ids(workflow="sas-canary-echo") == {echo_id}
    assert _list(h, "instances", "http_list_instances", canary="bogus")[0] == 400
    _, inbox = _list(h, "attention", "http_attention")
    assert [i["instanceId"] for i in inbox["instances"]] == [other_id]
    _, everything = _list(h, "attention", "http_attention", canary="include")
    assert {i["instanceId"] for i in everything["instances"]} == {canary_id, echo_id, other_id}
    assert _list(h, "attention", "http_attention", canary="x" * 5000)[0] == 400


def _post_run(h: PatternHarness, body: bytes, **headers: str):
    request = func.HttpRequest(
        "POST",
        f"{h.host.base_url}/api/canary/runs",
        headers={"Content-Type": "application/json", "X-SAS-Client": "test", **headers},
        params={},
        body=body,
    )
    response = h.host.call("http_canary_run", request, client=h.host.client)
    return response.status_code, json.loads(response.get_body())


def test_post_canary_runs_starts_one_and_refuses_bad_bodies(harness):
    h = harness
    status, body = _post_run(h, b'{"scenario": "retry"}')
    assert status == 202 and body["scenario"] == "retry"
    h.run_until_complete(body["instanceId"])
    assert h.ledger.get_instance(body["instanceId"]).workflow == "sas-canary"
    for bad in (
        b'{"scenario": "nope"}',
        b'{"scenario": 3}',
        b"{}",
        b'{"scenario": "retry", "extra": 1}',
        b"[1]",
        b"not json",
        b'{"scenario": "' + b"x" * 100_000 + b'"}',
        b'{"scenario": "retry", "pool": "nowhere"}',
        b'{"scenario": "retry", "pool": ["default"]}',
        b'{"scenario": "retry", "pool": "' + b"p" * 5000 + b'"}',
    ):
        status, problem = _post_run(h, bad)
        assert status == 400, (bad[:40], problem)
    assert _post_run(h, b'{"scenario": "retry"}', **{"X-SAS-Client": ""})[0] == 400
    status, problem = _post_run(h, b'{"scenario": "retry", "pool": "nowhere"}')
    assert "canary pools: default" in json.dumps(problem)
    status, body = _post_run(h, b'{"scenario": "retry", "pool": "default"}')
    assert status == 202 and body["pool"] == "default"


def test_sas_canary_prints_the_verdicts_and_run_refuses_clearly(harness, azurite):
    import io

    from devtools.azurite import env_for
    from operator_cli.cli import main

    h = harness
    iid = h.start_workflow("sas-canary", {"scenario": "retry"})
    h.run_until_complete(iid)
    h.host.run_async(canary.canary_tick(h.services, h.host.client, ON, now=h.now()))
    settings = h.services.settings
    conn = [
        "--connection-string",
        env_for(azurite)["AzureWebJobsStorage"],
        "--ledger-table",
        settings.ledger_table,
        "--index-table",
        settings.deadline_index_table,
    ]

    def run(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        return main([*conn, *argv], stdout=out, stderr=err), out.getvalue(), err.getvalue()

    code, out, _ = run("canary")
    assert code == 0 and "canary: passed" in out and iid in out and "retry" in out
    assert "pool default: passed" in out
    code, out, _ = run("canary", "--output", "json")
    assert code == 0 and json.loads(out)["verdicts"][0]["instance_id"] == iid
    code, _, err = run("canary", "run", "--scenario", "nope")
    assert code == 2 and "unknown scenario 'nope'" in err
    code, _, err = run("canary", "run", "--scenario", "retry", "--url", "ftp://x")
    assert code == 7 and "http(s) URL" in err
    code, _, err = run("canary", "run", "--scenario", "retry", "--url", "http://127.0.0.1:9")
    assert code == 7 and "cannot reach" in err


def test_a_disabled_canary_starts_nothing(harness):
    class Untouchable:
        def __getattr__(self, name: str):
            raise AssertionError(f"a disabled canary used the Durable client ({name})")

    off = canary_settings({"CANARY_ENABLED": "off"})
    done = harness.host.run_async(canary.canary_tick(harness.services, Untouchable(), off))
    assert done["started"] == {}
