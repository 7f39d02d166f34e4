"""POST /api/workflows/{name} with input larger than a ledger property or than the payload limit.

Up to ``MAX_PAYLOAD_BYTES`` (1 MiB) the input is accepted: above 32,000 characters the instance record
holds a reference to the input, stored once in Blob Storage (``workflow_core.payloads``). Above the
limit it is refused at the door (413, naming the limit) before anything is written or started, so no
workflow can be stranded half-way by its size."""

from __future__ import annotations

import json

from api.handlers import start_workflow
from tests.api.support import http_request, json_of
from workflow_core.ledger import encode_json
from workflow_core.ledger.model import MAX_TEXT
from workflow_core.payloads import canonical_json, is_reference

GOOD_INPUT = {"tenant_id": "contoso", "admin_email": "admin@contoso.example"}
LIMIT = 1_048_576


def post(name: str, body, params=None):
    return http_request(
        "POST", f"/api/workflows/{name}", body=body, params=params, route_params={"name": name}
    )


def _plan_of_size(size: int) -> str:
    """A ``plan`` that makes the validated input exactly ``size`` bytes of canonical JSON."""
    probe = {**GOOD_INPUT, "region": "westeurope", "plan": ""}
    return "x" * (size - len(canonical_json(probe)))


def test_an_input_over_the_payload_limit_is_refused_with_the_limit_and_nothing_is_written(
    run, stub, client, services, ledger
):
    body = {**GOOD_INPUT, "plan": _plan_of_size(LIMIT + 1)}
    response = run(
        start_workflow(post("provision-tenant", body, {"instance_id": "too-big-1"}), client, services)
    )

    assert response.status_code == 413, response.get_body()
    problem = json_of(response)
    text = json.dumps(problem)
    assert f"{LIMIT:,}" in text and "MAX_PAYLOAD_BYTES" in text  # the limit is named, as a caller reads it
    assert problem["limit"] == LIMIT and problem["code"] == "input-too-large"
    assert problem["size"] == LIMIT + 1
    # nothing was written, nothing was started
    assert ledger.find_instance("too-big-1") is None
    assert ledger.list_for_instance("too-big-1") == []
    assert ledger.audit_trail("too-big-1") == []
    assert ledger.index_rows() == []
    assert stub.requests_to("POST", "/orchestrators/") == []
    assert stub.instances == {}


def test_an_input_just_within_the_ledger_property_stays_inline(run, stub, client, services, ledger):
    probe = {**GOOD_INPUT, "region": "westeurope", "plan": ""}
    plan = "x" * (MAX_TEXT - len(encode_json(probe)))
    body = {**GOOD_INPUT, "plan": plan}
    response = run(
        start_workflow(post("provision-tenant", body, {"instance_id": "just-fits-1"}), client, services)
    )

    assert response.status_code == 202, response.get_body()
    record = ledger.get_instance("just-fits-1")
    assert record.input_ref is not None and len(record.input_ref) == MAX_TEXT
    assert json.loads(record.input_ref)["plan"] == plan  # the value itself, as before references


def test_an_input_up_to_the_limit_is_accepted_and_recorded_by_reference(run, stub, client, services, ledger):
    plan = _plan_of_size(LIMIT)
    body = {**GOOD_INPUT, "plan": plan}
    response = run(
        start_workflow(post("provision-tenant", body, {"instance_id": "one-mib-1"}), client, services)
    )

    assert response.status_code == 202, response.get_body()
    record = ledger.get_instance("one-mib-1")
    stored = json.loads(record.input_ref)
    assert is_reference(stored) and stored["size"] == LIMIT
    assert services.payloads.resolve(stored)["plan"] == plan  # the blob holds the whole input
    assert list(stub.instances) == ["one-mib-1"]
    # the orchestration is started with the input itself: the scheduler never reads a blob
    started = json.loads(stub.instances["one-mib-1"].raw_input)
    started = json.loads(started) if isinstance(started, str) else started  # JSON text sent as JSON
    assert started["input"]["plan"] == plan

    one_more = {**GOOD_INPUT, "plan": plan + "x"}
    response = run(
        start_workflow(post("provision-tenant", one_more, {"instance_id": "too-big-2"}), client, services)
    )
    assert response.status_code == 413
    assert ledger.find_instance("too-big-2") is None
    assert list(stub.instances) == ["one-mib-1"]
