"""``sas stop`` / ``sas cancel`` and the idempotency key every ``sas`` action claims: a stopped
instance is flagged and fenced, a cancel undoes it, and a command repeated with its key acts once."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.helpers.rows import NOW
from workflow_core.ledger import StepStatus
from workflow_core.workflows import get_workflow, version_of


def running(ledger, instance_id):
    return ledger.create_instance(
        instance_id,
        "provision-tenant",
        actor="test",
        input_json="{}",
        scheduler_deadline=NOW + timedelta(hours=1),
        version=version_of(get_workflow("provision-tenant")),
    )


def operator_moves(ledger, instance_id):
    return [a for a in ledger.audit_trail(instance_id) if a.actor.startswith("operator:")]


def test_stop_asks_then_leaves_the_instance_stopped_and_flagged(cli, ledger):
    running(ledger, "cli-stop")

    code, out, err = cli("stop", "cli-stop", "--reason", "wrong tenant", answer="y")

    assert code == 0, err
    assert "stop: instance cli-stop (Running): its done steps stay as they are" in out
    assert "is Stopped (was Running)" in out and "sas cancel cli-stop" in out
    record = ledger.get_instance("cli-stop")
    assert record.status.value == "Stopped" and record.needs_attention
    assert record.attention_reason.startswith("stopped by operator:alice: wrong tenant")
    (move,) = operator_moves(ledger, "cli-stop")
    assert (move.actor, move.reason) == ("operator:alice", "operator stop: wrong tenant")


def test_declining_the_stop_changes_nothing(cli, ledger):
    running(ledger, "cli-no")
    code, out, _ = cli("stop", "cli-no", "--reason", "r", answer="n")
    assert code == 1 and "aborted: nothing changed" in out
    assert ledger.get_instance("cli-no").status.value == "Running"
    assert operator_moves(ledger, "cli-no") == []


def test_cancel_after_stop_compensates_and_answers_the_flag(cli, ledger):
    running(ledger, "cli-undo")
    assert cli("stop", "cli-undo", "--reason", "hold on", "--yes")[0] == 0

    code, out, err = cli("cancel", "cli-undo", "--reason", "undo it", "--yes", "-o", "json")

    assert code == 0, err
    assert json.loads(out)["status"] == "Compensating"
    record = ledger.get_instance("cli-undo")
    assert record.status.value == "Compensating" and not record.needs_attention
    assert [m.reason for m in operator_moves(ledger, "cli-undo")] == [
        "operator stop: hold on",
        "operator cancel: undo it",
    ]


def test_a_second_stop_is_refused_saying_what_the_instance_is(cli, ledger):
    running(ledger, "cli-twice")
    assert cli("stop", "cli-twice", "--reason", "r", "--yes")[0] == 0
    code, _, err = cli("stop", "cli-twice", "--reason", "r", "--yes")
    assert code == 2 and "is Stopped" in err
    assert len(operator_moves(ledger, "cli-twice")) == 1


def test_a_command_repeated_with_its_key_acts_once_and_prints_the_first_answer(cli, ledger):
    running(ledger, "cli-key")
    first = cli("stop", "cli-key", "--reason", "r", "--yes", "--idempotency-key", "run-42")
    again = cli("stop", "cli-key", "--reason", "r", "--yes", "--idempotency-key", "run-42")

    assert first[0] == 0 and again[0] == 0, (first, again)
    assert "already done by the first command with this idempotency key" in again[1]
    assert '"status": "Stopped"' in again[1]
    assert len(operator_moves(ledger, "cli-key")) == 1
    other = cli("cancel", "cli-key", "--reason", "r", "--yes", "--idempotency-key", "run-42")
    assert other[0] == 2 and "was used for another request (sas stop cli-key)" in other[2]
    assert ledger.get_instance("cli-key").status.value == "Stopped"


def test_a_refused_command_leaves_its_key_free(cli, ledger):
    from tests.helpers.rows import make_step

    make_step(ledger, "cli-free", StepStatus.SUCCEEDED)
    keyed = ("create_storage", "--reason", "r", "--yes", "--idempotency-key", "k1")
    refused = cli("retry", "cli-free", *keyed)
    assert refused[0] == 2
    done = cli("compensate", "cli-free", *keyed)
    assert done[0] == 0, done
    assert ledger.get("cli-free", "create_storage").status is StepStatus.COMPENSATING


@pytest.mark.parametrize("key", ["has space", "x" * 101, "new\nline"])
def test_a_malformed_key_is_a_usage_error(cli, ledger, key):
    running(ledger, "cli-badkey")
    code, _, err = cli("stop", "cli-badkey", "--reason", "r", "--yes", "--idempotency-key", key)
    assert code == 2 and "idempotency key is 1-100 of" in err
    assert ledger.get_instance("cli-badkey").status.value == "Running"


def test_stalled_lists_the_instances_flagged_for_an_operator(cli, ledger):
    running(ledger, "cli-flagged")
    running(ledger, "cli-fine")
    assert cli("stop", "cli-flagged", "--reason", "wrong tenant", "--yes")[0] == 0

    code, out, err = cli("stalled")

    assert code == 0, err
    flagged = out.split("Instances flagged for an operator")[1]
    assert "(1)" in flagged and "cli-flagged" in flagged and "stopped by" in flagged
    assert "cli-fine" not in out
    code, out, _ = cli("stalled", "-o", "json")
    assert [r["instance_id"] for r in json.loads(out)["flagged_instances"]] == ["cli-flagged"]
