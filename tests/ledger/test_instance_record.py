"""The instance record on real Azurite: its state table, and its lazy place in the deadline index."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import count

import pytest

from workflow_core.ledger import IllegalInstanceTransition, InstanceStatus, StepLedger, encode_json
from workflow_core.ledger.index_keys import index_row_time
from workflow_core.ledger.instance import INSTANCE_TRANSITIONS, SUPERVISED_INSTANCE_STATUSES
from workflow_core.ledger.instance_list import LIST_PARTITION
from workflow_core.workflows import get_workflow, version_of

IS = InstanceStatus
NOW = datetime.now(UTC).replace(microsecond=0)
pytestmark = pytest.mark.usefixtures("clock_at_module_now")
_ids = count(1)

# How each status is reached from Running (the status a new record has), along allowed moves.
PATH_TO = {
    IS.RUNNING: [],
    IS.SUCCEEDED: [IS.SUCCEEDED],
    IS.COMPENSATING: [IS.COMPENSATING],
    IS.COMPENSATED: [IS.COMPENSATING, IS.COMPENSATED],
    IS.COMPENSATION_FAILED: [IS.COMPENSATING, IS.COMPENSATION_FAILED],
    IS.FAILED: [IS.FAILED],
    IS.CANCELLED: [IS.CANCELLED],
    IS.STOPPED: [IS.STOPPED],
    IS.PURGING: [IS.SUCCEEDED, IS.PURGING],
}
ALLOWED = [(a, b) for a, targets in INSTANCE_TRANSITIONS.items() for b in sorted(targets)]
REFUSED = [(a, b) for a in IS for b in IS if b not in INSTANCE_TRANSITIONS[a]]


def new_instance(ledger: StepLedger, deadline: datetime = NOW + timedelta(hours=1)):
    return ledger.create_instance(
        f"inst-{next(_ids)}",
        "provision-tenant",
        actor="test",
        input_json=encode_json({"tenant_id": "contoso"}),
        scheduler_deadline=deadline,
        version=version_of(get_workflow("provision-tenant")),
    )


def move(ledger: StepLedger, record, to: InstanceStatus):
    extra = {"scheduler_deadline": NOW + timedelta(hours=1)} if to in SUPERVISED_INSTANCE_STATUSES else {}
    return ledger.transition_instance(record, to, actor="test", reason="test", **extra)


def instance_in(ledger: StepLedger, status: InstanceStatus):
    record = new_instance(ledger)
    for step in PATH_TO[status]:
        record = move(ledger, record, step)
    assert record.status is status
    return record


def instance_rows(ledger: StepLedger, instance_id: str) -> list[str]:
    return sorted(
        r["_key"]
        for r in ledger.index_rows()
        if r.get("InstanceId") == instance_id and r["PartitionKey"] != LIST_PARTITION  # not its listing row
    )


def test_the_table_covers_every_status_and_terminal_ones_lead_nowhere():
    assert set(INSTANCE_TRANSITIONS) == set(IS)
    # finished ones lead only to Purging (retention), which leads nowhere
    assert {s for s, nxt in INSTANCE_TRANSITIONS.items() if nxt <= {IS.PURGING}} == {
        IS.SUCCEEDED,
        IS.COMPENSATED,
        IS.CANCELLED,
        IS.PURGING,
    }
    assert {s for s, nxt in INSTANCE_TRANSITIONS.items() if not nxt} == {IS.PURGING}
    assert len(ALLOWED) + len(REFUSED) == len(IS) ** 2


@pytest.mark.parametrize(("current", "target"), ALLOWED, ids=[f"{a.value}->{b.value}" for a, b in ALLOWED])
def test_every_allowed_move_is_accepted(ledger, current, target):
    record = instance_in(ledger, current)
    moved = move(ledger, record, target)
    assert moved.status is target
    stored = ledger.get_instance(record.instance_id)
    assert stored.status is target and stored.etag == moved.etag
    if target in SUPERVISED_INSTANCE_STATUSES:
        assert stored.scheduler_deadline is not None
    else:
        assert stored.scheduler_deadline is None  # nothing promised any more: out of the deadline index
        assert not [k for k in instance_rows(ledger, record.instance_id) if k.startswith("i")]


@pytest.mark.parametrize("current", list(IS), ids=[s.value for s in IS])
def test_every_other_move_is_refused_and_nothing_is_written(ledger, current):
    record = instance_in(ledger, current)
    refused = [b for a, b in REFUSED if a is current]
    for target in refused:
        with pytest.raises(IllegalInstanceTransition) as caught:
            move(ledger, record, target)
        assert f"{current.value} -> {target.value}" in str(caught.value)
    stored = ledger.get_instance(record.instance_id)
    assert (stored.status, stored.etag) == (current, record.etag)


def test_a_deadline_moved_later_keeps_its_index_row(ledger):
    record = new_instance(ledger, NOW + timedelta(minutes=5))
    row = record.index_key
    assert index_row_time(row) == NOW + timedelta(minutes=5)
    later = ledger.update_instance(record, actor="test", scheduler_deadline=NOW + timedelta(hours=2))
    assert later.index_key == row  # no index write on the hot path: the row falls due earlier
    assert ledger.get_instance(record.instance_id).index_key == row
    assert instance_rows(ledger, record.instance_id) == [row]


def test_a_deadline_moved_earlier_writes_a_new_row_and_drops_the_old(ledger):
    record = new_instance(ledger, NOW + timedelta(hours=2))
    earlier = ledger.update_instance(record, actor="test", scheduler_deadline=NOW + timedelta(minutes=5))
    assert earlier.index_key != record.index_key
    assert index_row_time(earlier.index_key) == NOW + timedelta(minutes=5)
    assert instance_rows(ledger, record.instance_id) == [earlier.index_key]


def test_overdue_instances_moves_a_row_that_fell_due_early_and_reads_only_due_rows(ledger):
    moved_on = new_instance(ledger, NOW + timedelta(minutes=1))
    moved_on = ledger.update_instance(moved_on, actor="test", scheduler_deadline=NOW + timedelta(hours=1))
    early_row = moved_on.index_key
    assert index_row_time(early_row) == NOW + timedelta(minutes=1)  # the row still says one minute
    overdue = new_instance(ledger, NOW + timedelta(minutes=2))
    far = [new_instance(ledger, NOW + timedelta(hours=3 + n)) for n in range(3)]

    before = ledger.stats.index_entities_read
    found = ledger.overdue_instances(NOW + timedelta(minutes=5))
    assert [r.instance_id for r in found] == [overdue.instance_id]
    assert ledger.stats.index_entities_read - before == 2  # the two due rows, none of the far ones

    # the early row was moved forward to the instance's real deadline, and only that row remains
    record = ledger.get_instance(moved_on.instance_id)
    assert record.index_key != early_row
    assert index_row_time(record.index_key) == NOW + timedelta(hours=1)
    assert instance_rows(ledger, moved_on.instance_id) == [record.index_key]
    for untouched in far:
        assert ledger.get_instance(untouched.instance_id).index_key == untouched.index_key

    found = ledger.overdue_instances(NOW + timedelta(minutes=90))
    assert sorted(r.instance_id for r in found) == sorted([overdue.instance_id, moved_on.instance_id])


def _steps(n: int):
    from workflow_core.ledger import NewStep

    return [NewStep(step_id=f"s{i:03d}", step_name=f"s{i:03d}", agent="a", max_attempts=2) for i in range(n)]


def test_steps_created_with_the_record_are_pending_pinned_and_written_in_its_transaction(ledger):
    record = ledger.create_instance(
        "with-steps-1",
        "wf",
        actor="test",
        input_json="{}",
        scheduler_deadline=NOW + timedelta(hours=1),
        version="wf@abc",
        steps=_steps(3),
    )
    steps = ledger.list_for_instance("with-steps-1")
    assert [(r.step_id, r.status.value, r.attempt, r.max_attempts) for r in steps] == [
        (f"s{i:03d}", "Pending", 0, 2) for i in range(3)
    ]
    assert {r.workflow_version for r in steps} == {"wf@abc"}
    assert {r.orchestration_id for r in steps} == {"with-steps-1"}
    assert all(r.etag for r in steps) and record.etag
    # the orchestration's own create_steps finds them and returns them unchanged (idempotent)
    again = ledger.create_steps("with-steps-1", "wf", _steps(3), actor="test", version="wf@abc")
    assert [(r.step_id, r.etag) for r in again] == [(r.step_id, r.etag) for r in steps]


def test_a_used_id_writes_neither_record_nor_steps_and_too_many_steps_are_refused(ledger):
    from workflow_core.ledger import MAX_STEPS_WITH_INSTANCE, InstanceAlreadyExists, InvalidLedgerInput

    kwargs = {
        "actor": "test",
        "input_json": "{}",
        "scheduler_deadline": NOW + timedelta(hours=1),
        "version": "wf@abc",
    }
    ledger.create_instance("with-steps-2", "wf", **kwargs, steps=_steps(2))
    with pytest.raises(InstanceAlreadyExists):
        ledger.create_instance("with-steps-2", "other", **kwargs, steps=_steps(5))
    assert [r.step_id for r in ledger.list_for_instance("with-steps-2")] == ["s000", "s001"]

    with pytest.raises(InvalidLedgerInput, match=f"at most {MAX_STEPS_WITH_INSTANCE}"):
        ledger.create_instance("with-steps-3", "wf", **kwargs, steps=_steps(MAX_STEPS_WITH_INSTANCE + 1))
    assert ledger.find_instance("with-steps-3") is None
    assert ledger.list_for_instance("with-steps-3") == []
    assert instance_rows(ledger, "with-steps-3") == []  # not even its deadline-index row
    with pytest.raises(InvalidLedgerInput, match="duplicate step ids"):
        ledger.create_instance("with-steps-5", "wf", **kwargs, steps=_steps(2) + _steps(1))
    assert ledger.find_instance("with-steps-5") is None and instance_rows(ledger, "with-steps-5") == []
    # the largest that fits is one transaction
    ledger.create_instance("with-steps-4", "wf", **kwargs, steps=_steps(MAX_STEPS_WITH_INSTANCE))
    assert len(ledger.list_for_instance("with-steps-4")) == MAX_STEPS_WITH_INSTANCE
