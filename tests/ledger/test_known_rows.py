"""Rows written against a carried version (``known_rows.py``): merged, never replaced; a change a
merge cannot express is refused before anything is written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from azure.data.tables import UpdateMode

from workflow_core.ledger import (
    InstanceConflict,
    InstanceHandle,
    InstanceStatus,
    InvalidLedgerInput,
    NewStep,
    StepLedger,
    encode_json,
)
from workflow_core.ledger.known_rows import (
    CLEARED,
    SNAPSHOT_OMITS,
    KnownInstanceRecord,
    KnownStepRecord,
    instance_snapshot,
    known_instance,
    merged_properties,
)
from workflow_core.workflows import get_workflow, version_of

NOW = datetime.now(UTC).replace(microsecond=0)
KEYS = {"PartitionKey": "p", "RowKey": "r"}


def test_a_merge_carries_the_keys_and_what_differs_only():
    known = {**KEYS, "A": 1, "B": "same", "C": NOW}
    new = {**KEYS, "A": 2, "B": "same", "C": NOW, "D": True}
    assert merged_properties(known, new) == {**KEYS, "A": 2, "D": True}


def test_a_merge_clears_a_property_by_writing_it_empty():
    known = {**KEYS, "A": 1, "T": "x", "C": NOW, "N": 2}
    assert merged_properties(known, {**KEYS, "A": 1}) == {**KEYS, "T": CLEARED, "C": CLEARED, "N": CLEARED}


def test_a_text_cleared_by_a_merge_reads_back_as_none(ledger):
    """A step leaving a deadline status drops its IndexKey ("instance" while watched): merged, the
    property is written empty, and the row reads as if it had none."""
    new_instance(ledger, "known-0")
    ledger.table_client().update_entity(  # the row as a watched step holds it
        {"PartitionKey": "known-0", "RowKey": "a", "IndexKey": "instance"}, mode=UpdateMode.MERGE
    )
    row = ledger.get("known-0", "a")
    assert row.index_key == "instance"
    known = KnownStepRecord.model_validate(row.model_dump())

    ledger.update(known, actor="test", owner="other")  # Pending: no deadline, so no index key

    raw = ledger.table_client().get_entity("known-0", "a")
    assert raw["IndexKey"] == CLEARED and raw["Owner"] == "other"
    assert ledger.get("known-0", "a").index_key is None


def new_instance(ledger: StepLedger, iid: str):
    return ledger.create_instance_with_steps(
        iid,
        "provision-tenant",
        actor="test",
        input_json=encode_json({"tenant_id": iid, "blob": "x" * 5_000}),
        scheduler_deadline=NOW + timedelta(hours=1),
        version=version_of(get_workflow("provision-tenant")),
        steps=[NewStep(step_id="a", step_name="a", agent="ag")],
    )


def test_the_snapshot_leaves_the_large_texts_out_and_comes_back_as_a_known_record(ledger):
    record, step_etags = new_instance(ledger, "known-1")
    snapshot = instance_snapshot(record)
    assert not SNAPSHOT_OMITS & set(snapshot) and snapshot["etag"] == record.etag
    assert set(step_etags) == {"a"} and step_etags["a"] == ledger.get("known-1", "a").etag
    known = known_instance(snapshot)
    assert isinstance(known, KnownInstanceRecord) and known.input_ref is None
    with pytest.raises(InvalidLedgerInput):
        known_instance({"instance_id": "known-1"})  # no ETag: nothing to write against


def test_a_known_instance_is_merged_and_keeps_what_its_snapshot_left_out(ledger):
    record, _ = new_instance(ledger, "known-2")
    known = known_instance(instance_snapshot(record))
    step = ledger.get("known-2", "a")
    handle = InstanceHandle(known)

    ledger.update(step, actor="test", instance=handle, instance_changes={"stalls": 2})

    stored = ledger.get_instance("known-2")
    assert stored.stalls == 2 and stored.input_ref == record.input_ref  # merged, not replaced
    assert isinstance(handle.record, KnownInstanceRecord)  # a second write merges again
    assert handle.record.etag == stored.etag


def test_a_stale_known_instance_loses_the_race_and_writes_nothing(ledger):
    record, _ = new_instance(ledger, "known-3")
    known = known_instance(instance_snapshot(record))
    ledger.update_instance(record, actor="test", reason="someone else", stalls=1)
    step = ledger.get("known-3", "a")
    trail = len(ledger.audit_trail("known-3"))

    with pytest.raises(InstanceConflict):
        ledger.update(step, actor="test", instance=InstanceHandle(known), instance_changes={"stalls": 2})

    assert ledger.get_instance("known-3").stalls == 1
    assert ledger.get("known-3", "a").etag == step.etag and len(ledger.audit_trail("known-3")) == trail


def test_a_known_instance_leaving_supervision_clears_its_deadline_and_keeps_its_input(ledger):
    """Settling clears the scheduler deadline (a time) and the index key: merged, both are written
    empty and read back as none, and the input the snapshot left out is still there."""
    record, _ = new_instance(ledger, "known-4")
    known = known_instance(instance_snapshot(record))

    settled = ledger.transition_instance(known, InstanceStatus.SUCCEEDED, actor="test", reason="done")

    stored = ledger.get_instance("known-4")
    assert stored.status is InstanceStatus.SUCCEEDED and settled.etag == stored.etag
    assert stored.scheduler_deadline is None and stored.index_key is None
    assert stored.input_ref == record.input_ref
    raw = ledger.table_client().get_entity("known-4", "~instance")
    assert raw["SchedulerDeadline"] == CLEARED and raw["IndexKey"] == CLEARED
    assert not [r for r in ledger.index_rows() if r["_key"] == record.index_key]  # its row went


@pytest.mark.parametrize(
    "forged",
    ["0", "*", "", "W/\"datetime'x'\"", "W/\"datetime'2026-12-04T03%3A04%3A08.6767849Z'\"\n", None, 7],
)
def test_a_carried_etag_not_shaped_like_the_services_is_a_refused_copy(ledger, forged):
    """A copy's ETag comes from a message or a history: one the service did not hand out ("0" made a
    dispatch's batch fail with 400; "*" would make the If-Match write unconditional) is refused where
    the copy becomes a row, before any request, like every other malformed copy."""
    record, _ = new_instance(ledger, "known-e")
    snapshot = {**instance_snapshot(record), "etag": forged}
    with pytest.raises((InvalidLedgerInput, ValueError)):
        known_instance(snapshot)
    with pytest.raises(ValueError):
        KnownStepRecord.model_validate({**ledger.get("known-e", "a").model_dump(), "etag": forged})


def test_every_etag_the_ledger_hands_out_is_one_a_copy_may_carry(ledger):
    record, _ = new_instance(ledger, "known-f")
    assert known_instance(instance_snapshot(record)).etag == record.etag
    step = ledger.get("known-f", "a")
    assert KnownStepRecord.model_validate(step.model_dump()).etag == step.etag
