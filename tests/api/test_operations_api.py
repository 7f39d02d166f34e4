"""``POST /api/operations`` and ``GET /api/operations/{id}``: the same door as single actions (a named
caller with the operator role, a reason), the operation recorded first, and hostile bodies refused."""

from __future__ import annotations

import pytest

from api.operations_api import get_operation, start_operation
from tests.api.support import http_request, json_of, principal_headers
from tests.helpers.rows import make_step
from workflow_core.ledger import StepStatus

S = StepStatus
ALICE = principal_headers("alice@contoso.example")


def post(body, headers=ALICE):
    return http_request("POST", "/api/operations", body=body, headers=headers)


def get(op_id, headers=ALICE):
    return http_request(
        "GET", f"/api/operations/{op_id}", route_params={"operation_id": op_id}, headers=headers
    )


def test_bulk_retry_acts_audits_and_reports(run, client, services, ledger, platform_auth):
    for n in range(3):
        make_step(ledger, f"bulk-{n}", S.FAILED)
    body = {"action": "retry", "filter": {"errorContains": "boom"}, "reason": "service back"}
    response = run(start_operation(post(body), client, services))
    result = json_of(response)
    assert response.status_code == 200, result
    assert sorted(result["acted"]) == ["bulk-0", "bulk-1", "bulk-2"]
    assert result["actor"] == "operator:alice@contoso.example"
    for n in range(3):
        (move,) = [a for a in ledger.audit_trail(f"bulk-{n}") if f"[bulk {result['id']}]" in a.reason]
        assert move.actor == "operator:alice@contoso.example"
    again = json_of(run(get_operation(get(result["id"]), client, services)))
    assert again["counts"]["acted"] == 3 and again["done"]


def test_dry_run_changes_nothing(run, client, services, ledger, platform_auth):
    make_step(ledger, "dry-1", S.FAILED)
    body = {"action": "skip", "reason": "look first", "dryRun": True}
    result = json_of(run(start_operation(post(body), client, services)))
    assert result["wouldAct"] == ["dry-1"] and result["acted"] == []
    assert ledger.get("dry-1", "create_storage").status is S.FAILED


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"action": "retry"}, "reason-required"),
        ({"action": "explode", "reason": "x"}, "unknown-action"),
        ({"action": "retry", "reason": "x", "filter": {"nope": 1}}, "invalid-request"),
        ({"action": "retry", "reason": "x", "filter": []}, "invalid-request"),
        ({"action": "retry", "reason": "x", "filter": {"startedAfter": "yesterday"}}, "invalid-request"),
        (
            {"action": "retry", "reason": "x", "filter": {"startedAfter": "2030-01-01T00:00:00"}},
            "invalid-request",
        ),
        ({"action": "retry", "reason": "x", "filter": {"errorContains": "e" * 501}}, "invalid-request"),
        ({"action": "retry", "reason": "x" * 2001}, "invalid-request"),
        ({"action": "retry", "reason": "x", "dryRun": "yes"}, "invalid-request"),
        ({"action": "retry", "reason": "x", "extra": 1}, "invalid-request"),
    ],
)
def test_malformed_bodies_are_clear_400s(run, client, services, ledger, platform_auth, body, code):
    response = run(start_operation(post(body), client, services))
    assert response.status_code == 400 and json_of(response)["code"] == code


def test_an_anonymous_caller_cannot_start_one(run, client, services, ledger, platform_auth):
    response = run(start_operation(post({"action": "retry", "reason": "x"}, headers={}), client, services))
    assert response.status_code in (401, 403)


@pytest.mark.parametrize("op_id", ["nope", "../x", "a" * 65, "20300101T000000-deadbeef"])
def test_unknown_or_forged_ids_are_404(run, client, services, ledger, platform_auth, op_id):
    response = run(get_operation(get(op_id), client, services))
    assert response.status_code == 404


def test_bulk_operations_with_a_bad_setting_are_off_with_a_503_naming_it(
    run, client, services, platform_auth, monkeypatch
):
    monkeypatch.setenv("BULK_RATE_PER_SECOND", "fast")
    response = run(start_operation(post({"action": "retry", "reason": "x"}), client, services))
    problem = json_of(response)
    assert response.status_code == 503 and problem["code"] == "settings-invalid"
    assert problem["details"] == ["BULK_RATE_PER_SECOND must be an integer, got 'fast'"]
