"""The shipped workflows end to end, started through the HTTP starter, on a virtual clock.

Each test asserts on three independent records of what happened: the orchestration's output (Durable
host), the step ledger and its audit trail (Azurite tables), and what the agents' handlers did to the
simulated remote services (counted by the harness per instance and step).
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import azure.durable_functions as df
import azure.functions as func

from activities.worker.handlers import faults

Status = df.OrchestrationRuntimeStatus

TENANT = {"admin_email": "admin@contoso.example", "region": "westeurope"}
ORDER = {
    "order_id": "o-1001",
    "customer_id": "c-42",
    "items": [{"sku": "book-1", "quantity": 2}],
    "amount": 59.9,
    "shipping_address": {"city": "Utrecht", "street": "Oudegracht 1"},
}
PROVISION_STEPS = ["create_storage", "register_dns", "send_welcome"]
ORDER_STEPS = ["reserve_stock", "charge_payment", "ship_order"]


def transitions(h, iid, step_id):
    return [
        (e.from_status, e.to_status, e.attempt)
        for e in h.events_for(iid)
        if e.step_id == step_id and e.action == "transition"
    ]


def assert_one_effect_per_step(h, iid, steps):
    assert {s: h.effects(iid, s) for s in steps} == dict.fromkeys(steps, 1)
    assert {s: h.handler_calls(iid, s) for s in steps} == dict.fromkeys(steps, 1)
    assert h.double_effects() == {}


def test_provision_tenant_happy_path_through_the_http_starter(harness):
    h = harness
    iid = h.start_workflow("provision-tenant", {"tenant_id": "contoso", **TENANT})
    started = h.last_start_response
    assert started["workflow"] == "provision-tenant"
    assert started["statusQueryGetUri"] and started["ledgerUrl"].endswith(f"/workflows/{iid}/steps")

    status = h.run_until_complete(iid)

    assert status.runtime_status == Status.Completed
    assert status.output["status"] == "succeeded"
    assert status.output["outputs"]["register_dns"]["fqdn"] == "contoso.example.net"
    assert h.statuses(iid) == dict.fromkeys(PROVISION_STEPS, "Succeeded")
    assert_one_effect_per_step(h, iid, PROVISION_STEPS)
    for step in PROVISION_STEPS:
        assert transitions(h, iid, step) == [
            ("Pending", "Dispatched", 1),
            ("Dispatched", "Running", 1),
            ("Running", "Succeeded", 1),
        ]
    # The audit trail in the ledger holds the same moves (plus the "sent" updates and the creation).
    # (Its order within one instant is not defined, and on the virtual clock most moves share one.)
    audit = h.ledger.audit_trail(iid)
    moves = sorted((a.step_id, a.from_status, a.to_status) for a in audit if a.action == "transition")
    assert moves == sorted(
        (step, before, after)
        for step in PROVISION_STEPS
        for before, after in (("Pending", "Dispatched"), ("Dispatched", "Running"), ("Running", "Succeeded"))
    )
    assert sum(a.action == "created" for a in audit) == 1
    # Nothing was ever overdue: the watchdog never touched a step.
    assert h.decisions(iid) == []


def test_ledger_timeline_is_served_by_the_http_api(harness):
    h = harness
    iid = h.start_workflow("provision-tenant", {"tenant_id": "fabrikam", **TENANT})
    h.run_until_complete(iid)
    request = func.HttpRequest(
        "GET",
        f"{h.host.base_url}/api/workflows/{iid}/steps",
        headers={},
        params={},
        route_params={"instance_id": iid},
        body=b"",
    )
    response = h.host.call("http_get_workflow_steps", request, client=h.host.client)
    assert response.status_code == 200
    body = json.loads(response.get_body())
    assert [s["id"] for s in body["steps"]] == PROVISION_STEPS
    assert {s["status"] for s in body["steps"]} == {"Succeeded"}
    timeline = [(row["step"], row["to"]) for row in body["timeline"] if row["action"] == "transition"]
    assert len(timeline) == 9 and ("send_welcome", "Succeeded") in timeline


def test_order_fulfilment_happy_path(harness):
    h = harness
    iid = h.start_workflow("order-fulfilment", ORDER)
    status = h.run_until_complete(iid)

    assert status.runtime_status == Status.Completed
    assert status.output["status"] == "succeeded"
    assert status.output["outputs"]["charge_payment"]["amount"] == 59.9
    assert h.statuses(iid) == dict.fromkeys(ORDER_STEPS, "Succeeded")
    assert_one_effect_per_step(h, iid, ORDER_STEPS)
    assert h.decisions(iid) == []


def test_a_step_that_fails_twice_is_retried_with_backoff_and_succeeds_on_attempt_3(harness):
    h = harness
    faults.inject("dns.register", faults.Fail(times=2))
    iid = h.start_workflow("provision-tenant", {"tenant_id": "tailspin", **TENANT})
    status = h.run_until_complete(iid)

    assert status.output["status"] == "succeeded"
    dns = h.steps(iid)["register_dns"]
    assert (dns.status.value, dns.attempt) == ("Succeeded", 3)
    assert [
        (e.from_status, e.to_status, e.attempt)
        for e in h.events_for(iid)
        if e.step_id == "register_dns"
        and e.action == "transition"
        and e.to_status in ("Failed", "Retrying", "Succeeded")
    ] == [
        ("Running", "Failed", 1),
        ("Failed", "Retrying", 1),
        ("Running", "Failed", 2),
        ("Failed", "Retrying", 2),
        ("Running", "Succeeded", 3),
    ]
    # Exponential backoff (5 s, then 10 s; jitter shortens each by at most 10 %), on durable timers.
    failed = {
        e.attempt: e.at for e in h.events_for(iid) if e.step_id == "register_dns" and e.to_status == "Failed"
    }
    dispatched = {
        e.attempt: e.at
        for e in h.events_for(iid)
        if e.step_id == "register_dns" and e.action == "transition" and e.to_status == "Dispatched"
    }
    assert timedelta(seconds=4.5) <= dispatched[2] - failed[1] <= timedelta(seconds=5)
    assert timedelta(seconds=9) <= dispatched[3] - failed[2] <= timedelta(seconds=10)
    assert [h.handler_calls(iid, "register_dns", attempt=a) for a in (1, 2, 3)] == [0, 0, 1]  # Fail is before
    assert_one_effect_per_step(h, iid, PROVISION_STEPS)


def test_a_step_that_always_fails_is_compensated_in_reverse_completion_order(harness):
    h = harness
    faults.inject("shipping.create_shipment", faults.Fail())
    iid = h.start_workflow("order-fulfilment", ORDER)
    status = h.run_until_complete(iid, timeout=timedelta(hours=2))

    assert status.runtime_status == Status.Completed
    assert status.output["status"] == "compensated"
    assert status.output["failed_step"] == "ship_order"
    assert h.steps(iid)["ship_order"].attempt == 3
    assert h.statuses(iid) == dict.fromkeys(ORDER_STEPS, "Compensated")
    # The given-up step first (a timed-out attempt may have taken effect), then completed steps in
    # reverse completion order.
    compensated = [
        e.step_id for e in h.events_for(iid) if e.to_status == "Compensated" and e.action == "transition"
    ]
    assert compensated == ["ship_order", "charge_payment", "reserve_stock"]
    # The remote effects of the completed steps are undone, once each; the failed step made none.
    for step in ("reserve_stock", "charge_payment"):
        assert h.effects(iid, step) == 1 and h.effects(iid, step, kind="compensate") == 1
        assert [row["State"] for row in h.remote_effects(iid, step)] == ["undone"]
    assert h.effects(iid, "ship_order") == 0 and h.effects(iid, "ship_order", kind="compensate") == 0
    assert h.double_effects() == {}
    # The audit trail tells the story: Compensating then Compensated for each step.
    audit = [(a.step_id, a.to_status) for a in h.ledger.audit_trail(iid) if a.action == "transition"]
    for step in ORDER_STEPS:
        assert (step, "Compensating") in audit and (step, "Compensated") in audit


DEADLINE_DRILL = {
    "name": "deadline-drill",
    "description": "One step with a ten-minute deadline and three attempts.",
    "input": {"required": ["tenant_id"], "properties": {"tenant_id": {"type": "string"}}},
    "steps": [
        {
            "id": "slow_dns",
            "agent": "dns.register",
            "input": {"tenant_id": "$input.tenant_id"},
            "deadline_seconds": 600,
            "retry": {
                "max_attempts": 3,
                "initial_interval_seconds": 30,
                "backoff_coefficient": 2,
                "jitter": 0,
            },
            "compensation": {"agent": "dns.unregister", "deadline_seconds": 60},
        }
    ],
}


def test_ten_minute_deadlines_times_three_attempts_run_in_virtual_time(azurite):
    from devtools.harness import PatternHarness

    faults.clear()
    faults.inject("dns.register", faults.Stall())  # the agent takes the work and never answers
    try:
        with PatternHarness(azurite, extra_workflows={"deadline-drill": DEADLINE_DRILL}) as h:
            wall = time.monotonic()
            iid = h.start_workflow("deadline-drill", {"tenant_id": "slowpoke"})
            status = h.run_until_complete(iid, timeout=timedelta(hours=2))
            wall = time.monotonic() - wall
            assert status.output["status"] == "compensated"
            dns = h.steps(iid)["slow_dns"]
            assert (dns.status.value, dns.attempt) == ("Compensated", 3)
            timed_out = [
                e for e in h.events_for(iid) if e.to_status == "TimedOut" and e.action == "transition"
            ]
            assert [e.attempt for e in timed_out] == [1, 2, 3]
            # Three 10-minute deadlines and two backoffs (30 s, 60 s) passed on the host clock...
            assert h.elapsed() >= timedelta(minutes=30, seconds=90)
            # ...while the real clock barely moved. Generous bounds: a loaded CI machine; on Service Bus
            # every idle poll of the agents' receivers is a network round trip.
            bound = 300 if h.transport_label.startswith("Service Bus") else 30
            assert wall < bound, f"took {wall:.1f}s of real time"
            assert h.effects(iid, "slow_dns") == 0 and h.double_effects() == {}
    finally:
        faults.clear()


ONBOARD_STEPS = ["create_storage", "register_portal_dns", "register_files_dns", "send_welcome"]
ONBOARD_GROUP = ["register_portal_dns", "register_files_dns"]


def test_onboard_tenant_runs_its_parallel_group_in_step_orchestrations(harness):
    h = harness
    iid = h.start_workflow("onboard-tenant", {"tenant_id": "woodgrove", **TENANT})
    status = h.run_until_complete(iid)

    assert status.runtime_status == Status.Completed
    assert status.output["status"] == "succeeded"
    outputs = status.output["outputs"]
    assert outputs["register_portal_dns"]["fqdn"] == "woodgrove.example.net"
    assert outputs["register_files_dns"]["fqdn"] == "woodgrove.files.example.net"
    assert outputs["register_files_dns"]["target"] == outputs["create_storage"]["endpoint"]
    assert h.statuses(iid) == dict.fromkeys(ONBOARD_STEPS, "Succeeded")
    assert_one_effect_per_step(h, iid, ONBOARD_STEPS)
    steps = h.steps(iid)
    for step in ONBOARD_GROUP:  # each group step was dispatched by, and answered to, its own child
        assert steps[step].orchestration_id == f"{iid}:step:{step}"
        child = h.host.get_status(f"{iid}:step:{step}")
        assert child.runtime_status == Status.Completed
        assert child.output == {
            "succeeded": True,
            "attempts": 1,
            "output": status.output["outputs"][step],
            "error": None,
        }
    assert steps["create_storage"].orchestration_id == iid
    assert steps["send_welcome"].orchestration_id == iid
    # the step after the group started only once both group steps had succeeded
    welcome_dispatched = next(
        e.at for e in h.events_for(iid) if e.step_id == "send_welcome" and e.to_status == "Dispatched"
    )
    assert welcome_dispatched >= max(steps[s].completed_at for s in ONBOARD_GROUP)
    assert h.decisions(iid) == []


def test_a_parallel_step_that_always_fails_compensates_in_reverse_completion_order(harness):
    h = harness
    faults.inject("dns.register", faults.Fail(), step="register_files_dns")
    iid = h.start_workflow("onboard-tenant", {"tenant_id": "litware", **TENANT})
    status = h.run_until_complete(iid, timeout=timedelta(hours=2))

    assert status.runtime_status == Status.Completed
    assert status.output["status"] == "compensated"
    assert status.output["failed_step"] == "register_files_dns"
    steps = h.steps(iid)
    assert steps["register_files_dns"].attempt == 3
    assert steps["send_welcome"].status.value == "Cancelled"  # never ran
    compensated = [
        e.step_id for e in h.events_for(iid) if e.to_status == "Compensated" and e.action == "transition"
    ]
    # The given-up step first, then the completed ones in reverse completion order (per the ledger).
    completed = sorted(
        ("create_storage", "register_portal_dns"), key=lambda s: (steps[s].completed_at, steps[s].sequence)
    )
    assert completed == ["create_storage", "register_portal_dns"]
    assert compensated == ["register_files_dns", *reversed(completed)]
    for step in completed:
        assert h.effects(iid, step) == 1 and h.effects(iid, step, kind="compensate") == 1
        assert [row["State"] for row in h.remote_effects(iid, step)] == ["undone"]
    assert h.effects(iid, "register_files_dns") == 0
    assert h.effects(iid, "send_welcome") == 0
    assert h.double_effects() == {}
