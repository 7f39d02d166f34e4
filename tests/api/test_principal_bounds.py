"""With App Service Authentication on, principal headers are believed only with the platform's
marker (``X-MS-CLIENT-PRINCIPAL-IDP``), and a principal over a bound is 400 ``invalid-principal``
naming the limit, before anything reaches the ledger (on 10caf32 a 40,000-character name reached
Table Storage and answered 503)."""

from __future__ import annotations

import base64
import json

import pytest

from api.boundary import MAX_PRINCIPAL_CLAIMS, MAX_PRINCIPAL_NAME_CHARS
from api.operator_api import list_instances, step_action
from tests.api.support import http_request, json_of, principal_headers
from tests.helpers.rows import make_step
from workflow_core.ledger import StepStatus


@pytest.fixture(autouse=True)
def _signed_in(monkeypatch):
    monkeypatch.delenv("WEBSITE_INSTANCE_ID", raising=False)
    monkeypatch.setenv("WEBSITE_SITE_NAME", "sas-test")
    monkeypatch.setenv("WEBSITE_AUTH_ENABLED", "true")


def skip(instance_id: str, headers: dict) -> object:
    return http_request(
        "POST",
        f"/api/instances/{instance_id}/steps/create_storage/skip",
        body={"reason": "r"},
        route_params={"instance_id": instance_id, "step_id": "create_storage", "action": "skip"},
        headers=headers,
    )


def untouched(ledger, instance_id: str) -> bool:
    return ledger.get(instance_id, "create_storage").status is StepStatus.FAILED and not [
        a for a in ledger.audit_trail(instance_id) if a.actor.startswith("operator:")
    ]


def test_principal_headers_without_the_platform_marker_are_refused(run, client, services, ledger):
    make_step(ledger, "no-idp", StepStatus.FAILED)
    forged = principal_headers("ceo@contoso.example")
    del forged["X-MS-CLIENT-PRINCIPAL-IDP"]

    response = run(step_action(skip("no-idp", forged), client, services))

    assert (response.status_code, json_of(response)["code"]) == (403, "untrusted-identity")
    assert untouched(ledger, "no-idp")


def _claims_principal(claims: list) -> dict:
    encoded = base64.b64encode(json.dumps({"claims": claims, "role_typ": "roles"}).encode()).decode()
    return {"X-MS-CLIENT-PRINCIPAL": encoded, "X-MS-CLIENT-PRINCIPAL-IDP": "aad"}


@pytest.mark.parametrize(
    ("headers", "limit"),
    [
        (
            {**principal_headers("olga"), "X-MS-CLIENT-PRINCIPAL-NAME": "n" * 40_000},
            f"at most {MAX_PRINCIPAL_NAME_CHARS} characters",
        ),
        (principal_headers("olga\x00@contoso.example"), "printable characters only"),
        (
            _claims_principal([{"typ": "roles", "val": "Workflows.Operate"}] * (MAX_PRINCIPAL_CLAIMS + 1)),
            f"a list of at most {MAX_PRINCIPAL_CLAIMS} claims",
        ),
        (
            _claims_principal(
                [{"typ": "roles", "val": "Workflows.Operate"}, {"typ": "name", "val": "x" * 5000}]
            ),
            "at most 1024 characters",
        ),
        (
            {"X-MS-CLIENT-PRINCIPAL": "A" * 40_000, "X-MS-CLIENT-PRINCIPAL-IDP": "aad"},
            "at most 32768 characters",
        ),
    ],
    ids=["40000-char-name", "control-char-name", "too-many-claims", "huge-claim", "huge-header"],
)
def test_a_principal_over_a_bound_is_400_naming_the_limit(run, client, services, ledger, headers, limit):
    make_step(ledger, "big-name", StepStatus.FAILED)

    for response in (
        run(step_action(skip("big-name", headers), client, services)),
        run(list_instances(http_request("GET", "/api/instances", headers=headers), client, services)),
    ):
        problem = json_of(response)
        assert (response.status_code, problem["code"]) == (400, "invalid-principal")
        assert limit in problem["limit"] and limit in problem["detail"]
    assert untouched(ledger, "big-name")


def test_a_bounded_principal_with_the_marker_is_believed(run, client, services, ledger):
    make_step(ledger, "fine-name", StepStatus.FAILED)
    name = "o" * MAX_PRINCIPAL_NAME_CHARS

    response = run(step_action(skip("fine-name", principal_headers(name)), client, services))

    assert response.status_code == 200 and json_of(response)["actor"] == f"operator:{name}"
