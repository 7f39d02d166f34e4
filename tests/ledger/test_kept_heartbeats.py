"""A heartbeat that would move a later deadline earlier keeps the deadline. By default it writes
nothing (the in-app worker's beats cost nothing more); with ``record_kept`` (a message-only agent's
beat, the only sign it is alive) it is recorded in one ETag-guarded write: ``last_heartbeat`` and the
audit trail move, the deadline and its index row stay."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.ledger.test_ledger import T0, dispatch, steps
from workflow_core import clock
from workflow_core.ledger import ConcurrencyConflict, StepLedger, StepStatus


def running(ledger: StepLedger, instance: str):
    ledger.create_steps(instance, "bulk", steps("a"), actor="agent")
    record = ledger.transition(dispatch(ledger, instance, "a", T0), StepStatus.RUNNING, actor="w1")
    with clock.use_clock(lambda: T0):
        return ledger.extend_deadline(record, 300, actor="w1")  # deadline T0 + 300 s


def test_a_kept_deadline_writes_nothing_by_default(ledger: StepLedger):
    record = running(ledger, "kept-1")
    trail = len(ledger.audit_trail("kept-1"))
    with clock.use_clock(lambda: T0 + timedelta(seconds=10)):
        same = ledger.extend_deadline(record, 30, actor="w1")
    assert same is record
    assert ledger.get("kept-1", "a").etag == record.etag
    assert len(ledger.audit_trail("kept-1")) == trail


def test_a_recorded_kept_beat_moves_last_heartbeat_and_the_trail_not_the_deadline(ledger: StepLedger):
    record = running(ledger, "kept-2")
    later = T0 + timedelta(seconds=10)
    with clock.use_clock(lambda: later):
        beat = ledger.extend_deadline(record, 30, actor="w1", record_kept=True)
    row = ledger.get("kept-2", "a")
    assert (row.deadline, row.last_heartbeat, row.etag) == (T0 + timedelta(seconds=300), later, beat.etag)
    assert row.etag != record.etag
    last = ledger.audit_trail("kept-2")[-1]
    assert (last.action, last.reason) == ("heartbeat", "heartbeat (deadline kept)")
    assert [r["_key"] for r in ledger.index_rows()] == [row.index_key]  # one index row, unchanged
    with pytest.raises(ConcurrencyConflict), clock.use_clock(lambda: later):  # ETag-guarded
        ledger.extend_deadline(record, 30, actor="w1", record_kept=True)
