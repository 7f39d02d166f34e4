"""The step ledger against a real Azurite: state machine, ETag races, deadline index, audit trail."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from workflow_core import clock
from workflow_core.ledger import (
    ALLOWED_TRANSITIONS,
    ConcurrencyConflict,
    IllegalTransition,
    InvalidLedgerInput,
    NewStep,
    StepLedger,
    StepNotFound,
    StepsAlreadyExist,
    StepStatus,
)

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def steps(*ids: str) -> list[NewStep]:
    return [NewStep(step_id=i, step_name=i.title(), agent=f"{i}.do", compensator=f"{i}.undo") for i in ids]


def dispatch(ledger: StepLedger, instance: str, step: str, deadline: datetime, attempt: int = 1):
    record = ledger.get(instance, step)
    return ledger.transition(
        record, StepStatus.DISPATCHED, actor="scheduler", deadline=deadline, attempt=attempt, owner="agent:x"
    )


def test_create_dispatch_run_succeed(ledger: StepLedger):
    created = ledger.create_steps("wf-1", "provision", steps("a", "b", "c"), actor="test")
    assert [r.step_id for r in created] == ["a", "b", "c"]
    assert all(r.status is StepStatus.PENDING and r.etag for r in created)

    dispatched = dispatch(ledger, "wf-1", "a", T0 + timedelta(minutes=5))
    assert dispatched.status is StepStatus.DISPATCHED and dispatched.owner == "agent:x"
    running = ledger.transition(dispatched, "Running", actor="worker-1", owner="worker-1")
    done = ledger.transition(running, StepStatus.SUCCEEDED, actor="worker-1", result_ref='{"ok":true}')

    stored = ledger.get("wf-1", "a")
    assert stored.status is StepStatus.SUCCEEDED
    assert stored.result_ref == '{"ok":true}'
    assert stored.etag == done.etag
    assert stored.completed_at is not None
    assert stored.index_key is None  # settled steps leave the deadline index
    assert ledger.index_rows() == []

    moves = [(a.step_id, a.from_status, a.to_status, a.actor) for a in ledger.audit_trail("wf-1")]
    assert moves == [
        ("*", None, "Pending", "test"),
        ("a", "Pending", "Dispatched", "scheduler"),
        ("a", "Dispatched", "Running", "worker-1"),
        ("a", "Running", "Succeeded", "worker-1"),
    ]


def test_illegal_transition_raises_and_writes_nothing(ledger: StepLedger):
    (record, *_) = ledger.create_steps("wf-2", "provision", steps("a"), actor="test")
    with pytest.raises(IllegalTransition) as err:
        ledger.transition(record, StepStatus.SUCCEEDED, actor="rogue")
    assert "Pending -> Succeeded" in str(err.value)
    assert "Dispatched" in str(err.value)  # tells what is allowed
    assert ledger.get("wf-2", "a").status is StepStatus.PENDING
    assert [a.to_status for a in ledger.audit_trail("wf-2")] == ["Pending"]


def test_deadline_statuses_need_a_deadline(ledger: StepLedger):
    (record,) = ledger.create_steps("wf-3", "provision", steps("a"), actor="test")
    with pytest.raises(InvalidLedgerInput, match="needs a deadline"):
        ledger.transition(record, StepStatus.DISPATCHED, actor="scheduler")


def test_racing_writers_exactly_one_wins(ledger: StepLedger, azurite):
    conn = azurite.connection_string
    ledger.create_steps("wf-4", "provision", steps("a"), actor="test")
    record = dispatch(ledger, "wf-4", "a", T0)
    # Two workers read the same version and both try to claim it.
    barrier = threading.Barrier(2)
    outcomes: dict[str, object] = {}

    def claim(worker: str) -> None:
        own = StepLedger.from_connection_string(conn, ledger.ledger_table_name, ledger.index_table_name)
        barrier.wait()
        try:
            outcomes[worker] = own.transition(record, StepStatus.RUNNING, actor=worker, owner=worker)
        except ConcurrencyConflict as exc:
            outcomes[worker] = exc

    threads = [threading.Thread(target=claim, args=(w,)) for w in ("w1", "w2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [w for w, o in outcomes.items() if not isinstance(o, Exception)]
    losers = [w for w, o in outcomes.items() if isinstance(o, ConcurrencyConflict)]
    assert len(winners) == 1 and len(losers) == 1
    stored = ledger.get("wf-4", "a")
    assert stored.status is StepStatus.RUNNING and stored.owner == winners[0]
    # The loser re-reads and re-decides: the step is already Running, owned by the winner.
    assert [a.actor for a in ledger.audit_trail("wf-4") if a.to_status == "Running"] == winners
    # Exactly one index row remains for the step, and it is the one the step points at.
    assert [r["_key"] for r in ledger.index_rows()] == [stored.index_key]


def test_stale_etag_after_a_successful_write_conflicts(ledger: StepLedger):
    ledger.create_steps("wf-5", "provision", steps("a"), actor="test")
    first = dispatch(ledger, "wf-5", "a", T0)
    ledger.transition(first, StepStatus.RUNNING, actor="w1")
    with pytest.raises(ConcurrencyConflict):
        ledger.transition(first, StepStatus.FAILED, actor="w2", last_error="boom")
    with pytest.raises(ConcurrencyConflict):
        ledger.update(first, actor="w2", owner="w2")
    assert ledger.get("wf-5", "a").owner == "agent:x"


def test_overdue_returns_exactly_the_overdue_steps_reading_only_their_index_rows(ledger: StepLedger):
    ledger.create_steps("wf-6", "bulk", steps(*[f"s{i}" for i in range(30)]), actor="test")
    now = T0
    overdue_ids = {f"s{i}" for i in range(0, 30, 6)}  # 5 steps
    for i in range(30):
        sid = f"s{i}"
        # overdue ones spread over several past buckets, the others over future buckets
        past, future = now - timedelta(minutes=i + 1), now + timedelta(minutes=i + 2)
        deadline = past if sid in overdue_ids else future
        dispatch(ledger, "wf-6", sid, deadline)
    ledger.stats.reset()
    found = ledger.overdue(now)
    assert {r.step_id for r in found} == overdue_ids
    assert [r.deadline for r in found] == sorted(r.deadline for r in found)  # earliest first
    # Cost: one query over the index, one row per overdue step, one point read each.
    assert ledger.stats.queries == 1
    assert ledger.stats.index_entities_read == len(overdue_ids)
    assert ledger.stats.step_entities_read == len(overdue_ids)

    ledger.stats.reset()
    assert len(ledger.overdue(now, limit=2)) == 2
    assert ledger.stats.index_entities_read == 2


def test_overdue_boundary_and_same_bucket(ledger: StepLedger):
    ledger.create_steps("wf-7", "bulk", steps("due", "later"), actor="test")
    dispatch(ledger, "wf-7", "due", T0)
    dispatch(ledger, "wf-7", "later", T0 + timedelta(seconds=20))  # same minute bucket
    assert [r.step_id for r in ledger.overdue(T0)] == ["due"]  # deadline == now is overdue
    assert [r.step_id for r in ledger.overdue(T0 - timedelta(microseconds=1))] == []
    assert {r.step_id for r in ledger.overdue(T0 + timedelta(seconds=20))} == {"due", "later"}


def test_extend_deadline_moves_step_out_of_overdue_set(ledger: StepLedger):
    ledger.create_steps("wf-8", "bulk", steps("a"), actor="agent")
    record = ledger.transition(dispatch(ledger, "wf-8", "a", T0), StepStatus.RUNNING, actor="w1")
    assert [r.step_id for r in ledger.overdue(T0 + timedelta(seconds=1))] == ["a"]
    with clock.use_clock(lambda: T0):  # the trusted clock (a virtual one stands in for the service's)
        extended = ledger.extend_deadline(record, 600, actor="w1")
    assert extended.deadline == T0 + timedelta(minutes=10)
    assert extended.last_heartbeat is not None
    assert ledger.overdue(T0 + timedelta(seconds=1)) == []
    assert [r.step_id for r in ledger.overdue(T0 + timedelta(minutes=10))] == ["a"]
    assert len(ledger.index_rows()) == 1  # the old index row was removed
    assert [a.action for a in ledger.audit_trail("wf-8")][-1] == "heartbeat"


def test_extend_deadline_refuses_settled_steps_and_naive_datetimes(ledger: StepLedger):
    ledger.create_steps("wf-9", "bulk", steps("a"), actor="agent")
    record = ledger.get("wf-9", "a")
    with pytest.raises(InvalidLedgerInput, match="Pending"):
        ledger.extend_deadline(record, 60, actor="w1")
    dispatched = dispatch(ledger, "wf-9", "a", T0)
    with pytest.raises(InvalidLedgerInput, match="finite number of seconds"):
        ledger.extend_deadline(dispatched, float("nan"), actor="w1")


def test_stray_index_rows_are_ignored_and_cleaned(ledger: StepLedger):
    """A crash between writing a new index row and updating the step leaves a stray row."""
    ledger.create_steps("wf-10", "bulk", steps("a"), actor="test")
    record = dispatch(ledger, "wf-10", "a", T0 + timedelta(hours=1))
    ledger._index.create_entity(
        {
            "PartitionKey": "203001011100",
            "RowKey": "20300101T110000.000000Z~stray",
            "InstanceId": "wf-10",
            "StepId": "a",
            "Deadline": T0 - timedelta(hours=1),
            "Status": "Dispatched",
        }
    )
    ledger.stats.reset()
    assert ledger.overdue(T0) == []
    assert ledger.stats.stale_index_rows_removed == 1
    assert [r["_key"] for r in ledger.index_rows()] == [record.index_key]


def test_create_steps_is_idempotent_and_refuses_a_different_workflow(ledger: StepLedger):
    first = ledger.create_steps("wf-11", "provision", steps("a", "b"), actor="test")
    again = ledger.create_steps("wf-11", "provision", steps("a", "b"), actor="test")
    assert [r.step_id for r in again] == [r.step_id for r in first]
    with pytest.raises(StepsAlreadyExist):
        ledger.create_steps("wf-11", "other", steps("x"), actor="test")


def test_create_steps_more_than_one_batch(ledger: StepLedger):
    created = ledger.create_steps("wf-12", "big", steps(*[f"s{i:03d}" for i in range(150)]), actor="test")
    assert len(created) == 150
    assert [r.sequence for r in created] == list(range(150))


def test_compensation_path_and_attention_index(ledger: StepLedger):
    ledger.create_steps("wf-13", "provision", steps("a"), actor="test")
    running = ledger.transition(dispatch(ledger, "wf-13", "a", T0), StepStatus.RUNNING, actor="w")
    done = ledger.transition(running, StepStatus.SUCCEEDED, actor="w")
    comp = ledger.transition(done, StepStatus.COMPENSATING, actor="c", deadline=T0, compensation_attempt=1)
    comp2 = ledger.transition(comp, StepStatus.COMPENSATING, actor="c", deadline=T0, compensation_attempt=2)
    failed = ledger.transition(comp2, StepStatus.COMPENSATION_FAILED, actor="c", last_error="refund refused")
    assert [r.step_id for r in ledger.needing_attention()] == ["a"]
    assert ledger.overdue(T0 + timedelta(days=1)) == []  # not the watchdog's business any more
    ledger.transition(failed, StepStatus.SKIPPED, actor="operator:alice", reason="refunded by hand")
    assert ledger.needing_attention() == []
    assert ledger.index_rows() == []


def test_note_appends_without_changing_the_step(ledger: StepLedger):
    (record,) = ledger.create_steps("wf-14", "provision", steps("a"), actor="test")
    ledger.note("wf-14", "a", actor="results", action="late-result-ignored", reason="attempt 1 result")
    assert ledger.get("wf-14", "a").etag == record.etag
    assert ledger.audit_trail("wf-14")[-1].action == "late-result-ignored"


@pytest.mark.parametrize(
    "bad",
    ["", "a/b", "a\\b", "a#b", "a?b", "a\x00b", "tab\there", "x" * 201, "~audit", " lead"],
)
def test_malformed_instance_ids_are_refused_with_a_clear_error(ledger: StepLedger, bad: str):
    with pytest.raises(InvalidLedgerInput, match="instance id"):
        ledger.create_steps(bad, "wf", steps("a"), actor="test")
    with pytest.raises(InvalidLedgerInput, match="instance id"):
        ledger.get(bad, "a")


@pytest.mark.parametrize("bad", ["", "a/b", "a#b", "a?b", "a\\b", "new\nline", "~x", "a b"])
def test_malformed_step_ids_are_refused(bad: str):
    with pytest.raises(InvalidLedgerInput, match="step id"):
        NewStep(step_id=bad, step_name="x", agent="y")


def test_forbidden_characters_are_named_in_the_error(ledger: StepLedger):
    with pytest.raises(InvalidLedgerInput, match=r"forbid: \['#', '/'\]"):
        ledger.get("a/b#c", "s")


def test_unknown_status_and_naive_deadline_are_refused(ledger: StepLedger):
    (record,) = ledger.create_steps("wf-15", "provision", steps("a"), actor="test")
    with pytest.raises(InvalidLedgerInput, match="unknown step status 'Done'"):
        ledger.transition(record, "Done", actor="x")
    with pytest.raises(InvalidLedgerInput, match="naive"):
        ledger.transition(record, "Dispatched", actor="x", deadline=datetime(2030, 1, 1))
    with pytest.raises(InvalidLedgerInput, match="naive"):
        ledger.overdue(datetime(2030, 1, 1))


def test_unknown_step_is_a_typed_error(ledger: StepLedger):
    with pytest.raises(StepNotFound, match="no step 'nope'"):
        ledger.get("wf-none", "nope")
    assert ledger.list_for_instance("wf-none") == []


def test_every_status_is_in_the_transition_table():
    assert set(ALLOWED_TRANSITIONS) == set(StepStatus)
    for targets in ALLOWED_TRANSITIONS.values():
        assert targets <= set(StepStatus)
