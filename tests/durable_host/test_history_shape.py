"""History in the extension's shape: ``IsPlayed`` as the framework leaves it, and times that move.

The Durable extension serialises the stored history into the orchestration context before the
episode runs (``OrchestrationTriggerBinding.BindAsync``), and the Durable Task Framework stores each
event with the ``IsPlayed`` it had then: ``true`` on the messages it processed in their episode
(``TaskOrchestrationExecutor.ExecuteCore`` sets it after processing each), ``false`` on every
OrchestratorStarted (skipped before that assignment) and on the events its dispatcher writes for the
actions. Every event carries the time it was written, so timestamps progress between episodes.
"""

from __future__ import annotations

import itertools
import time
from datetime import timedelta

from devtools.durable_host import DurableTestHost, FlowingClock, VirtualClock
from devtools.durable_host.history import HistoryEventType as H
from devtools.durable_host.history import parse_time

PROCESSED = {
    H.EXECUTION_STARTED,
    H.EXECUTION_TERMINATED,
    H.TASK_COMPLETED,
    H.TASK_FAILED,
    H.SUB_ORCHESTRATION_INSTANCE_COMPLETED,
    H.SUB_ORCHESTRATION_INSTANCE_FAILED,
    H.TIMER_FIRED,
    H.EVENT_RAISED,
}


def _host(seen: list, **options) -> DurableTestHost:
    def orchestrator(context):
        seen.append([(int(e.event_type), e.is_played) for e in context.histories])
        yield context.call_activity("hello", "x")
        yield context.create_timer(context.current_utc_datetime + timedelta(minutes=1))
        approved = yield context.wait_for_external_event("approved")
        return approved

    return DurableTestHost(
        orchestrators={"flow": orchestrator}, activities={"hello": lambda name: f"hi {name}"}, **options
    )


def test_the_orchestrator_sees_isplayed_true_only_on_messages_of_earlier_episodes():
    """Before: every stored event carried ``IsPlayed: true``, OrchestratorStarted and TaskScheduled too."""
    seen: list = []
    with _host(seen) as host:
        iid = host.start_new("flow")
        host.run_until_idle()
        host.advance(timedelta(minutes=1))
        host.raise_event(iid, "approved", "yes")
        assert host.run_until_complete(iid).output == "yes"
    assert len(seen) == 4
    for context in seen:
        last_start = max(i for i, (kind, _) in enumerate(context) if kind == H.ORCHESTRATOR_STARTED)
        for index, (kind, played) in enumerate(context):
            expected = index < last_start and kind in PROCESSED
            assert played is expected, (index, H(kind).name, played, context)
    # the last replay had every kind: messages of earlier episodes played, the rest not
    kinds = {kind for kind, _ in seen[-1]}
    assert {H.TASK_SCHEDULED, H.TASK_COMPLETED, H.TIMER_CREATED, H.TIMER_FIRED, H.EVENT_RAISED} <= kinds


def test_the_stored_history_keeps_isplayed_as_the_framework_leaves_it():
    seen: list = []
    with _host(seen) as host:
        iid = host.start_new("flow")
        host.run_until_idle()
        host.advance(timedelta(minutes=1))
        host.raise_event(iid, "approved", "yes")
        host.run_until_complete(iid)
        history = host.history(iid)
    assert {e["EventType"] for e in history} >= {H.EXECUTION_COMPLETED, H.ORCHESTRATOR_COMPLETED}
    assert all(e["IsPlayed"] is (e["EventType"] in PROCESSED) for e in history), history


def test_a_flowing_clock_moves_with_real_time_and_still_skips_to_timers():
    clock = FlowingClock()
    first = clock.now()
    time.sleep(0.01)
    assert clock.now() - first >= timedelta(milliseconds=10)
    skipped = clock.advance(timedelta(minutes=5))
    assert skipped - first >= timedelta(minutes=5)
    assert clock.advance_to(first) >= skipped  # never backwards


def test_timestamps_progress_between_episodes_on_a_flowing_clock_and_not_on_a_virtual_one():
    """Before: a recording's episodes carried one timestamp unless a timer moved the clock."""

    def starts(clock) -> list:
        seen: list = []
        with _host(seen, clock=clock) as host:
            iid = host.start_new("flow")
            host.run_until_idle()
            time.sleep(0.002)
            host.advance(timedelta(minutes=1))
            time.sleep(0.002)
            host.raise_event(iid, "approved", "yes")
            host.run_until_complete(iid)
            history = host.history(iid)
        return [parse_time(e["Timestamp"]) for e in history if e["EventType"] == H.ORCHESTRATOR_STARTED]

    flowing = starts(FlowingClock())
    assert all(a < b for a, b in itertools.pairwise(flowing)), flowing
    virtual = starts(VirtualClock())
    assert len(set(virtual)) < len(virtual)  # episodes without a timer share the clock's time
