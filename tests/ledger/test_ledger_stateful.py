"""Random transition sequences against a real Azurite: the ledger never breaks its own rules.

Hypothesis drives legal and illegal moves, stale-ETag writes, heartbeats and crashes between the
index write and the step write; after every step the ledger must agree with a simple model, every
audited move must be allowed by the transition table, and the deadline index must agree with the
step rows (no watched step without its index row; strays only after a crash, and cleaned up).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from azure.core.exceptions import ServiceRequestError
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.ledger.stateful_support import crashable_ledger, drop_tables, run_machine
from workflow_core import clock
from workflow_core.ledger import (
    ALLOWED_TRANSITIONS,
    ATTENTION_STATUSES,
    DEADLINE_STATUSES,
    ConcurrencyConflict,
    IllegalTransition,
    NewStep,
    StepStatus,
)

T0 = datetime(2030, 6, 1, 8, 0, tzinfo=UTC)
STEP_IDS = ["a", "b", "c"]
FAR_FUTURE = datetime(2100, 1, 1, tzinfo=UTC)


@pytest.fixture
def connection(azurite):
    return azurite.connection_string


def make_machine(connection_string: str):
    class LedgerMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.ledger, self.crash = crashable_ledger(connection_string, "st")
            self.instance = f"inst-{uuid.uuid4().hex[:10]}"
            self.ledger.create_steps(
                self.instance, "wf", [NewStep(step_id=s, step_name=s, agent="x") for s in STEP_IDS], actor="t"
            )
            self.model = dict.fromkeys(STEP_IDS, StepStatus.PENDING)
            self.stale = {s: self.ledger.get(self.instance, s) for s in STEP_IDS}
            self.crashed = False

        def teardown(self):
            drop_tables(self.ledger)

        @rule(
            step=st.sampled_from(STEP_IDS),
            to=st.sampled_from(list(StepStatus)),
            minutes=st.integers(min_value=-90, max_value=90),
        )
        def move(self, step, to, minutes):
            record = self.ledger.get(self.instance, step)
            deadline = T0 + timedelta(minutes=minutes, seconds=minutes % 7)
            allowed = to in ALLOWED_TRANSITIONS[record.status]
            try:
                self.ledger.transition(record, to, actor="hypothesis", deadline=deadline)
            except IllegalTransition:
                assert not allowed, f"{record.status} -> {to} is allowed but was refused"
                return
            assert allowed, f"{record.status} -> {to} is illegal but was accepted"
            self.stale[step] = record
            self.model[step] = to

        @rule(step=st.sampled_from(STEP_IDS), to=st.sampled_from(list(StepStatus)))
        def stale_write_is_refused(self, step, to):
            old = self.stale[step]
            current = self.ledger.get(self.instance, step)
            if old.etag == current.etag or to not in ALLOWED_TRANSITIONS[old.status]:
                return
            with pytest.raises(ConcurrencyConflict):
                self.ledger.transition(old, to, actor="late-writer", deadline=T0)

        @rule(step=st.sampled_from(STEP_IDS), minutes=st.integers(min_value=1, max_value=120))
        def heartbeat(self, step, minutes):
            record = self.ledger.get(self.instance, step)
            if record.status not in DEADLINE_STATUSES:
                return
            with clock.use_clock(lambda: T0):  # the trusted clock is virtual here
                updated = self.ledger.extend_deadline(record, minutes * 60, actor="agent", allow_earlier=True)
            assert updated.deadline == T0 + timedelta(minutes=minutes)
            self.stale[step] = record

        @precondition(lambda self: any(s in DEADLINE_STATUSES for s in self.model.values()))
        @rule(step=st.sampled_from(STEP_IDS), minutes=st.integers(min_value=-30, max_value=30))
        def crash_between_index_and_step_write(self, step, minutes):
            record = self.ledger.get(self.instance, step)
            if record.status not in DEADLINE_STATUSES:
                return
            self.crash.armed = True
            with pytest.raises(ServiceRequestError), clock.use_clock(lambda: T0):
                self.ledger.extend_deadline(record, minutes * 60, actor="agent", allow_earlier=True)
            self.crashed = True
            assert self.ledger.get(self.instance, step).etag == record.etag  # step untouched

        @rule(minutes=st.integers(min_value=-120, max_value=120))
        def overdue_is_exact(self, minutes):
            now = T0 + timedelta(minutes=minutes)
            found = {r.step_id for r in self.ledger.overdue(now, limit=50)}
            expected = {
                r.step_id
                for r in self.ledger.list_for_instance(self.instance)
                if r.status in DEADLINE_STATUSES and r.deadline <= now
            }
            assert found == expected

        @invariant()
        def ledger_matches_model(self):
            records = {r.step_id: r for r in self.ledger.list_for_instance(self.instance)}
            assert {k: r.status for k, r in records.items()} == self.model

        @invariant()
        def index_agrees_with_steps(self):
            rows = {r["_key"]: r for r in self.ledger.index_rows()}
            for record in self.ledger.list_for_instance(self.instance):
                if record.status in DEADLINE_STATUSES | ATTENTION_STATUSES:
                    assert record.index_key in rows, f"{record.step_id} ({record.status}) lost its index row"
                    row = rows[record.index_key]
                    assert (row["InstanceId"], row["StepId"]) == (self.instance, record.step_id)
                    if record.status in DEADLINE_STATUSES:
                        assert row["Deadline"] == record.deadline
                else:
                    assert record.index_key is None
            pointed = {r.index_key for r in self.ledger.list_for_instance(self.instance) if r.index_key}
            strays = set(rows) - pointed
            if not self.crashed:
                assert not strays, f"stray index rows without a crash: {sorted(strays)}"

        @invariant()
        def audit_trail_only_holds_legal_moves(self):
            for entry in self.ledger.audit_trail(self.instance):
                if entry.action == "transition":
                    assert StepStatus(entry.to_status) in ALLOWED_TRANSITIONS[StepStatus(entry.from_status)]

    return LedgerMachine


def test_ledger_state_machine(connection):
    run_machine(make_machine(connection))


def test_crash_leftovers_are_cleaned_by_overdue(azurite):
    """After crashes, one sweep of overdue() leaves exactly one index row per watched step."""
    ledger, crash = crashable_ledger(azurite.connection_string, "st")
    ledger.create_steps("inst-x", "wf", [NewStep(step_id="a", step_name="a", agent="x")], actor="t")
    record = ledger.transition(ledger.get("inst-x", "a"), "Dispatched", actor="t", deadline=T0)
    for minutes in (5, 10, 15):
        crash.armed = True
        with pytest.raises(ServiceRequestError), clock.use_clock(lambda: T0):
            ledger.extend_deadline(record, minutes * 60, actor="agent")
    assert len(ledger.index_rows()) == 4
    assert [r.step_id for r in ledger.overdue(FAR_FUTURE)] == ["a"]
    assert [r["_key"] for r in ledger.index_rows()] == [ledger.get("inst-x", "a").index_key]
