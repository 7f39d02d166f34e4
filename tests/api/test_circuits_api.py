"""``GET /api/circuits``, ``POST /api/circuits/{agent}/{open|close}`` and the inbox's circuits:
the same door, reason, idempotency and audit as every operator action; hostile input refused."""

from __future__ import annotations

import pytest

from api.circuits_api import circuit_action, list_circuits
from api.operator_api import attention
from tests.activities.test_pool_routing import declare_pools
from tests.api.support import http_request, json_of, principal_headers
from workflow_core.workflows.pools import clear_pools_cache

POOLS = """agents:
  pay.refund:
    max_in_flight: 2
    circuit: {failure_threshold: 3, open_seconds: 30}
  slow.only:
    max_in_flight: 1
"""


@pytest.fixture
def limited(monkeypatch, tmp_path):
    clear_pools_cache()
    declare_pools(monkeypatch, tmp_path, POOLS)
    yield
    clear_pools_cache()


def act(agent: str, action: str, body=None, headers=None):
    return http_request(
        "POST",
        f"/api/circuits/{agent}/{action}",
        body={"reason": "payments maintenance"} if body is None else body,
        route_params={"agent": agent, "action": action},
        headers=headers,
    )


def test_no_limits_no_circuits(run, client, services):
    body = json_of(run(list_circuits(http_request("GET", "/api/circuits"), client, services)))
    assert body["circuits"] == []


def test_operator_open_and_close_are_audited_replayed_and_shown_in_the_inbox(run, client, services, limited):
    body = json_of(run(list_circuits(http_request("GET", "/api/circuits"), client, services)))
    assert [(c["agent"], c["state"], c["max_in_flight"]) for c in body["circuits"]] == [
        ("pay.refund", "closed", 2),
        ("slow.only", "closed", 1),
    ]
    request = act("pay.refund", "open")
    opened = run(circuit_action(request, client, services))
    assert opened.status_code == 200
    circuit = json_of(opened)["circuit"]
    assert (circuit["state"], circuit["manual"], circuit["open_until"]) == ("open", True, None)
    again = run(circuit_action(request, client, services))  # the same Idempotency-Key: replayed
    assert again.headers.get("Idempotent-Replayed") == "true"
    inbox = json_of(run(attention(http_request("GET", "/api/attention"), client, services)))
    (line,) = inbox["circuits"]
    assert line["agent"] == "pay.refund"
    assert line["text"].startswith("circuit open by an operator for pay.refund since ")
    run(circuit_action(act("pay.refund", "close", {"reason": "back"}), client, services))
    trail = services.circuits.audit("pay.refund")
    assert [(a["action"], a["to"], a["reason"]) for a in trail] == [
        ("operator_open", "open", "payments maintenance"),
        ("operator_close", "closed", "back"),
    ]
    assert all(a["actor"].startswith("operator:") for a in trail)
    inbox = json_of(run(attention(http_request("GET", "/api/attention"), client, services)))
    assert inbox["circuits"] == []


@pytest.mark.parametrize(
    ("agent", "action", "body", "status", "code"),
    [
        ("pay.refund", "toggle", None, 404, "unknown-action"),
        ("slow.only", "open", None, 404, "not-found"),  # limits, but no circuit
        ("nobody", "open", None, 404, "not-found"),
        ("../pay.refund", "open", None, 404, "not-found"),
        ("p" * 5000, "open", None, 404, "not-found"),
        ("pay.refund", "open", {}, 400, "reason-required"),
        ("pay.refund", "open", {"reason": "  "}, 400, "reason-required"),
        ("pay.refund", "open", {"reason": 7}, 400, "reason-required"),
        ("pay.refund", "open", {"reason": "x" * 5000}, 400, "invalid-body"),
        ("pay.refund", "open", "[1, 2]", 400, None),
        ("pay.refund", "open", "{not json", 400, None),
    ],
)
def test_hostile_requests_are_refused(run, client, services, limited, agent, action, body, status, code):
    response = run(circuit_action(act(agent, action, body), client, services))
    problem = json_of(response)
    assert response.status_code == status, problem
    if code:
        assert problem["code"] == code
    assert services.circuits.audit("pay.refund") == []


def test_the_door_needs_the_operate_role_and_the_idempotency_key(
    run, client, services, limited, platform_auth
):
    reader = principal_headers("ann", roles=("Workflows.Read",))
    assert run(circuit_action(act("pay.refund", "open", headers=reader), client, services)).status_code == 403
    operator = principal_headers("bob")
    opened = run(circuit_action(act("pay.refund", "open", headers=operator), client, services))
    assert opened.status_code == 200 and json_of(opened)["actor"] == "operator:bob"
    no_key = act("pay.refund", "close", headers={**operator, "Idempotency-Key": ""})
    assert json_of(run(circuit_action(no_key, client, services)))["code"] == "idempotency-key-required"


def test_an_operators_close_wakes_the_steps_parked_behind_the_circuit(run, client, services, limited, stub):
    from datetime import timedelta

    from workflow_core import clock
    from workflow_core.limits import Holder
    from workflow_core.workflows.loader import agent_pools

    run(circuit_action(act("pay.refund", "open"), client, services))
    stub.add_instance("orch-parked", runtime_status="Running")
    now = clock.utcnow()
    limits = agent_pools().limits_of("pay.refund")
    parked = services.limits.admit(
        "pay.refund", limits, Holder("i-parked", "s", 1), now + timedelta(minutes=1), now, "orch-parked"
    )
    assert not parked.admitted and parked.wake
    assert stub.instances["orch-parked"].events == []
    run(circuit_action(act("pay.refund", "close", {"reason": "back"}), client, services))
    assert stub.instances["orch-parked"].events == [(parked.wake, None)]
