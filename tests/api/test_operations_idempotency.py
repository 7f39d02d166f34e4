"""``POST /api/operations`` with an ``Idempotency-Key``, as single actions take it: a repeat gets the
first answer (the same operation, nothing recorded or acted on twice), the key reused for another
request (bulk or single) is a 422, a missing one a 428, a malformed one a 400, and a request that
failed on our side (5xx) releases it."""

from __future__ import annotations

import pytest
from azure.core.exceptions import ServiceRequestError

from api.operations_api import start_operation
from api.operator_api import instance_action
from supervisor.maintenance import bulk
from supervisor.maintenance.bulk import KEYS_PARTITION
from tests.api.support import http_request, json_of, principal_headers
from tests.helpers.rows import make_step
from workflow_core.ledger import StepStatus

S = StepStatus
ALICE = principal_headers("alice@contoso.example")
RETRY = {"action": "retry", "filter": {"errorContains": "boom"}, "reason": "service back"}


def post(body, key):
    return http_request("POST", "/api/operations", body=body, headers={**ALICE, "Idempotency-Key": key})


def operations(ledger):
    rows = ledger.table_client().query_entities("PartitionKey eq @p", parameters={"p": "~bulk"})
    return [r["RowKey"] for r in rows]


def key_rows(ledger):
    rows = ledger.table_client().query_entities("PartitionKey eq @p", parameters={"p": KEYS_PARTITION})
    return [r["RowKey"] for r in rows]


def bulk_moves(ledger, instance_id):
    return [a for a in ledger.audit_trail(instance_id) if "[bulk " in a.reason]


def test_a_double_post_with_one_key_records_one_operation_and_replays_its_answer(
    run, client, services, ledger, platform_auth
):
    for n in range(2):
        make_step(ledger, f"idem-bulk-{n}", S.FAILED)

    first = run(start_operation(post(RETRY, "outage-42"), client, services))
    again = run(start_operation(post(RETRY, "outage-42"), client, services))

    assert first.status_code == 200, first.get_body()
    assert (again.status_code, again.get_body()) == (200, first.get_body())
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert operations(ledger) == [json_of(first)["id"]]
    for n in range(2):
        assert len(bulk_moves(ledger, f"idem-bulk-{n}")) == 1


def test_the_same_key_with_another_request_is_a_422_and_records_nothing(
    run, client, services, ledger, platform_auth
):
    make_step(ledger, "idem-other", S.FAILED)
    first = run(start_operation(post(RETRY, "k-1"), client, services))
    assert first.status_code == 200

    for other in (
        {**RETRY, "reason": "service back again"},
        {**RETRY, "action": "skip"},
        {**RETRY, "filter": {"errorContains": "bang"}},
    ):
        response = run(start_operation(post(other, "k-1"), client, services))
        assert response.status_code == 422, other
        assert json_of(response)["code"] == "idempotency-key-reused"
    assert operations(ledger) == [json_of(first)["id"]]
    dry = run(start_operation(post({**RETRY, "dryRun": True}, "k-1"), client, services))
    assert dry.status_code == 200 and json_of(dry)["wouldAct"] == []  # a dry run takes no key
    assert operations(ledger) == [json_of(first)["id"]]


def test_a_key_used_by_a_single_action_is_refused_for_a_bulk_request_and_the_other_way(
    run, client, services, ledger, platform_auth
):
    make_step(ledger, "idem-single", S.FAILED)

    def single(key):
        return http_request(
            "POST",
            "/api/instances/idem-single/resume",
            body={"reason": "fixed"},
            route_params={"instance_id": "idem-single", "action": "resume"},
            headers={**ALICE, "Idempotency-Key": key},
        )

    assert run(instance_action(single("shared-key"), client, services)).status_code < 500

    response = run(start_operation(post(RETRY, "shared-key"), client, services))
    assert response.status_code == 422 and json_of(response)["code"] == "idempotency-key-reused"
    assert operations(ledger) == []

    assert run(start_operation(post(RETRY, "bulk-key"), client, services)).status_code == 200
    reused = run(instance_action(single("bulk-key"), client, services))
    assert reused.status_code == 422 and json_of(reused)["code"] == "idempotency-key-reused"


def test_without_a_key_a_real_operation_is_a_428_and_a_dry_run_is_answered(
    run, client, services, ledger, platform_auth
):
    make_step(ledger, "idem-none", S.FAILED)
    response = run(start_operation(post(RETRY, ""), client, services))
    assert response.status_code == 428 and json_of(response)["code"] == "idempotency-key-required"
    assert operations(ledger) == [] and key_rows(ledger) == []

    dry = run(start_operation(post({**RETRY, "dryRun": True}, ""), client, services))
    assert dry.status_code == 200 and json_of(dry)["wouldAct"] == ["idem-none"]
    assert key_rows(ledger) == []


@pytest.mark.parametrize(
    "key",
    ["bad key", "x" * 101, "~idem~forged", "../other", "clé", "a\tb", "k;drop", "k" + "\u200b"],
)
def test_malformed_forged_or_oversized_keys_are_400s_and_record_nothing(
    run, client, services, ledger, platform_auth, key
):
    make_step(ledger, "idem-bad", S.FAILED)
    response = run(start_operation(post(RETRY, key), client, services))
    assert response.status_code == 400 and json_of(response)["code"] == "bad-idempotency-key"
    assert operations(ledger) == [] and key_rows(ledger) == []
    assert ledger.get("idem-bad", "create_storage").status is S.FAILED


def test_the_longest_key_is_taken(run, client, services, ledger, platform_auth):
    make_step(ledger, "idem-long", S.FAILED)
    key = "K" * 100
    first = run(start_operation(post(RETRY, key), client, services))
    again = run(start_operation(post(RETRY, key), client, services))
    assert first.status_code == 200 and again.get_body() == first.get_body()


def test_a_request_that_failed_on_our_side_releases_its_key(
    run, client, services, ledger, platform_auth, monkeypatch
):
    make_step(ledger, "idem-5xx", S.FAILED)
    real_create = bulk.BulkStore.create
    calls = []

    def create_failing_once(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:  # the storage account refuses the first write (a real SDK error)
            raise ServiceRequestError("connection reset")
        return real_create(self, *args, **kwargs)

    monkeypatch.setattr(bulk.BulkStore, "create", create_failing_once)
    failed = run(start_operation(post(RETRY, "retry-me"), client, services))
    assert failed.status_code == 503, failed.get_body()
    assert key_rows(ledger) == []

    retried = run(start_operation(post(RETRY, "retry-me"), client, services))
    assert retried.status_code == 200 and retried.headers.get("Idempotent-Replayed") is None
    assert operations(ledger) == [json_of(retried)["id"]]
    assert len(bulk_moves(ledger, "idem-5xx")) == 1


def test_once_recorded_the_operation_is_the_answer_even_if_the_rest_of_the_request_fails(
    run, client, services, ledger, platform_auth, monkeypatch
):
    make_step(ledger, "idem-late", S.FAILED)  # the inline run and the progress read both fail

    async def run_fails(*_args, **_kwargs):
        raise ServiceRequestError("connection reset")

    def progress_fails(self, op):
        raise ServiceRequestError("connection reset")

    with monkeypatch.context() as patch:
        patch.setattr(bulk, "run", run_fails)
        patch.setattr(bulk.BulkStore, "progress", progress_fails)
        first = run(start_operation(post(RETRY, "late-1"), client, services))
    assert first.status_code == 202, first.get_body()
    again = run(start_operation(post(RETRY, "late-1"), client, services))
    assert (again.status_code, again.get_body()) == (202, first.get_body())
    assert operations(ledger) == [json_of(first)["id"]]  # the timer carries it on, not a second one


def test_a_repeat_while_the_first_request_still_runs_is_a_409_and_acts_on_nothing(
    run, client, services, ledger, platform_auth
):
    from supervisor.maintenance.bulk import request_of
    from workflow_core.ledger import idempotency

    make_step(ledger, "idem-busy", S.FAILED)
    flt = bulk.BulkFilter(error_contains="boom")
    # the first request with the key has claimed it and is still acting (no answer stored yet)
    idempotency.IdempotencyKeys(ledger).claim_or_replay(
        KEYS_PARTITION, "busy-1", request_of("retry", flt, "service back"), "operator:x"
    )
    response = run(start_operation(post(RETRY, "busy-1"), client, services))
    assert response.status_code == 409 and json_of(response)["code"] == "in-progress"
    assert operations(ledger) == [] and ledger.get("idem-busy", "create_storage").status is S.FAILED
