"""Time: the virtual clock, the process clock for activities, pumps, periodic work, the real clock."""

from __future__ import annotations

import time
from collections import deque
from datetime import UTC, datetime, timedelta

import azure.durable_functions as df
import pytest

from devtools.durable_host import DEFAULT_EPOCH, DurableTestHost, RealClock, VirtualClock
from workflow_core import clock

Status = df.OrchestrationRuntimeStatus


def wait_for_result(ctx):
    yield ctx.call_activity("dispatch", ctx.get_input())
    result = ctx.wait_for_external_event("result")
    deadline = ctx.create_timer(ctx.current_utc_datetime + timedelta(minutes=10))
    winner = yield ctx.task_any([result, deadline])
    if winner == result:
        deadline.cancel()
        return {"result": result.result, "at": ctx.current_utc_datetime.isoformat()}
    return {"result": None, "at": ctx.current_utc_datetime.isoformat()}


def test_activities_read_the_host_clock_through_workflow_core_clock():
    def stamp(_):
        return clock.utcnow().isoformat()

    def stamper(ctx):
        first = yield ctx.call_activity("stamp")
        yield ctx.create_timer(ctx.current_utc_datetime + timedelta(minutes=3))
        second = yield ctx.call_activity("stamp")
        return [first, second]

    start = datetime(2031, 6, 1, 12, tzinfo=UTC)
    host = DurableTestHost(
        orchestrators={"stamper": stamper}, activities={"stamp": stamp}, clock=VirtualClock(start)
    )
    status = host.run_until_complete(host.start_new("stamper"))

    assert status.output == [start.isoformat(), (start + timedelta(minutes=3)).isoformat()]
    assert abs(clock.utcnow() - datetime.now(UTC)) < timedelta(minutes=1)  # restored after the run
    with host:
        assert clock.utcnow() == start + timedelta(minutes=3)
    assert abs(clock.utcnow() - datetime.now(UTC)) < timedelta(minutes=1)


def test_time_does_not_skip_while_a_pump_is_busy():
    """An agent needing several loop iterations must finish before the deadline timer is skipped to."""
    queue: deque[tuple[str, int]] = deque()
    host = DurableTestHost(
        orchestrators={"wait_for_result": wait_for_result},
        activities={"dispatch": lambda work: queue.append((work["id"], work["ticks"]))},
    )
    busy = {"left": 0, "current": None}

    def agent() -> int:
        if busy["current"] is None and queue:
            busy["current"], busy["left"] = queue.popleft()
        if busy["current"] is None:
            return 0
        busy["left"] -= 1
        if busy["left"] == 0:
            host.run_async(host.client.raise_event(busy["current"], "result", "done"))
            busy["current"] = None
        return 1

    host.add_pump(agent)
    iid = host.start_new("wait_for_result", instance_id="job-1", input={"id": "job-1", "ticks": 25})
    status = host.run_until_complete(iid)

    assert status.output == {"result": "done", "at": DEFAULT_EPOCH.isoformat()}
    assert host.clock.now() == DEFAULT_EPOCH


def test_periodic_work_runs_on_host_time_and_stops_time_skips():
    host = DurableTestHost(
        orchestrators={"wait_for_result": wait_for_result}, activities={"dispatch": lambda _: None}
    )
    iid = host.start_new("wait_for_result")
    ticks: list[datetime] = []

    def watchdog():
        ticks.append(clock.utcnow())
        if len(ticks) == 3:
            host.raise_event(iid, "result", "recovered by the watchdog")

    host.add_periodic(watchdog, timedelta(seconds=30))
    status = host.run_until_complete(iid)

    assert ticks == [DEFAULT_EPOCH + timedelta(seconds=30 * n) for n in (1, 2, 3)]
    assert status.output == {
        "result": "recovered by the watchdog",
        "at": (DEFAULT_EPOCH + timedelta(seconds=90)).isoformat(),
    }


def test_advance_fires_only_the_timers_that_are_due():
    host = DurableTestHost(
        orchestrators={"wait_for_result": wait_for_result}, activities={"dispatch": lambda _: None}
    )
    iid = host.start_new("wait_for_result")
    host.advance(timedelta(minutes=9, seconds=59))
    assert host.get_status(iid).runtime_status == Status.Running
    host.advance(timedelta(seconds=1))
    assert host.get_status(iid).output == {
        "result": None,
        "at": (DEFAULT_EPOCH + timedelta(minutes=10)).isoformat(),
    }


def test_timeout_is_reported_with_a_diagnosis():
    def waits_forever(ctx):
        yield ctx.wait_for_external_event("never")

    host = DurableTestHost(orchestrators={"waits_forever": waits_forever})
    iid = host.start_new("waits_forever")
    with pytest.raises(TimeoutError, match="nothing left to run") as caught:
        host.run_until_complete(iid)
    assert "'never'" in str(caught.value)


def test_real_clock_mode_waits_for_timers_on_the_wall_clock():
    def short_nap(ctx):
        yield ctx.create_timer(ctx.current_utc_datetime + timedelta(milliseconds=150))
        return "rested"

    host = DurableTestHost(orchestrators={"short_nap": short_nap}, clock="real")
    assert isinstance(host.clock, RealClock)
    started = time.perf_counter()
    status = host.run_until_complete(host.start_new("short_nap"), timeout_virtual=timedelta(seconds=5))
    elapsed = time.perf_counter() - started

    assert status.output == "rested"
    assert 0.14 <= elapsed < 2.0
    with pytest.raises(RuntimeError):
        host.advance(timedelta(seconds=1))
