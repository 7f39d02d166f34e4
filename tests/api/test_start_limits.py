"""POST /api/workflows/{name} with input the ledger cannot hold: refused at the door (413, naming the
limit) before anything is written or started, so no workflow can be stranded half-way by its size."""

from __future__ import annotations

import json

from api import start_workflow
from tests.api.support import http_request, json_of
from workflow_core.ledger import encode_json
from workflow_core.ledger.model import MAX_TEXT

GOOD_INPUT = {"tenant_id": "contoso", "admin_email": "admin@contoso.example"}


def post(name: str, body, params=None):
    return http_request(
        "POST", f"/api/workflows/{name}", body=body, params=params, route_params={"name": name}
    )


def test_an_oversized_input_is_refused_with_the_limit_and_nothing_is_written(
    run, stub, client, services, ledger
):
    body = {**GOOD_INPUT, "plan": "x" * 33_000}  # one free-text field of 33,000 characters
    response = run(
        start_workflow(post("provision-tenant", body, {"instance_id": "too-big-1"}), client, services)
    )

    assert response.status_code == 413, response.get_body()
    problem = json_of(response)
    text = json.dumps(problem)
    assert f"{MAX_TEXT:,}" in text  # the limit is named, in the words a caller reads
    assert problem["limit"] == MAX_TEXT and problem["code"] == "input-too-large"
    assert problem["size"] > MAX_TEXT
    # nothing was written, nothing was started
    assert ledger.find_instance("too-big-1") is None
    assert ledger.list_for_instance("too-big-1") == []
    assert ledger.audit_trail("too-big-1") == []
    assert ledger.index_rows() == []
    assert stub.requests_to("POST", "/orchestrators/") == []
    assert stub.instances == {}


def test_an_input_just_within_the_limit_is_accepted_and_recorded_whole(run, stub, client, services, ledger):
    probe = {**GOOD_INPUT, "region": "westeurope", "plan": ""}
    plan = "x" * (MAX_TEXT - len(encode_json(probe)))
    body = {**GOOD_INPUT, "plan": plan}
    response = run(
        start_workflow(post("provision-tenant", body, {"instance_id": "just-fits-1"}), client, services)
    )

    assert response.status_code == 202, response.get_body()
    record = ledger.get_instance("just-fits-1")
    assert record.input_ref is not None and len(record.input_ref) == MAX_TEXT
    assert json.loads(record.input_ref)["plan"] == plan
    assert list(stub.instances) == ["just-fits-1"]

    one_more = {**GOOD_INPUT, "plan": plan + "x"}
    response = run(
        start_workflow(post("provision-tenant", one_more, {"instance_id": "too-big-2"}), client, services)
    )
    assert response.status_code == 413
    assert ledger.find_instance("too-big-2") is None
    assert list(stub.instances) == ["just-fits-1"]
