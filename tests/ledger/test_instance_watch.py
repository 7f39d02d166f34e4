"""Steps watched through their instance's deadline-index row (workflow_core/ledger/watch.py), on
real Azurite: no index row of their own, found overdue through the instance row, and never left
without a watcher (a deadline moved earlier, the row moved forward, the instance settled)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import count

import pytest

from workflow_core.ledger import InstanceHandle, InstanceStatus, NewStep, StepLedger, StepStatus, encode_json
from workflow_core.ledger.index_keys import index_row_time
from workflow_core.ledger.instance_list import LIST_PARTITION
from workflow_core.ledger.watch import WATCHED_BY_INSTANCE
from workflow_core.workflows import get_workflow, version_of

S = StepStatus
NOW = datetime.now(UTC).replace(microsecond=0)

pytestmark = pytest.mark.usefixtures("clock_at_module_now")
_ids = count(1)


def started(ledger: StepLedger, *, promise: timedelta = timedelta(minutes=10), steps_due_after=None):
    """An instance with two Pending steps, and a handle on its record."""
    instance_id = f"watch-{next(_ids)}"
    record = ledger.create_instance(
        instance_id,
        "provision-tenant",
        actor="test",
        input_json=encode_json({}),
        scheduler_deadline=NOW + promise,
        steps_due_after_seconds=steps_due_after,
        version=version_of(get_workflow("provision-tenant")),
    )
    handle = InstanceHandle(record)
    steps = ledger.create_steps(
        instance_id,
        "provision-tenant",
        [NewStep(step_id=s, step_name=s, agent=f"{s}.do") for s in ("a", "b")],
        actor="test",
    )
    return handle, steps


def dispatch(ledger: StepLedger, handle: InstanceHandle, step, deadline: datetime):
    """What dispatch_step writes: the step Dispatched, the promise moved, in one transaction."""
    return ledger.transition(
        step,
        S.DISPATCHED,
        actor="test",
        attempt=1,
        deadline=deadline,
        instance=handle,
        instance_changes={"scheduler_deadline": deadline + timedelta(seconds=30)},
    )


def own_rows(ledger: StepLedger, instance_id: str) -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {"steps": [], "instance": []}
    for row in ledger.index_rows():
        if row.get("InstanceId") != instance_id or row["PartitionKey"] == LIST_PARTITION:
            continue
        rows["instance" if row.get("Kind") == "instance" else "steps"].append(row["_key"])
    return rows


def row_time(ledger: StepLedger, instance_id: str) -> datetime:
    return index_row_time(ledger.get_instance(instance_id).index_key)


def test_a_dispatch_with_the_instance_writes_no_index_row_of_its_own(ledger):
    handle, (a, _) = started(ledger, steps_due_after=60)
    before = ledger.index_rows()
    written = dispatch(ledger, handle, a, NOW + timedelta(minutes=5))
    assert written.index_key == WATCHED_BY_INSTANCE
    assert ledger.index_rows() == before  # neither a step row nor an instance row move
    assert own_rows(ledger, handle.record.instance_id)["steps"] == []
    assert row_time(ledger, a.instance_id) <= written.deadline


def test_a_deadline_before_the_instance_row_moves_the_row_earlier_in_the_same_write(ledger):
    handle, (a, _) = started(ledger, promise=timedelta(minutes=10))  # row due at the promise
    written = dispatch(ledger, handle, a, NOW + timedelta(minutes=2))
    rows = own_rows(ledger, a.instance_id)
    assert written.index_key == WATCHED_BY_INSTANCE and rows["steps"] == []
    assert len(rows["instance"]) == 1  # the old instance row went
    assert row_time(ledger, a.instance_id) == written.deadline


def test_the_instance_row_finds_a_watched_step_once_its_deadline_passes(ledger):
    handle, (a, b) = started(ledger, steps_due_after=60)
    a = dispatch(ledger, handle, a, NOW + timedelta(minutes=5))
    b = dispatch(ledger, handle, b, NOW + timedelta(minutes=8))
    assert ledger.overdue_work(NOW + timedelta(minutes=4, seconds=59)).steps == []
    ledger.stats.reset()
    due = ledger.overdue_work(NOW + timedelta(minutes=5))
    assert [(s.step_id, s.etag) for s in due.steps] == [("a", a.etag)]
    assert due.instances == []  # the scheduler's promise (b's deadline + grace) still holds
    # one index query, one partition query: the instance record and its two watched steps
    assert ledger.stats.queries == 2 and ledger.stats.step_entities_read == 2
    assert ledger.overdue(NOW + timedelta(hours=1)) == []  # the step index has nothing to find


def test_a_row_that_falls_due_early_moves_forward_to_the_earliest_watched_deadline(ledger):
    handle, (a, b) = started(ledger, steps_due_after=60)
    dispatch(ledger, handle, a, NOW + timedelta(minutes=5))
    ledger.transition(ledger.get(a.instance_id, "a"), S.RUNNING, actor="worker")
    b = dispatch(ledger, handle, b, NOW + timedelta(minutes=8))
    # the row (due 60 s after the start) falls due with nothing overdue: it moves to a's deadline
    due = ledger.overdue_work(NOW + timedelta(seconds=61))
    assert due.instances == [] and due.steps == []
    assert row_time(ledger, a.instance_id) == NOW + timedelta(minutes=5)
    assert [s.step_id for s in ledger.overdue_work(NOW + timedelta(minutes=5)).steps] == ["a"]


def test_a_write_without_the_instance_keeps_the_watch_only_while_the_deadline_does_not_move_earlier(ledger):
    handle, (a, _) = started(ledger, steps_due_after=60)
    a = dispatch(ledger, handle, a, NOW + timedelta(minutes=5))
    running = ledger.transition(a, S.RUNNING, actor="worker")  # same deadline: still watched
    assert running.index_key == WATCHED_BY_INSTANCE
    later = ledger.update(running, actor="worker", deadline=NOW + timedelta(minutes=9))  # a heartbeat
    assert later.index_key == WATCHED_BY_INSTANCE
    earlier = ledger.update(later, actor="worker", deadline=NOW + timedelta(seconds=20))
    assert earlier.index_key != WATCHED_BY_INSTANCE  # a row of its own, due at the new deadline
    assert own_rows(ledger, a.instance_id)["steps"] == [earlier.index_key]
    assert [s.step_id for s in ledger.overdue(NOW + timedelta(seconds=20))] == ["a"]
    done = ledger.transition(earlier, S.SUCCEEDED, actor="worker")
    assert done.index_key is None and own_rows(ledger, a.instance_id)["steps"] == []


def test_a_completed_step_needs_no_index_delete(ledger):
    handle, (a, _) = started(ledger, steps_due_after=60)
    running = ledger.transition(dispatch(ledger, handle, a, NOW + timedelta(minutes=5)), S.RUNNING, actor="w")
    before = ledger.index_rows()
    done = ledger.transition(
        running, S.SUCCEEDED, actor="w", instance=InstanceHandle(ledger.get_instance(a.instance_id))
    )
    assert done.index_key is None
    assert ledger.index_rows() == before


@pytest.mark.parametrize("outcome", ["failed", "compensated"])
def test_settling_an_instance_gives_its_watched_in_flight_steps_rows_of_their_own(ledger, outcome):
    from activities.scheduler.instances import SettleInput, settle_instance  # noqa: F401  (the activity itself)

    handle, (a, _) = started(ledger, steps_due_after=60)
    a = dispatch(ledger, handle, a, NOW + timedelta(minutes=5))

    class Services:  # what settle_instance reads from the app's services
        pass

    services = Services()
    services.ledger = ledger
    if outcome == "compensated":
        record = ledger.get_instance(a.instance_id)
        ledger.transition_instance(
            record, InstanceStatus.COMPENSATING, actor="test", scheduler_deadline=NOW + timedelta(minutes=1)
        )
    settle_instance({"instance_id": a.instance_id, "outcome": outcome}, services)
    step = ledger.get(a.instance_id, "a")
    assert step.index_key != WATCHED_BY_INSTANCE
    assert own_rows(ledger, a.instance_id)["steps"] == [step.index_key]
    assert [s.step_id for s in ledger.overdue(NOW + timedelta(minutes=5))] == ["a"]
    assert ledger.overdue_work(NOW + timedelta(hours=1)).steps == []  # the instance row is gone


def test_the_in_flight_count_counts_supervised_instances_and_steps_with_rows_of_their_own(ledger):
    handle, (a, b) = started(ledger, steps_due_after=60)
    assert ledger.count_in_flight() == 1  # the instance: its row watches whatever it dispatches
    a = dispatch(ledger, handle, a, NOW + timedelta(minutes=5))
    assert ledger.count_in_flight() == 1
    ledger.transition(
        ledger.get(b.instance_id, "b"),
        S.DISPATCHED,
        actor="test",
        attempt=1,
        deadline=NOW + timedelta(minutes=5),
    )  # written without the instance: a row of its own
    assert ledger.count_in_flight() == 2
