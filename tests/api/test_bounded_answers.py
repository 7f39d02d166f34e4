"""Bad input ends in a bounded 4xx problem, never a 500 or a non-JSON answer (observation 7), and each
refusal says the right thing: 400 malformed, 404 unknown, 409 a conflict with the current state (RFC 9110),
``instance-exists`` for a lost start race (observation 8)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest

from api.handlers import start_workflow
from api.operator_api import instance_action, list_instances
from tests.api.support import http_request, json_of
from tests.helpers.rows import make_step
from workflow_core import clock
from workflow_core.ledger import InstanceStatus, StepStatus
from workflow_core.workflows import get_workflow, version_of

S = StepStatus
GOOD = {"tenant_id": "contoso", "admin_email": "admin@contoso.example"}


def start(body, params=None, name="provision-tenant"):
    return http_request(
        "POST", f"/api/workflows/{name}/instances", body=body, params=params, route_params={"name": name}
    )


def act(instance_id, action):
    return http_request(
        "POST",
        f"/api/instances/{instance_id}/{action}",
        body={"reason": "operator says so"},
        route_params={"instance_id": instance_id, "action": action},
    )


# ---- observation 7: finite, shallow, on the calendar, bounded ----------------------------------------


@pytest.mark.parametrize("number", ["1e400", "-1e400", "1E309"])
def test_a_number_beyond_float_range_is_a_400_and_nothing_starts(run, stub, client, services, number):
    raw = '{"tenant_id": "contoso", "admin_email": "a@b.c", "amount": ' + number + "}"

    response = run(start_workflow(start(raw), client, services))

    assert (response.status_code, json_of(response)["code"]) == (400, "invalid-json")
    assert "finite" in json_of(response)["detail"]
    assert stub.requests_to("POST", "/orchestrators/") == []


@pytest.mark.parametrize("depth", [65, 100_000])
def test_deep_nesting_is_a_400_not_a_recursion_error(run, stub, client, services, depth):
    raw = '{"tenant_id": "c", "admin_email": "a@b.c", "x": ' + "[" * depth + "]" * depth + "}"

    response = run(start_workflow(start(raw), client, services))

    assert (response.status_code, json_of(response)["code"]) == (400, "invalid-json")
    assert stub.requests_to("POST", "/orchestrators/") == []


@pytest.mark.parametrize(
    "moment",
    [
        "0001-01-01T00:00:00+14:00",
        "9999-12-31T23:59:59-14:00",
        "0001-01-01T00:00:00+23:59",
        "0001-01-01T00:00:00",  # on the calendar, but the ledger compares a tick before it
        "0001-01-01T00:00:00Z",
        "9999-12-31T23:59:59.999999",
    ],
)
def test_a_time_off_the_calendar_is_a_400(run, client, services, moment):
    for name in ("startedFrom", "startedTo"):
        response = run(
            list_instances(http_request("GET", "/api/instances", params={name: moment}), client, services)
        )
        assert (response.status_code, json_of(response)["code"]) == (400, "invalid-filter")


@pytest.mark.parametrize(
    "raw",
    [
        '{"tenant_id": "c\\ud800", "admin_email": "a@b.c"}',
        '{"tenant_id": "c", "admin_email": "a@b.c", "note": ["\\udfff"]}',
        '{"tenant_id": "c", "admin_email": "a@b.c", "\\udc00": 1}',
    ],
    ids=["value", "list-item", "key"],
)
def test_a_lone_surrogate_anywhere_in_the_input_is_a_400_and_nothing_starts(run, stub, client, services, raw):
    response = run(start_workflow(start(raw), client, services))

    problem = json_of(response)
    assert (response.status_code, problem["code"]) == (400, "invalid-json")
    assert "surrogate" in problem["detail"] + json.dumps(problem)
    assert stub.requests_to("POST", "/orchestrators/") == []


def test_100000_unknown_fields_give_a_bounded_answer_that_says_what_was_left_out(run, stub, client, services):
    body = {**GOOD, **{f"field_{n}": n for n in range(100_000)}}

    response = run(start_workflow(start(json.dumps(body)), client, services))

    problem = json_of(response)
    assert response.status_code == 400 and problem["code"] == "invalid-input"
    assert len(response.get_body()) < 64_000, len(response.get_body())
    assert problem.get("detailsOmitted", 0) > 0 or any("left out" in d for d in problem["details"])


def test_a_stored_non_finite_number_is_still_served_as_json():
    from api.responses import json_response

    answer = json_response({"amount": float("inf"), "nested": [float("nan")]})

    body = answer.get_body().decode()
    assert json.loads(body, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


# ---- continuation tokens: signed and bound to their filter ----------------------------------------------


@pytest.fixture
def three_instances(ledger):
    t0 = datetime(2031, 1, 1, tzinfo=UTC)
    for n in range(3):
        started = t0 + timedelta(minutes=n)
        with clock.use_clock(lambda started=started: started):
            ledger.create_instance(
                f"page-{n}",
                "provision-tenant",
                actor="test",
                input_json="{}",
                scheduler_deadline=started + timedelta(minutes=5),
                version=version_of(get_workflow("provision-tenant")),
            )


def _page(run, client, services, params):
    return run(list_instances(http_request("GET", "/api/instances", params=params), client, services))


def test_a_tampered_or_foreign_continuation_token_is_a_400(run, client, services, three_instances):
    first = json_of(_page(run, client, services, {"limit": "1", "workflow": "provision-tenant"}))
    token = first["continuation"]
    assert token

    honest = _page(
        run, client, services, {"limit": "1", "workflow": "provision-tenant", "continuation": token}
    )
    assert (
        honest.status_code == 200 and json_of(honest)["instances"][0]["instanceId"] != first["instances"][0]
    )

    payload, mac = token.split(".")
    forged_payload = payload[:-2] + ("AA" if payload[-2:] != "AA" else "BB")
    for bad in (f"{forged_payload}.{mac}", f"{payload}.{mac[:-1]}x", payload, "é.é", "x" * 5000):
        response = _page(
            run, client, services, {"limit": "1", "workflow": "provision-tenant", "continuation": bad}
        )
        assert (response.status_code, json_of(response)["code"]) == (400, "invalid-continuation"), bad

    other_filter = _page(
        run, client, services, {"limit": "1", "workflow": "order-fulfilment", "continuation": token}
    )
    assert (other_filter.status_code, json_of(other_filter)["code"]) == (400, "invalid-continuation")
    assert "other filters" in json_of(other_filter)["detail"]


def test_a_token_signed_with_another_key_is_refused():
    from api import continuation
    from api.responses import ApiError

    token = continuation.sign("ledger-token", {"workflow": None}, b"k" * 32)
    assert continuation.verify(token, {"workflow": None}, b"k" * 32) == "ledger-token"
    with pytest.raises(ApiError):
        continuation.verify(token, {"workflow": None}, b"j" * 32)


# ---- observation 8: the right status for each refusal ----------------------------------------------


def test_stopping_an_unknown_instance_is_a_404(run, stub, client, services):
    response = run(instance_action(act("never-was", "stop"), client, services))
    assert (response.status_code, json_of(response)["code"]) == (404, "instance-not-found")


def test_resuming_a_finished_instance_is_a_409_conflict(run, client, services, ledger):
    record = ledger.create_instance(
        "done-1",
        "provision-tenant",
        actor="test",
        input_json="{}",
        scheduler_deadline=datetime.now(UTC) + timedelta(minutes=5),
        version=version_of(get_workflow("provision-tenant")),
    )
    ledger.transition_instance(record, InstanceStatus.SUCCEEDED, actor="test")

    response = run(instance_action(act("done-1", "resume"), client, services))

    assert (response.status_code, json_of(response)["code"]) == (409, "already-finished")
    assert ledger.get_instance("done-1").status is InstanceStatus.SUCCEEDED


def test_compensating_with_nothing_done_is_a_409_conflict(run, client, services, ledger):
    make_step(ledger, "nothing-1", S.PENDING)
    response = run(instance_action(act("nothing-1", "compensate"), client, services))
    assert (response.status_code, json_of(response)["code"]) == (409, "nothing-to-compensate")


def test_the_loser_of_a_start_race_is_told_instance_exists(run, stub, client, services):
    async def both():
        return await asyncio.gather(
            start_workflow(start(GOOD, {"instance_id": "race-2"}), client, services),
            start_workflow(start(GOOD, {"instance_id": "race-2"}), client, services),
        )

    responses = run(both())

    assert sorted(r.status_code for r in responses) == [202, 409]
    (loser,) = [r for r in responses if r.status_code == 409]
    assert json_of(loser)["code"] == "instance-exists"


def test_an_id_whose_record_exists_is_instance_exists(run, stub, client, services, ledger):
    ledger.create_instance(
        "rec-only-1",
        "provision-tenant",
        actor="test",
        input_json="{}",
        scheduler_deadline=datetime.now(UTC) + timedelta(minutes=5),
        version=version_of(get_workflow("provision-tenant")),
    )
    response = run(start_workflow(start(GOOD, {"instance_id": "rec-only-1"}), client, services))
    assert (response.status_code, json_of(response)["code"]) == (409, "instance-exists")


def test_every_process_signs_with_the_one_key_the_ledger_keeps(
    run, client, services, app_env, three_instances
):
    from workflow_core.runtime import Services
    from workflow_core.settings import load_settings

    first = json_of(_page(run, client, services, {"limit": "1"}))
    other_process = Services(load_settings(app_env))  # another worker: its own clients, nothing cached
    try:
        assert other_process.ledger.list_token_key() == services.ledger.list_token_key()
        following = _page(run, client, other_process, {"limit": "1", "continuation": first["continuation"]})
    finally:
        other_process.close()
    assert following.status_code == 200
    assert json_of(following)["instances"][0]["instanceId"] != first["instances"][0]["instanceId"]


def test_a_configured_key_signs_instead(run, client, services, three_instances, monkeypatch):
    first = json_of(_page(run, client, services, {"limit": "1"}))
    monkeypatch.setenv("CONTINUATION_TOKEN_KEY", "a shared secret")

    response = _page(run, client, services, {"limit": "1", "continuation": first["continuation"]})

    assert (response.status_code, json_of(response)["code"]) == (400, "invalid-continuation")
