"""Through a real socket: an id with a percent-encoded newline or control character reaches no other
instance on any route (observation 3), and the front end's idea of the caller's address holds."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid

import pytest

from tests.helpers.rows import make_step
from workflow_core.ledger import StepStatus

BAD = ["victim%0A", "victim%0D", "victim%00", "vic%09tim", "victim%0A%0A", "%0Avictim"]
ACTION = {"Content-Type": "application/json", "X-SAS-Client": "tests"}


def call(url: str, method: str = "GET", body: dict | None = None, headers: dict | None = None):
    data = json.dumps(body).encode() if body is not None else None
    headers = {**({"Idempotency-Key": uuid.uuid4().hex} if method == "POST" else {}), **(headers or {})}
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=20) as answer:
            return answer.status, dict(answer.headers), json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read() or b"null")


@pytest.fixture(scope="module")
def victim(http_app):
    ledger = http_app.harness.ledger
    make_step(ledger, "victim", StepStatus.FAILED)
    return ledger


@pytest.mark.parametrize("bad", BAD)
def test_an_encoded_control_character_in_an_id_is_a_400_on_every_route(http_app, victim, bad):
    api = f"{http_app.url}/api"
    reads = [f"{api}/workflows/{bad}", f"{api}/workflows/{bad}/steps", f"{api}/instances/{bad}"]
    actions = [
        f"{api}/instances/{bad}/compensate",
        f"{api}/instances/{bad}/resume",
        f"{api}/instances/{bad}/terminate",
        f"{api}/instances/{bad}/steps/create_storage/skip",
        f"{api}/instances/victim/steps/create_storage%0A/skip",
        f"{api}/workflows/provision-tenant/instances?instance_id={bad}",
    ]
    for url in reads:
        status, _, body = call(url)
        assert (status, body["code"]) == (400, "invalid-instance-id"), url
    for url in actions:
        status, _, body = call(
            url, "POST", {"reason": "attack", "tenant_id": "t", "admin_email": "a@b.c"}, ACTION
        )
        assert status == 400 and body["code"] in ("invalid-instance-id", "invalid-step-id"), (url, body)
    assert victim.get("victim", "create_storage").status is StepStatus.FAILED
    assert not [a for a in victim.audit_trail("victim") if a.actor.startswith("operator:")]


def test_a_workflow_name_with_an_encoded_newline_is_a_400(http_app):
    for url, method in (
        (f"{http_app.url}/api/workflows/provision-tenant%0A/instances", "POST"),
        (f"{http_app.url}/api/workflows/provision-tenant%0A/versions", "GET"),
        (f"{http_app.url}/api/instances?workflow=provision-tenant%0A", "GET"),
    ):
        body = {"tenant_id": "t", "admin_email": "a@b.c"} if method == "POST" else None
        status, _, problem = call(url, method, body, ACTION if body else None)
        assert (status, problem["code"]) == (400, "invalid-workflow-name"), url


def test_forwarding_headers_neither_make_a_local_caller_remote_nor_a_rebound_name_local(http_app, victim):
    # The front end hands on no forwarding header and the app reads none: Host alone decides.
    url = f"{http_app.url}/api/instances/victim/steps/nope/skip"
    status, _, body = call(url, "POST", {"reason": "r"}, {**ACTION, "X-Forwarded-For": "203.0.113.9"})
    assert (status, body["code"]) == (404, "step-not-found")  # local: it got past the door
    rebound = {"Host": f"rebind.example:{http_app.server.port}", "X-Forwarded-For": "127.0.0.1"}
    for method, target, payload in (
        ("POST", url, {"reason": "r"}),
        ("GET", f"{http_app.url}/api/instances", None),
    ):
        status, _, body = call(target, method, payload, {**ACTION, **rebound, "Forwarded": "for=127.0.0.1"})
        assert (status, body["code"]) == (403, "not-loopback"), target
