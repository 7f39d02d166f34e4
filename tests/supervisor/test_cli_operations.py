"""``sas purge`` and ``sas bulk``: --dry-run prints what would happen and changes nothing; a real run
is confirmed, audited, and shows what it did."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.helpers.rows import IS, NOW, make_instance, make_step
from workflow_core import clock
from workflow_core.ledger import StepStatus

S = StepStatus
LATER = NOW + timedelta(days=40)


def snapshot(ledger, ids):
    return {i: (ledger.find_instance(i).status, len(ledger.audit_trail(i))) for i in ids}


def test_purge_dry_run_lists_and_changes_nothing_then_a_real_run_marks_purging(cli, ledger):
    with clock.use_clock(lambda: NOW):
        make_instance(ledger, "old-done", IS.SUCCEEDED)
        make_instance(ledger, "old-failed", IS.FAILED)
    before = snapshot(ledger, ["old-done", "old-failed"])
    code, out, _ = cli("purge", "--older-than", "30d", "--dry-run", "-o", "json")
    assert code == 0 and json.loads(out)["wouldPurge"] == ["old-done"]
    assert snapshot(ledger, ["old-done", "old-failed"]) == before

    code, out, _ = cli("purge", "--older-than", "30d", answer="n")
    assert code == 1 and ledger.find_instance("old-done").status is IS.SUCCEEDED

    code, out, _ = cli("purge", "--older-than", "30d", "--yes")
    assert code == 0 and "marked: 1 (old-done)" in out
    assert ledger.find_instance("old-done").status is IS.PURGING
    assert ledger.audit_trail("old-done")[-1].actor == "operator:alice"
    assert ledger.find_instance("old-failed").status is IS.FAILED
    code, out, _ = cli("purge", "--older-than", "30d", "--dry-run")  # Purging: left for the timer
    assert code == 0 and "wouldPurge: 1 (old-done)" in out and "old-failed" not in out


@pytest.mark.parametrize("age", ["30", "0d", "-3d", "30days", "9999999d", ""])
def test_purge_refuses_a_malformed_age(cli, age):
    code, _, err = cli("purge", "--older-than", age, "--dry-run")
    assert code == 2 and "30d" in err


def test_bulk_dry_run_changes_nothing_and_a_real_one_acts_once(cli, ledger):
    for n in range(3):
        make_step(ledger, f"cli-bulk-{n}", S.FAILED)
    before = snapshot(ledger, [f"cli-bulk-{n}" for n in range(3)])
    code, out, _ = cli("bulk", "retry", "--reason", "back", "--dry-run", "-o", "json")
    body = json.loads(out)
    assert code == 0 and sorted(body["wouldAct"]) == [f"cli-bulk-{n}" for n in range(3)]
    assert snapshot(ledger, [f"cli-bulk-{n}" for n in range(3)]) == before

    code, out, _ = cli("bulk", "retry", "--reason", "back", "--rate", "1000", "-o", "json", answer="y")
    prompt, _, rest = out.partition("[y/N] ")
    assert "retry 3 instance(s)" in prompt
    body = json.loads(rest)
    assert code == 0 and body["counts"]["acted"] == 3 and body["done"]
    code, out, _ = cli("bulk", "show", body["id"])
    assert code == 0 and "acted" in out
    code, out, _ = cli("bulk", "continue", body["id"], "-o", "json")
    assert code == 0 and json.loads(out)["counts"]["acted"] == 3  # nothing acted twice
    assert all(ledger.get(f"cli-bulk-{n}", "create_storage").status is S.RETRYING for n in range(3))


def test_bulk_refuses_bad_input(cli):
    assert cli("bulk", "retry", "--reason", " ", "--dry-run")[0] == 2
    assert cli("bulk", "show", "nope")[0] == 2
    assert cli("bulk", "show", "x" * 500)[0] == 2
    assert cli("bulk", "retry", "--reason", "r", "--started-after", "soon", "--dry-run")[0] == 2


def test_bulk_with_a_progress_bar_reports_what_it_skipped_and_why(cli, ledger):
    make_step(ledger, "cli-bar-1", S.RETRYING)
    code, out, _ = cli("bulk", "skip", "--reason", "not needed", "--rate", "1000", "--yes")
    assert code == 0
    assert "bulk skip" in out and "skipped" in out and "no step of 'cli-bar-1'" in out


def bulk_operations(ledger):
    return list(ledger.table_client().query_entities("PartitionKey eq @p", parameters={"p": "~bulk"}))


def test_a_bulk_command_cut_off_and_repeated_with_its_key_carries_the_same_operation_on(
    cli, ledger, monkeypatch
):
    from azure.core.exceptions import ServiceRequestError

    from supervisor.maintenance import bulk

    for n in range(2):
        make_step(ledger, f"cli-key-{n}", S.FAILED)
    real_run = bulk.run

    async def cut_off(store, op, **kwargs):
        raise ServiceRequestError("connection reset")  # cut off after the operation is recorded

    monkeypatch.setattr(bulk, "run", cut_off)
    code, _, err = cli("bulk", "retry", "--reason", "back", "--idempotency-key", "ticket-7", "--yes")
    assert code != 0 and "--idempotency-key ticket-7" in err
    assert all(ledger.get(f"cli-key-{n}", "create_storage").status is S.FAILED for n in range(2))
    monkeypatch.setattr(bulk, "run", real_run)

    argv = ("bulk", "retry", "--reason", "back", "--idempotency-key", "ticket-7", "-o", "json")
    code, out, err = cli(*argv, "--rate", "1000")  # no prompt: it is the same operation
    assert code == 0 and "already started" in err
    assert json.loads(out)["counts"]["acted"] == 2 and len(bulk_operations(ledger)) == 1
    code, out, _ = cli(*argv)  # once more: nothing acted twice
    assert code == 0 and json.loads(out)["counts"]["acted"] == 2 and len(bulk_operations(ledger)) == 1
    assert all(ledger.get(f"cli-key-{n}", "create_storage").status is S.RETRYING for n in range(2))


def test_a_bulk_key_reused_for_another_request_or_malformed_is_refused(cli, ledger):
    make_step(ledger, "cli-key-x", S.FAILED)
    assert cli("bulk", "skip", "--reason", "one", "--idempotency-key", "k-9", "--yes")[0] == 0
    code, out, err = cli("bulk", "skip", "--reason", "two", "--idempotency-key", "k-9", "--yes")
    assert code == 2 and "was used for another request" in out + err
    make_step(ledger, "cli-key-y", S.FAILED)  # after the skip: still to retry
    single = ("retry", "cli-key-y", "create_storage", "--reason", "x", "-y")
    code, out, err = cli(*single, "--idempotency-key", "k-9")
    assert code == 2 and "was used for another" in out + err
    for bad in ("bad key", "k" * 101, "~idem~x"):
        assert cli("bulk", "skip", "--reason", "one", "--idempotency-key", bad, "--yes")[0] == 2
    assert len(bulk_operations(ledger)) == 1


def test_a_bulk_dry_run_writes_nothing_and_an_invalid_filter_names_no_operation(cli, ledger):
    make_step(ledger, "cli-dry-1", S.FAILED)
    make_step(ledger, "cli-dry-2", S.RETRYING)
    code, out, err = cli("bulk", "retry", "--reason", "look", "--dry-run")
    assert code == 0 and "would act" in out and "would skip" in out and "no step of 'cli-dry-2'" in out
    assert "idempotency-key" not in out + err
    table = ledger.table_client()
    written = [
        e["PartitionKey"]
        for e in table.query_entities("PartitionKey ge '~bulk' and PartitionKey lt '~bulk~~'")
    ]
    assert written == []  # no operation, no snapshot, no key
    code, out, err = cli("bulk", "cancel", "--reason", "r", "--status", "Broken", "--yes")
    assert code == 2 and "bad filter" in out + err and "bulk 20" not in out + err
    assert cli("bulk", "stop", "--reason", "r", "--workflow", "sas-canary", "--yes")[0] == 2
