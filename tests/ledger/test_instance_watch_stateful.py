"""Random sequences against a real Azurite: no in-flight step is ever left without a watcher.

Hypothesis mixes writes that carry the instance record (the scheduler's: a step may become watched
by the instance's row) with writes that do not (agents, heartbeats, earlier deadlines), writes
against remembered versions without a read (current or stale: merges, ``known_rows.py``), watchdog
looks that move the instance row forward, and crashes before the transaction. After every step,
each step in a deadline status is watched by its own index row (due at its deadline) or by the
instance's row (due no later than its deadline), and the watchdog's two reads together find
exactly the overdue steps (workflow_core/ledger/watch.py).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from azure.core.exceptions import ServiceRequestError
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tests.ledger.stateful_support import crashable_ledger, drop_tables, run_machine
from workflow_core import clock
from workflow_core.ledger import (
    ALLOWED_TRANSITIONS,
    DEADLINE_STATUSES,
    ConcurrencyConflict,
    IllegalTransition,
    InstanceHandle,
    NewStep,
    StepStatus,
    encode_json,
)
from workflow_core.ledger.index_keys import index_row_time
from workflow_core.ledger.known_rows import instance_snapshot, known_instance, known_step, step_fields
from workflow_core.ledger.watch import WATCHED_BY_INSTANCE

T0 = datetime(2030, 6, 1, 8, 0, tzinfo=UTC)
STEP_IDS = ["a", "b", "c"]
MINUTES = st.integers(min_value=-60, max_value=90)
STEPS = st.sampled_from(STEP_IDS)
STATUSES = st.sampled_from(list(StepStatus))


def make_machine(connection_string: str):
    class WatchMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.ledger, self.crash = crashable_ledger(connection_string, "w")
            self.instance = f"inst-{uuid.uuid4().hex[:10]}"
            with clock.use_clock(lambda: T0):
                self.ledger.create_instance(
                    self.instance,
                    "wf",
                    actor="t",
                    input_json=encode_json({"kept": True}),
                    scheduler_deadline=T0 + timedelta(minutes=30),
                    steps_due_after_seconds=600,
                    version="wf@test",
                )
            self.ledger.create_steps(
                self.instance, "wf", [NewStep(step_id=s, step_name=s, agent="x") for s in STEP_IDS], actor="t"
            )
            self.crashed = False
            self.remembered: dict = {}

        def teardown(self):
            drop_tables(self.ledger)

        def _move(self, step, to, minutes, promise, *, with_instance):
            record = self.ledger.get(self.instance, step)
            deadline = T0 + timedelta(minutes=minutes, seconds=minutes % 7)
            extra = {}
            if with_instance:
                extra = {
                    "instance": InstanceHandle(self.ledger.get_instance(self.instance)),
                    "instance_changes": {"scheduler_deadline": T0 + timedelta(minutes=promise)},
                }
            try:
                with clock.use_clock(lambda: T0):
                    self.ledger.transition(record, to, actor="hypothesis", deadline=deadline, **extra)
            except IllegalTransition:
                assert to not in ALLOWED_TRANSITIONS[record.status]

        @rule(
            step=st.sampled_from(STEP_IDS),
            to=st.sampled_from(list(StepStatus)),
            minutes=MINUTES,
            promise=MINUTES,
        )
        def scheduler_moves(self, step, to, minutes, promise):
            self._move(step, to, minutes, promise, with_instance=True)

        @rule(step=STEPS, to=STATUSES, minutes=MINUTES)
        def agent_moves(self, step, to, minutes):
            self._move(step, to, minutes, 0, with_instance=False)

        @rule(step=STEPS)
        def remember_versions(self, step):
            """What a scheduler or worker carries: the step and instance as read now (snapshots)."""
            record = self.ledger.get(self.instance, step)
            self.remembered[step] = (
                step_fields(record),
                record.etag,
                instance_snapshot(self.ledger.get_instance(self.instance)),
            )

        @rule(step=STEPS, to=STATUSES, minutes=MINUTES, promise=MINUTES)
        def unread_moves(self, step, to, minutes, promise):
            """A write against remembered versions, unread (known_rows.py): current or stale, it
            either lands as a merge or loses the race; the invariants hold either way."""
            if step not in self.remembered:
                return
            fields, etag, snapshot = self.remembered[step]
            known = known_step(fields, etag)
            handle = InstanceHandle(known_instance(snapshot))
            changes = {"scheduler_deadline": T0 + timedelta(minutes=promise)}
            deadline = T0 + timedelta(minutes=minutes, seconds=minutes % 7)
            try:
                with clock.use_clock(lambda: T0):
                    self.ledger.transition(
                        known,
                        to,
                        actor="unread",
                        deadline=deadline,
                        instance=handle,
                        instance_changes=changes,
                    )
            except IllegalTransition:
                assert to not in ALLOWED_TRANSITIONS[known.status]
            except ConcurrencyConflict:
                pass  # someone wrote since: nothing was written
            self.remembered.pop(step)

        @rule(step=STEPS, minutes=st.integers(min_value=-30, max_value=120))
        def heartbeat(self, step, minutes):
            record = self.ledger.get(self.instance, step)
            if record.status not in DEADLINE_STATUSES:
                return
            with clock.use_clock(lambda: T0):
                self.ledger.extend_deadline(record, minutes * 60, actor="agent", allow_earlier=True)

        @rule(step=STEPS, to=STATUSES, minutes=MINUTES)
        def crash_before_a_scheduler_write(self, step, to, minutes):
            before = self.ledger.get(self.instance, step)
            self.crash.armed = True
            try:
                self._move(step, to, minutes, minutes, with_instance=True)
            except ServiceRequestError:
                self.crashed = True
            self.crash.armed = False
            if self.crashed:
                assert self.ledger.get(self.instance, step).etag == before.etag  # step untouched

        @rule(minutes=st.integers(min_value=-60, max_value=120))
        def watchdog_looks(self, minutes):
            self.ledger.overdue_work(T0 + timedelta(minutes=minutes))  # may move the instance row on

        @rule(minutes=st.integers(min_value=-60, max_value=120))
        def overdue_is_exact(self, minutes):
            now = T0 + timedelta(minutes=minutes)
            found = [r.step_id for r in self.ledger.overdue(now, limit=50)]
            found += [r.step_id for r in self.ledger.overdue_work(now, limit=50).steps]
            expected = {
                r.step_id
                for r in self.ledger.list_for_instance(self.instance)
                if r.status in DEADLINE_STATUSES and r.deadline <= now
            }
            assert sorted(found) == sorted(expected)  # each once: by its own row or the instance's

        @invariant()
        def merges_keep_what_snapshots_leave_out(self):
            assert self.ledger.get_instance(self.instance).input_ref == encode_json({"kept": True})

        @invariant()
        def every_in_flight_step_is_watched(self):
            rows = {r["_key"]: r for r in self.ledger.index_rows()}
            instance = self.ledger.get_instance(self.instance)
            assert instance.index_key in rows
            instance_due = index_row_time(instance.index_key)
            pointed = {instance.index_key}
            for record in self.ledger.list_for_instance(self.instance):
                if record.status not in DEADLINE_STATUSES:
                    assert record.index_key != WATCHED_BY_INSTANCE
                    if record.index_key:  # the operators' inbox (CompensationFailed)
                        assert record.index_key in rows and record.index_key.startswith("attention|")
                        pointed.add(record.index_key)
                    continue
                if record.index_key == WATCHED_BY_INSTANCE:
                    assert instance_due <= record.deadline, f"{record.step_id}: instance row due too late"
                else:
                    assert record.index_key in rows, f"{record.step_id} ({record.status}) lost its index row"
                    assert rows[record.index_key]["Deadline"] == record.deadline
                    pointed.add(record.index_key)
            strays = {k for k in rows if not k.startswith("list|")} - pointed
            if not self.crashed:
                assert not strays, f"stray index rows without a crash: {sorted(strays)}"

    return WatchMachine


def test_no_in_flight_step_is_left_without_a_watcher(azurite):
    run_machine(make_machine(azurite.connection_string))


@pytest.mark.parametrize("minutes", [5])
def test_the_machine_can_watch_through_the_instance(azurite, minutes):
    """The machine above is not vacuous: a scheduler write does make a step watched by the instance."""
    machine = make_machine(azurite.connection_string)()
    try:
        machine.scheduler_moves("a", StepStatus.DISPATCHED, minutes=20, promise=40)
        assert machine.ledger.get(machine.instance, "a").index_key == WATCHED_BY_INSTANCE
        machine.every_in_flight_step_is_watched()
        machine.agent_moves("a", StepStatus.RUNNING, minutes=minutes)  # earlier: a row of its own
        assert machine.ledger.get(machine.instance, "a").index_key != WATCHED_BY_INSTANCE
        machine.every_in_flight_step_is_watched()
    finally:
        machine.teardown()
