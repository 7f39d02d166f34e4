"""The operator API's actions: each needs a reason, is audited with the caller, and is refused (409,
problem+json naming the allowed moves) when the ledger's state does not allow it."""

from __future__ import annotations

import base64
import json

import pytest

from api.functions import console_file
from api.operator_api import instance_action, step_action
from tests.api.support import http_request, json_of, principal_headers
from tests.helpers.rows import make_step
from workflow_core import clock
from workflow_core.ledger import StepStatus
from workflow_core.workflows import get_workflow, version_of

S = StepStatus
ALICE = principal_headers("alice@contoso.example")


def step_post(instance_id, step_id, action, body=None, headers=None):
    return http_request(
        "POST",
        f"/api/instances/{instance_id}/steps/{step_id}/{action}",
        body=body if body is not None else {"reason": "refund service is back"},
        route_params={"instance_id": instance_id, "step_id": step_id, "action": action},
        headers=headers,
    )


def instance_post(instance_id, action, body=None, headers=None):
    return http_request(
        "POST",
        f"/api/instances/{instance_id}/{action}",
        body=body if body is not None else {"reason": "customer cancelled"},
        route_params={"instance_id": instance_id, "action": action},
        headers=headers,
    )


def operator_moves(ledger, instance_id):
    return [a for a in ledger.audit_trail(instance_id) if a.actor.startswith("operator:")]


def test_retry_of_a_failed_compensation_is_audited_with_the_signed_in_caller(
    run, client, services, ledger, platform_auth
):
    make_step(ledger, "op-cf", S.COMPENSATION_FAILED)

    response = run(
        step_action(step_post("op-cf", "create_storage", "retry", headers=ALICE), client, services)
    )

    body = json_of(response)
    assert response.status_code == 200
    assert body["actor"] == "operator:alice@contoso.example" and body["step"]["status"] == "Compensating"
    assert ledger.get("op-cf", "create_storage").status is S.COMPENSATING
    (move,) = operator_moves(ledger, "op-cf")
    assert (move.actor, move.from_status, move.to_status) == (
        "operator:alice@contoso.example",
        "CompensationFailed",
        "Compensating",
    )
    assert move.reason == "operator retry: refund service is back"


def test_the_caller_comes_from_the_encoded_principal_too(run, client, services, ledger, platform_auth):
    make_step(ledger, "op-claims", S.TIMED_OUT)
    principal = {
        "auth_typ": "aad",
        "name_typ": "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name",
        "claims": [
            {"typ": "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name", "val": "bob@contoso"},
            {"typ": "roles", "val": "Workflows.Operate"},
        ],
    }
    encoded = base64.b64encode(json.dumps(principal).encode()).decode()

    response = run(
        step_action(
            step_post(
                "op-claims",
                "create_storage",
                "skip",
                headers={"X-MS-CLIENT-PRINCIPAL": encoded, "X-MS-CLIENT-PRINCIPAL-IDP": "aad"},
            ),
            client,
            services,
        )
    )

    assert json_of(response)["actor"] == "operator:bob@contoso"
    assert [m.actor for m in operator_moves(ledger, "op-claims")] == ["operator:bob@contoso"]


def test_locally_the_caller_is_the_os_user(run, client, services, ledger, monkeypatch):
    monkeypatch.setattr("api.boundary.getpass.getuser", lambda: "dev-one")
    monkeypatch.delenv("WEBSITE_INSTANCE_ID", raising=False)
    make_step(ledger, "op-local", S.FAILED)

    response = run(step_action(step_post("op-local", "create_storage", "retry"), client, services))

    assert json_of(response)["actor"] == "operator:dev-one"


def test_in_azure_an_unsigned_caller_is_refused(run, client, services, ledger, monkeypatch):
    monkeypatch.setenv("WEBSITE_INSTANCE_ID", "abc123")
    make_step(ledger, "op-anon", S.FAILED)

    response = run(step_action(step_post("op-anon", "create_storage", "retry"), client, services))

    body = json_of(response)
    assert response.status_code == 401 and body["code"] == "unauthenticated"
    assert "App Service Authentication" in body["detail"]
    assert ledger.get("op-anon", "create_storage").status is S.FAILED


def test_a_move_the_ledger_refuses_is_a_409_naming_the_allowed_moves_once(
    run, client, services, ledger, platform_auth
):
    make_step(ledger, "op-done", S.SUCCEEDED)

    response = run(
        step_action(step_post("op-done", "create_storage", "retry", headers=ALICE), client, services)
    )

    body = json_of(response)
    assert response.status_code == 409 and body["code"] == "illegal-move"
    assert body["type"] == "urn:sas:problem:illegal-move"
    assert body["currentStatus"] == "Succeeded" and body["allowedMoves"] == ["Compensating (compensate)"]
    assert "it is Succeeded" in body["error"] and body["error"].lower().count("allowed moves") == 1
    assert ledger.get("op-done", "create_storage").status is S.SUCCEEDED
    assert operator_moves(ledger, "op-done") == []


@pytest.mark.parametrize("body", [{}, {"reason": "   "}, {"reason": 7}])
def test_every_action_needs_a_reason(run, client, services, ledger, body):
    make_step(ledger, "op-why", S.FAILED)

    step = run(step_action(step_post("op-why", "create_storage", "retry", body=body), client, services))
    instance = run(instance_action(instance_post("op-why", "compensate", body=body), client, services))

    for response in (step, instance):
        assert response.status_code == 400 and json_of(response)["code"] == "reason-required"
    assert ledger.get("op-why", "create_storage").status is S.FAILED


def test_unknown_instance_step_and_action_are_404_problems(run, client, services, ledger):
    make_step(ledger, "op-known", S.FAILED)
    cases = [
        (
            step_action(step_post("op-nope", "create_storage", "retry"), client, services),
            "instance-not-found",
        ),
        (step_action(step_post("op-known", "nope", "retry"), client, services), "step-not-found"),
        (step_action(step_post("op-known", "create_storage", "explode"), client, services), "unknown-action"),
        (instance_action(instance_post("op-known", "explode"), client, services), "unknown-action"),
    ]
    for call, code in cases:
        response = run(call)
        assert (response.status_code, json_of(response)["code"]) == (404, code)


def test_compensate_moves_the_failed_step_and_is_audited(run, client, services, ledger, platform_auth):
    make_step(ledger, "op-undo", S.FAILED)

    response = run(instance_action(instance_post("op-undo", "compensate", headers=ALICE), client, services))

    body = json_of(response)
    assert response.status_code == 200 and body["step"]["status"] == "Compensating"
    assert [m.to_status for m in operator_moves(ledger, "op-undo")] == ["Compensating"]


def test_compensate_with_nothing_to_undo_is_refused(run, client, services, ledger):
    make_step(ledger, "op-nothing", S.RUNNING)

    response = run(instance_action(instance_post("op-nothing", "compensate"), client, services))

    body = json_of(response)
    # not a race: no retry can make it succeed, so not a 409
    assert response.status_code == 409 and body["code"] == "nothing-to-compensate"
    assert "nothing to compensate" in body["error"]


def test_stop_marks_the_record_then_terminates_and_a_second_stop_is_refused(
    run, stub, client, services, ledger, platform_auth
):
    ledger.create_instance(
        "op-stop",
        "provision-tenant",
        actor="test",
        input_json="{}",
        scheduler_deadline=clock.utcnow(),
        version=version_of(get_workflow("provision-tenant")),
    )
    stub.add_instance("op-stop", runtime_status="Running")

    response = run(instance_action(instance_post("op-stop", "stop", headers=ALICE), client, services))

    assert response.status_code == 200, response.get_body()
    assert stub.instances["op-stop"].runtime_status == "Terminated"
    assert ledger.get_instance("op-stop").status.value == "Stopped"
    (move,) = operator_moves(ledger, "op-stop")
    assert (move.step_id, move.to_status) == ("*", "Stopped")
    assert move.reason == "operator stop: customer cancelled"

    again = run(instance_action(instance_post("op-stop", "stop", headers=ALICE), client, services))
    body = json_of(again)
    assert again.status_code == 409 and "Stopped" in body["error"]
    gone = run(instance_action(instance_post("op-stop", "terminate", headers=ALICE), client, services))
    assert gone.status_code in (400, 404)  # terminate is no longer an action: stop or cancel


def test_the_console_files_are_served_and_nothing_else(run):
    page = run(console_file(http_request("GET", "/api/console/", route_params={"path": ""})))
    assert page.status_code == 200 and page.mimetype == "text/html"
    assert b'<script src="console.js">' in page.get_body()
    script = run(
        console_file(http_request("GET", "/api/console/console.js", route_params={"path": "console.js"}))
    )
    assert script.headers["Content-Type"].startswith("text/javascript")

    for path in ("../function_app.py", "nope.js", ".hidden.css"):
        response = run(console_file(http_request("GET", f"/api/console/{path}", route_params={"path": path})))
        assert response.status_code == 404 and json_of(response)["code"] == "not-found"


def keyed(instance_id, action, key):
    return instance_post(instance_id, action, headers={**ALICE, "Idempotency-Key": key})


def test_a_repeated_compensate_with_one_key_answers_the_same_and_acts_once(
    run, client, services, ledger, platform_auth
):
    make_step(ledger, "op-idem", S.FAILED)

    first = run(instance_action(keyed("op-idem", "compensate", "click-1"), client, services))
    again = run(instance_action(keyed("op-idem", "compensate", "click-1"), client, services))

    assert first.status_code == 200, first.get_body()
    assert (again.status_code, again.get_body()) == (200, first.get_body())
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert len(operator_moves(ledger, "op-idem")) == 1
    assert [s.step_id for s in ledger.list_for_instance("op-idem")] == ["create_storage"]  # no stray row
    reused = run(instance_action(keyed("op-idem", "resume", "click-1"), client, services))
    assert reused.status_code == 422 and json_of(reused)["code"] == "idempotency-key-reused"
    bad = run(instance_action(keyed("op-idem", "compensate", "bad key\n"), client, services))
    assert bad.status_code == 400 and json_of(bad)["code"] == "bad-idempotency-key"


def test_two_overlapping_compensates_make_one_operator_move(run, client, services, ledger, platform_auth):
    make_step(ledger, "op-two", S.SUCCEEDED)

    first = run(instance_action(keyed("op-two", "compensate", "tab-a"), client, services))
    second = run(instance_action(keyed("op-two", "compensate", "tab-b"), client, services))

    assert first.status_code == 200, first.get_body()
    assert second.status_code == 409
    assert "already asked for" in json_of(second)["error"] and "Compensating" in json_of(second)["error"]
    assert len(operator_moves(ledger, "op-two")) == 1


def partition_rows(ledger, instance_id):
    """Every row of the instance's ledger partition, as stored."""
    return list(ledger.table_client().query_entities("PartitionKey eq @p", parameters={"p": instance_id}))


@pytest.mark.parametrize("action", ["compensate", "resume", "stop", "cancel"])
def test_an_action_without_an_idempotency_key_is_refused_before_anything_is_written(
    run, client, services, ledger, platform_auth, action
):
    make_step(ledger, "op-nokey", S.FAILED)
    before = ledger.audit_trail("op-nokey")

    response = run(instance_action(keyed("op-nokey", action, ""), client, services))

    assert response.status_code == 428 and json_of(response)["code"] == "idempotency-key-required"
    assert ledger.audit_trail("op-nokey") == before
    assert not [r for r in partition_rows(ledger, "op-nokey") if r["RowKey"].startswith("~idem~")]


def test_a_step_action_without_an_idempotency_key_is_refused(run, client, services, ledger, platform_auth):
    make_step(ledger, "op-nokey-step", S.FAILED)
    request = http_request(
        "POST",
        "/api/instances/op-nokey-step/steps/create_storage/retry",
        body={"reason": "downstream fixed"},
        route_params={"instance_id": "op-nokey-step", "step_id": "create_storage", "action": "retry"},
        headers={**ALICE, "Idempotency-Key": ""},
    )
    response = run(step_action(request, client, services))
    assert response.status_code == 428 and json_of(response)["code"] == "idempotency-key-required"
    assert ledger.get("op-nokey-step", "create_storage").status is S.FAILED


def test_an_action_on_an_unknown_instance_leaves_no_key_row_behind(
    run, client, services, ledger, platform_auth
):
    response = run(instance_action(keyed("op-nobody", "stop", "k-1"), client, services))

    assert response.status_code == 404 and json_of(response)["code"] == "instance-not-found"
    assert partition_rows(ledger, "op-nobody") == []


def test_an_idempotency_key_used_on_one_instance_is_refused_on_another(
    run, client, services, ledger, platform_auth
):
    make_step(ledger, "op-key-a", S.FAILED)
    make_step(ledger, "op-key-b", S.FAILED)

    first = run(instance_action(keyed("op-key-a", "compensate", "shared-key"), client, services))
    other = run(instance_action(keyed("op-key-b", "compensate", "shared-key"), client, services))

    assert first.status_code == 200, first.get_body()
    assert (other.status_code, json_of(other)["code"]) == (422, "idempotency-key-reused")
    assert "op-key-a" in json_of(other)["detail"]  # names the request that owns the key
    assert operator_moves(ledger, "op-key-b") == []  # the other instance was not acted on
    again = run(instance_action(keyed("op-key-a", "compensate", "shared-key"), client, services))
    assert again.headers.get("Idempotent-Replayed") == "true"  # its own instance still replays


def test_a_key_released_after_a_404_may_be_used_on_another_instance(
    run, client, services, ledger, platform_auth
):
    make_step(ledger, "op-key-c", S.FAILED)

    missing = run(instance_action(keyed("op-key-nowhere", "compensate", "retry-key"), client, services))
    used = run(instance_action(keyed("op-key-c", "compensate", "retry-key"), client, services))

    assert missing.status_code == 404
    assert used.status_code == 200, used.get_body()


def test_after_sas_purge_marks_an_instance_purging_every_action_is_a_409_naming_why(
    run, client, services, ledger, app_env, monkeypatch, platform_auth
):
    import io
    from datetime import timedelta

    from operator_cli.cli import main
    from workflow_core.ledger import InstanceStatus

    long_ago = clock.utcnow() - timedelta(days=40)
    with clock.use_clock(lambda: long_ago):
        make_step(ledger, "purged-1", S.SUCCEEDED, instance=InstanceStatus.SUCCEEDED)
    for name in ("AzureWebJobsStorage", "LEDGER_TABLE_NAME", "DEADLINE_INDEX_TABLE_NAME"):
        monkeypatch.setenv(name, app_env[name])
    monkeypatch.setattr("operator_cli.operations_commands.operator_user", lambda: "alice")
    out, err = io.StringIO(), io.StringIO()
    assert main(["purge", "--older-than", "30d", "--yes"], stdout=out, stderr=err, read=input) == 0, err
    assert ledger.get_instance("purged-1").status is InstanceStatus.PURGING

    for request in (
        instance_post("purged-1", "compensate", headers=ALICE),
        instance_post("purged-1", "cancel", headers=ALICE),
        step_post("purged-1", "create_storage", "retry", headers=ALICE),
    ):
        act = step_action if "/steps/" in request.url else instance_action
        response = run(act(request, client, services))
        body = json_of(response)
        assert response.status_code == 409 and body["code"] == "instance-purging", body
        assert "being purged" in body["detail"] and response.mimetype == "application/problem+json"
    assert ledger.get_instance("purged-1").status is InstanceStatus.PURGING
