"""Who may act, and how an action must arrive: forged identities, missing roles, remote callers,
cross-site and non-JSON requests are refused before anything reaches the ledger or the task hub."""

from __future__ import annotations

import azure.functions as func
import pytest

from api.handlers import get_workflow_status, health, start_workflow
from api.operator_api import get_instance, instance_action, list_instances, step_action
from tests.api.support import http_request, json_of, principal_headers
from tests.helpers.rows import make_step
from workflow_core.ledger import StepStatus

S = StepStatus
READER = principal_headers("rita@contoso.example", roles=("Workflows.Read",))
OPERATOR = principal_headers("olga@contoso.example")


def skip_post(instance_id: str, headers=None, body=None, raw_headers=None) -> func.HttpRequest:
    req = http_request(
        "POST",
        f"/api/instances/{instance_id}/steps/create_storage/skip",
        body=body if body is not None else {"reason": "not needed"},
        route_params={"instance_id": instance_id, "step_id": "create_storage", "action": "skip"},
        headers=headers,
    )
    if raw_headers is not None:  # exactly these headers, nothing the helper adds
        return func.HttpRequest(
            "POST", req.url, headers=raw_headers, route_params=dict(req.route_params), body=req.get_body()
        )
    return req


def read(instance_id: str, headers=None) -> func.HttpRequest:
    return http_request(
        "GET", f"/api/instances/{instance_id}", route_params={"instance_id": instance_id}, headers=headers
    )


def unchanged(ledger, instance_id: str) -> bool:
    return ledger.get(instance_id, "create_storage").status is S.FAILED and not [
        a for a in ledger.audit_trail(instance_id) if a.actor.startswith("operator:")
    ]


@pytest.fixture(autouse=True)
def _local(monkeypatch):
    for name in ("WEBSITE_INSTANCE_ID", "WEBSITE_SITE_NAME", "WEBSITE_AUTH_ENABLED"):
        monkeypatch.delenv(name, raising=False)


# ---- identity (observation 2) ----------------------------------------------------------------------


def test_locally_a_principal_header_is_refused_not_believed(run, client, services, ledger):
    make_step(ledger, "id-forged", S.FAILED)
    forged = {"X-MS-CLIENT-PRINCIPAL-NAME": "ceo@contoso.example"}

    response = run(step_action(skip_post("id-forged", headers=forged), client, services))

    assert (response.status_code, json_of(response)["code"]) == (403, "untrusted-identity")
    assert unchanged(ledger, "id-forged")


def test_locally_an_action_from_another_machine_is_refused(run, client, services, ledger):
    make_step(ledger, "id-remote", S.FAILED)
    remote = skip_post("id-remote", headers={"X-Forwarded-For": "10.1.2.3", "Host": "build-box:7071"})
    spoofed_host = skip_post("id-remote", headers={"Host": "evil.example"})

    for req in (remote, spoofed_host):
        response = run(step_action(req, client, services))
        assert (response.status_code, json_of(response)["code"]) == (403, "not-loopback")
    assert unchanged(ledger, "id-remote")


def test_locally_a_loopback_action_is_recorded_as_the_os_user(run, client, services, ledger, monkeypatch):
    monkeypatch.setattr("api.boundary.getpass.getuser", lambda: "dev-two")
    make_step(ledger, "id-local", S.FAILED)

    response = run(step_action(skip_post("id-local", headers={"X-Forwarded-For": "::1"}), client, services))

    assert response.status_code == 200 and json_of(response)["actor"] == "operator:dev-two"


@pytest.mark.parametrize("marker", [None, "X-MS-CLIENT-PRINCIPAL-IDP"])
def test_auth_enabled_without_an_azure_marker_believes_no_principal(
    run, client, services, ledger, monkeypatch, marker
):
    """``WEBSITE_AUTH_ENABLED=true`` copied into local settings: no platform strips headers, so a
    forged principal (with the IDP header, which any caller can send, or without) is refused, and a
    request without one meets the loopback rule."""
    monkeypatch.setenv("WEBSITE_AUTH_ENABLED", "true")
    make_step(ledger, "id-copied", S.FAILED)
    forged = dict(OPERATOR) if marker else {"X-MS-CLIENT-PRINCIPAL-NAME": "ceo@contoso.example"}

    response = run(step_action(skip_post("id-copied", headers=forged), client, services))
    remote = run(step_action(skip_post("id-copied", headers={"Host": "build-box:7071"}), client, services))

    assert (response.status_code, json_of(response)["code"]) == (403, "untrusted-identity")
    assert (remote.status_code, json_of(remote)["code"]) == (403, "not-loopback")
    assert unchanged(ledger, "id-copied")
    local = run(step_action(skip_post("id-copied"), client, services))
    assert local.status_code == 200 and not json_of(local)["actor"].endswith("@contoso.example")


def test_in_azure_without_platform_auth_every_action_is_401_even_with_a_principal(
    run, client, services, ledger, monkeypatch
):
    monkeypatch.setenv("WEBSITE_SITE_NAME", "sas-prod")
    make_step(ledger, "id-noauth", S.FAILED)

    for headers in (None, OPERATOR):
        response = run(step_action(skip_post("id-noauth", headers=headers), client, services))
        assert (response.status_code, json_of(response)["code"]) == (401, "unauthenticated")
    assert unchanged(ledger, "id-noauth")


def test_with_platform_auth_actions_need_the_operator_role(run, client, services, ledger, platform_auth):
    make_step(ledger, "id-roles", S.FAILED)
    anonymous = run(step_action(skip_post("id-roles"), client, services))
    reader = run(step_action(skip_post("id-roles", headers=READER), client, services))

    assert (anonymous.status_code, json_of(anonymous)["code"]) == (401, "unauthenticated")
    body = json_of(reader)
    assert (reader.status_code, body["code"]) == (403, "forbidden")
    assert body["requiredRoles"] == ["Workflows.Operate"]
    assert unchanged(ledger, "id-roles")

    operator = run(step_action(skip_post("id-roles", headers=OPERATOR), client, services))
    assert operator.status_code == 200
    assert json_of(operator)["actor"] == "operator:olga@contoso.example"


def test_with_platform_auth_reads_need_a_reader_or_operator_role(
    run, client, services, ledger, platform_auth
):
    make_step(ledger, "id-reads", S.FAILED)
    nobody = principal_headers("nobody@contoso.example", roles=())

    assert run(get_instance(read("id-reads"), client, services)).status_code == 401
    assert json_of(run(get_instance(read("id-reads", nobody), client, services)))["code"] == "forbidden"
    for who in (READER, OPERATOR):
        assert run(get_instance(read("id-reads", who), client, services)).status_code == 200
    listing = http_request("GET", "/api/instances", headers=READER)
    assert run(list_instances(listing, client, services)).status_code == 200


def test_a_principal_header_that_is_not_base64_json_gives_no_roles(
    run, client, services, ledger, platform_auth
):
    make_step(ledger, "id-garbage", S.FAILED)
    garbage = {
        "X-MS-CLIENT-PRINCIPAL": "%%%not-base64",
        "X-MS-CLIENT-PRINCIPAL-NAME": "mallory",
        "X-MS-CLIENT-PRINCIPAL-IDP": "aad",
    }

    response = run(step_action(skip_post("id-garbage", headers=garbage), client, services))

    assert (response.status_code, json_of(response)["code"]) == (403, "forbidden")
    assert unchanged(ledger, "id-garbage")


# ---- the door: JSON only, the client header, same origin (observation 4) ----------------------------


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({"Content-Type": "application/x-www-form-urlencoded"}, 415, "unsupported-media-type"),
        ({"Content-Type": "text/plain"}, 415, "unsupported-media-type"),
        ({"Content-Type": "multipart/form-data; boundary=x"}, 415, "unsupported-media-type"),
        ({"Content-Type": "application/json"}, 400, "client-header-required"),
        (
            {"X-SAS-Client": "x", "Content-Type": "application/json", "Origin": "https://evil.example"},
            403,
            "cross-site",
        ),
        ({"X-SAS-Client": "x", "Content-Type": "application/json", "Origin": "null"}, 403, "cross-site"),
        ({"X-SAS-Client": "x", "Content-Type": "application/json", "Origin": ""}, 403, "cross-site"),
        (
            {"X-SAS-Client": "x", "Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"},
            403,
            "cross-site",
        ),
    ],
)
def test_a_request_a_cross_site_page_could_send_does_not_act(
    run, client, services, ledger, headers, status, code
):
    make_step(ledger, "door", S.FAILED)
    req = skip_post("door", raw_headers={"Host": "localhost:7071", **headers})

    response = run(step_action(req, client, services))

    assert (response.status_code, json_of(response)["code"]) == (status, code)
    assert unchanged(ledger, "door")


def test_a_same_origin_request_with_the_header_acts(run, client, services, ledger):
    make_step(ledger, "door-ok", S.FAILED)
    headers = {"Origin": "http://localhost:7071", "Sec-Fetch-Site": "same-origin"}

    response = run(step_action(skip_post("door-ok", headers=headers), client, services))

    assert response.status_code == 200


def test_the_starter_has_the_same_door(run, client, services, stub):
    req = http_request(
        "POST",
        "/api/workflows/provision-tenant/instances",
        body="tenant_id=contoso",
        route_params={"name": "provision-tenant"},
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    response = run(start_workflow(req, client, services))
    assert response.status_code == 415
    assert stub.requests_to("POST", "/orchestrators/") == []


def test_every_answer_forbids_framing_and_sniffing_and_grants_no_cors(run, client, services, ledger):
    make_step(ledger, "hdrs", S.FAILED)
    answers = [
        run(get_instance(read("hdrs"), client, services)),
        run(get_instance(read("missing-one"), client, services)),
        run(step_action(skip_post("hdrs", raw_headers={"Content-Type": "text/plain"}), client, services)),
        run(health(http_request("GET", "/api/health"), None, services)),
    ]
    for response in answers:
        assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert not [h for h in dict(response.headers) if h.lower().startswith("access-control-")]


# ---- ids: one full-match rule (observation 3) ------------------------------------------------------

BAD_IDS = ["victim\n", "victim\r", "vic\ttim", "victim\x00", "victim\u0085", "victim/x", ""]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_a_malformed_instance_id_is_a_400_on_every_route(run, client, services, stub, ledger, bad):
    make_step(ledger, "victim", S.FAILED)
    stub.add_instance("victim", runtime_status="Running")
    route = {"instance_id": bad}
    calls = [
        get_workflow_status(http_request("GET", "/api/workflows/x", route_params=route), client, services),
        get_instance(read(bad), client, services),
        step_action(skip_post(bad), client, services),
        instance_action(
            http_request(
                "POST",
                "/api/instances/x/stop",
                body={"reason": "r"},
                route_params={**route, "action": "stop"},
            ),
            client,
            services,
        ),
        start_workflow(
            http_request(
                "POST",
                "/api/workflows/provision-tenant/instances",
                body={"tenant_id": "contoso", "instance_id": bad},
                route_params={"name": "provision-tenant"},
            ),
            client,
            services,
        ),
    ]
    for call in calls:
        response = run(call)
        assert (response.status_code, json_of(response)["code"]) == (400, "invalid-instance-id")
    assert stub.instances["victim"].runtime_status == "Running"
    assert unchanged(ledger, "victim")


@pytest.mark.parametrize("bad", ["create_storage\n", "create storage", "../x", "x\x1b[31m"])
def test_a_malformed_step_id_is_a_400_not_a_409(run, client, services, ledger, bad):
    make_step(ledger, "step-ids", S.FAILED)
    req = http_request(
        "POST",
        "/api/instances/step-ids/steps/x/skip",
        body={"reason": "r"},
        route_params={"instance_id": "step-ids", "step_id": bad, "action": "skip"},
    )
    response = run(step_action(req, client, services))
    assert (response.status_code, json_of(response)["code"]) == (400, "invalid-step-id")
    assert unchanged(ledger, "step-ids")


@pytest.mark.parametrize("bad", ["provision-tenant\n", "Provision-Tenant", "provision_tenant\x00"])
def test_a_malformed_workflow_name_is_a_400_in_the_url_and_the_query(run, client, services, bad):
    start = http_request(
        "POST", "/api/workflows/x/instances", body={"tenant_id": "c"}, route_params={"name": bad}
    )
    listing = http_request("GET", "/api/instances", params={"workflow": bad})
    for call in (start_workflow(start, client, services), list_instances(listing, client, services)):
        response = run(call)
        assert (response.status_code, json_of(response)["code"]) == (400, "invalid-workflow-name")


def test_the_ledger_id_rule_is_a_full_match():
    from workflow_core.ledger import InvalidLedgerInput
    from workflow_core.ledger.model import validate_instance_id, validate_step_id

    for validate in (validate_instance_id, validate_step_id):
        assert validate("victim") == "victim"
        with pytest.raises(InvalidLedgerInput):
            validate("victim\n")


def test_the_console_files_hold_no_data_and_need_no_role(run, platform_auth):
    from api.boundary import CONSOLE_CSP
    from api.functions import console_file

    page = run(console_file(http_request("GET", "/api/console/", route_params={"path": ""})))

    assert page.status_code == 200
    assert page.headers["Content-Security-Policy"] == CONSOLE_CSP and "frame-ancestors 'none'" in CONSOLE_CSP
