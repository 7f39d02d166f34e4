"""Successes the scheduler takes unread, and forgeries of them, through the whole pattern on real
Azurite (durable test host + real worker, result handler and activities).

A sequential step's success reply is raised on the orchestration without a ledger read when the
worker recorded it with a basis row (``contracts.ReplyVersions``); the scheduler's next write (the
next dispatch, or the settle) deletes that row in its own transaction, or refuses to write
(``contracts.ResultBasis``). The forgeries here are as strong as an attacker on the result queue
can make them: the instance snapshot and its *current* ETag copied from the genuine work message
(the claim does not write the instance record, so that ETag still holds), so only the basis row
stands between the forgery and a write built on it.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers.fault_matrix import start_provisioning, verify
from workflow_core.ledger.known_rows import BASIS_KEY_PREFIX, WATCHED_KEY
from workflow_core.transport import OutgoingMessage

FORGED = {
    "create_storage": {"account": "forgedattacker", "forged": True},
    "send_welcome": {"message_id": "forged", "forged": True},
}
NEXT_WRITE = {"create_storage": "the next dispatch", "send_welcome": "the settle"}


def basis_rows(h, iid: str) -> list[str]:
    rows = h.services.ledger.table_client().query_entities(
        "PartitionKey eq @p and RowKey ge @lo and RowKey lt @hi",
        parameters={"p": iid, "lo": BASIS_KEY_PREFIX, "hi": BASIS_KEY_PREFIX + "~"},
    )
    return [r["RowKey"] for r in rows]


def forged_reply(genuine_work: dict, output: dict) -> dict:
    """A success reply for the held attempt, keyed like a genuine one, with ``output``."""
    versions = genuine_work["ledger"]
    return {
        "kind": "work",
        "instance_id": genuine_work["instance_id"],
        "orchestration_id": genuine_work["orchestration_id"],
        "step_id": genuine_work["step_id"],
        "attempt": genuine_work["attempt"],
        "outcome": "succeeded",
        "output": output,
        "ledger": {
            "instance": {**versions["instance"], WATCHED_KEY: []},
            "etags": {"instance": versions["etags"]["instance"]},
        },
    }


def forge_while_held(h, step_id: str) -> tuple[str, object, dict]:
    """Start a workflow, hold the step's genuine work message, and put a forged keyed success for
    that attempt on the result queue: the instance, the hold and the genuine message's body."""
    held = h.hold(step_id, attempt=1)
    iid = start_provisioning(h)
    h.run_until(lambda: len(h.held(held)) == 1)
    [genuine] = h.held(held)
    forgery = forged_reply(genuine.body, FORGED[step_id])
    h.transport.send(h.settings.result_queue, OutgoingMessage(body=forgery, message_id="forged-keyed"))
    return iid, held, genuine.body


@pytest.mark.parametrize("step_id", ["create_storage", "send_welcome"])
def test_a_forged_keyed_success_is_refused_by_the_next_write(harness, step_id):
    """While the step's genuine work message is held, a forged success for that very attempt
    arrives on the result queue, keyed and carrying the instance's current ETag. The result handler
    raises it unread and the scheduler takes it provisionally, but its next write finds no basis
    row: it reads, writes nothing, audits ``provisional-result-refused``, and the scheduler goes back
    to the step. The genuine agent then runs once and the workflow ends on its output."""
    h = harness
    iid, held, genuine = forge_while_held(h, step_id)
    assert genuine["ledger"]["keyed_reply"] is True  # the scheduler takes this step unread

    def refusals():
        return [e for e in h.events_for(iid) if e.note == "provisional-result-refused"]

    h.run_until(lambda: bool(refusals()))
    [refusal] = refusals()
    assert (refusal.step_id, refusal.attempt, refusal.actor) == (step_id, 1, "scheduler")
    assert NEXT_WRITE[step_id].split()[-1] in refusal.reason  # "dispatch" / "settle"
    steps = h.steps(iid)
    assert steps[step_id].status.value == "Dispatched"  # the forgery moved nothing
    if step_id == "create_storage":
        assert steps["register_dns"].status.value == "Pending"  # nothing written on the forgery
        assert h.handler_calls(iid, "register_dns") == 0
    assert h.services.ledger.get_instance(iid).status.value == "Running"

    h.release(held)
    status = h.run_until_complete(iid)
    verify(h, "forged keyed success", f"refused by {NEXT_WRITE[step_id]}", {iid: "succeeded"})

    assert h.handler_calls(iid, step_id) == 1
    assert status.output["outputs"][step_id] == json.loads(h.steps(iid)[step_id].result_ref)
    assert "forged" not in json.dumps(status.output)
    if step_id == "create_storage":  # the next step was built on the ledger's output, not the forgery
        dns_input = json.loads(h.steps(iid)["register_dns"].input_ref)
        assert dns_input["target"] == status.output["outputs"]["create_storage"]["account"]


def test_a_forged_success_of_a_step_that_then_fails_ends_in_compensation(harness):
    """The forgery is refused, the scheduler goes back to the step, and the genuine attempts fail:
    the step's retry policy runs on (attempts 2 and 3 fail too), it gives up and the workflow is
    compensated, as if the forgery had never come. The next step never ran."""
    from activities.worker.handlers import faults

    faults.clear()
    failing = faults.inject("storage.create", faults.Fail(times=None, message="quota exceeded"))
    h = harness
    iid, held, _ = forge_while_held(h, "create_storage")
    h.run_until(lambda: any(e.note == "provisional-result-refused" for e in h.events_for(iid)))

    h.release(held)
    status = h.run_until_complete(iid)
    faults.clear()
    verify(h, "forged keyed success", "the genuine step then fails for good", {iid: "compensated"})

    steps = h.steps(iid)
    assert steps["create_storage"].attempt == 3 and failing.fired == 3  # every genuine attempt ran
    assert h.handler_calls(iid, "register_dns") == 0 and steps["register_dns"].input_ref is None
    assert status.output["failed_step"] == "create_storage" and "forged" not in json.dumps(status.output)


@pytest.mark.breakage
def test_without_the_basis_rows_delete_the_forgery_would_be_built_on(harness, monkeypatch):
    """The mechanism is load-bearing: with the basis row's delete left out of the next dispatch's
    transaction (a deliberate breakage, in memory), the same forgery is written into the next step's
    input, because its instance ETag is the current one. The test above is what stops that."""
    monkeypatch.setattr("activities.scheduler.dispatch.basis_rows", lambda instance_id, basis: [])
    h = harness
    iid, _, _ = forge_while_held(h, "create_storage")

    h.run_until(lambda: h.steps(iid)["register_dns"].status.value != "Pending")

    dns_input = json.loads(h.steps(iid)["register_dns"].input_ref)
    assert dns_input["target"] == "forgedattacker"
    assert h.steps(iid)["create_storage"].status.value == "Dispatched"  # the genuine work never ran
