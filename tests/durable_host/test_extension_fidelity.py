"""The host does what the Durable extension and the Durable Task Framework do (issue 11, points 1-8).

Each test names the behaviour, the source it follows (see the table in docs/durable-test-host.md)
and, in its docstring, why it failed on the host before these rules were implemented.
"""

from __future__ import annotations

import json
from datetime import timedelta

import azure.durable_functions as df
import pytest
from azure.durable_functions.models.ReplaySchema import ReplaySchema

from devtools.durable_host import DurableTestHost, OrchestrationAlreadyExistsError
from devtools.durable_host.history import HistoryEventType as H

Status = df.OrchestrationRuntimeStatus


def make_host(orchestrators: dict, activities: dict | None = None, **options) -> DurableTestHost:
    return DurableTestHost(orchestrators=orchestrators, activities=activities or {}, **options)


def events(host: DurableTestHost, iid: str, kind: H) -> list[dict]:
    return [e for e in host.history(iid) if e["EventType"] == kind]


def episode_batches(host: DurableTestHost, iid: str) -> list[list[int]]:
    """The event types each episode brought in (what followed each OrchestratorStarted)."""
    batches: list[list[int]] = []
    for event in host.history(iid):
        kind = event["EventType"]
        if kind == H.ORCHESTRATOR_STARTED:
            batches.append([])
        elif kind in (H.EVENT_RAISED, H.TIMER_FIRED, H.TASK_COMPLETED, H.TASK_FAILED):
            batches[-1].append(kind)
    return batches


# -- 1. replay schema ------------------------------------------------------------------------------


def schema_probe(ctx: df.DurableOrchestrationContext):
    yield ctx.call_activity("noop")
    short, interval = ctx._maximum_short_timer_duration, ctx._long_timer_interval_duration
    return {
        "schema": ctx._replay_schema.name,
        "short": short and short.total_seconds(),
        "interval": interval and interval.total_seconds(),
    }


def test_the_host_announces_replay_schema_v3_with_the_azure_storage_timer_durations():
    """Old host: sent ``upperSchemaVersion: 0`` and no durations, so the SDK ran V1 (the output said
    ``V1`` and the durations were None)."""
    host = make_host({"probe": schema_probe}, {"noop": lambda _: None})
    status = host.run_until_complete(host.start_new("probe"))

    assert status.output == {
        "schema": ReplaySchema.V3.name,
        "short": timedelta(days=6).total_seconds(),
        "interval": timedelta(days=3).total_seconds(),
    }


def test_v1_is_still_available_when_asked_for_explicitly():
    host = make_host({"probe": schema_probe}, {"noop": lambda _: None}, schema_version=0)
    status = host.run_until_complete(host.start_new("probe"))
    assert status.output == {"schema": ReplaySchema.V1.name, "short": None, "interval": None}


def test_a_timer_longer_than_six_days_runs_as_three_day_intervals_and_fires_on_time():
    """Old host (V1): one 10-day timer; V3 splits it into intervals of at most 3 days."""

    def sleeper(ctx):
        yield ctx.create_timer(ctx.current_utc_datetime + timedelta(days=10))
        return ctx.current_utc_datetime.isoformat()

    host = make_host({"sleeper": sleeper})
    start = host.clock.now()
    status = host.run_until_complete(host.start_new("sleeper"), timeout_virtual=timedelta(days=11))

    assert status.runtime_status == Status.Completed
    assert status.output == (start + timedelta(days=10)).isoformat()
    fired = [e["Timestamp"][:10] for e in events(host, status.instance_id, H.TIMER_FIRED)]
    # 3-day intervals while more than 6 days remain, then the rest: +3, +6, +10 days
    assert fired == [(start + timedelta(days=d)).strftime("%Y-%m-%d") for d in (3, 6, 10)]


# -- 2. a cancelled timer still fires --------------------------------------------------------------


def race_then_wait(ctx):
    event = ctx.wait_for_external_event("first")
    timer = ctx.create_timer(ctx.current_utc_datetime + timedelta(minutes=5))
    winner = yield ctx.task_any([event, timer])
    if winner == event:
        timer.cancel()
    second = yield ctx.wait_for_external_event("second")
    return [event.result, second]


def test_a_cancelled_timer_still_fires_into_a_running_instance():
    """Old host: a timer returned with ``isCanceled`` never fired. The extension only cancels the .NET
    task; the timer message fires later into the instance: one more episode, nothing to do."""
    host = make_host({"race": race_then_wait})
    iid = host.start_new("race")
    host.run_until_idle()
    host.raise_event(iid, "first", 1)
    host.run_until_idle()
    episodes_before = host.episodes(iid)

    host.advance(timedelta(minutes=10))

    (fired,) = events(host, iid, H.TIMER_FIRED)
    (created,) = events(host, iid, H.TIMER_CREATED)
    assert fired["TimerId"] == created["EventId"]
    assert host.episodes(iid) == episodes_before + 1
    assert host.get_status(iid).runtime_status == Status.Running
    host.raise_event(iid, "second", 2)
    assert host.run_until_complete(iid).output == [1, 2]


# -- 3. an orchestration ends only when no task is open ----------------------------------------------


def fails_fast(ctx):
    raise ValueError("child A broke")
    yield  # pragma: no cover - makes this a generator


def slow_child(ctx):
    yield ctx.create_timer(ctx.current_utc_datetime + timedelta(hours=1))
    return "B done"


def parallel_parent(ctx):
    yield ctx.task_all([ctx.call_sub_orchestrator("a"), ctx.call_sub_orchestrator("b")])
    return "unreachable"


def test_a_parent_whose_parallel_child_failed_stays_running_until_the_siblings_finish():
    """Old host: the parent failed as soon as child A's failure arrived. The framework completes or
    fails an orchestration only when it has no open tasks (child B is one)."""
    host = make_host({"parent": parallel_parent, "a": fails_fast, "b": slow_child})
    iid = host.start_new("parent")
    host.run_until_idle()

    assert host.get_status(iid).runtime_status == Status.Running
    assert len(events(host, iid, H.SUB_ORCHESTRATION_INSTANCE_FAILED)) == 1

    host.advance(timedelta(hours=1))
    status = host.get_status(iid)
    assert status.runtime_status == Status.Failed
    assert "child A broke" in status.output


def test_an_orchestrator_that_raises_with_an_uncancelled_timer_stays_running_until_it_fires():
    """Old host: failed at once (only completion waited for open timers, not failure)."""

    def careless(ctx):
        event = ctx.wait_for_external_event("go")
        timer = ctx.create_timer(ctx.current_utc_datetime + timedelta(minutes=30))
        yield ctx.task_any([event, timer])
        raise RuntimeError("gave up without cancelling")

    host = make_host({"careless": careless})
    iid = host.start_new("careless")
    host.run_until_idle()
    host.raise_event(iid, "go")
    host.run_until_idle()
    assert host.get_status(iid).runtime_status == Status.Running

    host.advance(timedelta(minutes=30))
    status = host.get_status(iid)
    assert status.runtime_status == Status.Failed
    assert status.output.startswith("Orchestrator function 'careless' failed: gave up without cancelling")


def test_continue_as_new_with_an_uncancelled_timer_waits_for_it_and_keeps_carried_events():
    """Continue-as-new completes the execution, so it waits for open tasks too (old host: moved on
    at once); events after the continue-as-new point, in that batch or later, still reach the next
    generation."""

    def restless(ctx):
        if ctx.get_input() == "second":
            return (yield ctx.wait_for_external_event("late"))
        go = ctx.wait_for_external_event("go")
        yield ctx.task_any([go, ctx.create_timer(ctx.current_utc_datetime + timedelta(minutes=5))])
        ctx.continue_as_new("second")  # the losing timer is not cancelled

    host = make_host({"restless": restless})
    iid = host.start_new("restless", input="first")
    host.raise_event(iid, "go")  # both in the first episode's batch
    host.raise_event(iid, "late", "kept")
    host.run_until_idle()
    assert host.get_status(iid).input_ == "first"  # still generation 1, held by the timer

    host.advance(timedelta(minutes=5))
    status = host.run_until_complete(iid)
    assert status.input_ == "second" and status.output == "kept"


# -- 4. events across continue_as_new ---------------------------------------------------------------


def adder(ctx):
    total = ctx.get_input() + (yield ctx.wait_for_external_event("add"))
    if total >= 3:
        return total
    ctx.continue_as_new(total)
    return None


def test_an_event_after_the_continue_as_new_point_of_a_batch_reaches_the_next_generation():
    """Old host: both events came in the first episode's batch; generation 1 used the first and
    continued as new, the second stayed in generation 1's history and was lost, so generation 2
    waited forever (TimeoutError). The framework carries it over (``HandleEventRaisedEvent``)."""
    host = make_host({"adder": adder})
    iid = host.start_new("adder", input=0)
    host.raise_event(iid, "add", 1)  # before the first episode: one batch with ExecutionStarted
    host.raise_event(iid, "add", 2)

    status = host.run_until_complete(iid, timeout_virtual=timedelta(minutes=1))

    assert status.output == 3
    assert [e["Input"] for e in events(host, iid, H.EVENT_RAISED)] == ["2"]  # generation 2's history


def test_an_event_before_the_continue_as_new_point_stays_with_the_old_generation():
    """The first event of the batch is consumed by generation 1; only later ones move on."""
    host = make_host({"adder": adder})
    iid = host.start_new("adder", input=0)
    host.raise_event(iid, "add", 1)
    host.run_until_idle()

    assert host.get_status(iid).runtime_status == Status.Running
    assert host.get_status(iid).input_ == 1  # generation 2 started with the total so far ...
    assert events(host, iid, H.EVENT_RAISED) == []  # ... and waits, empty-handed


# -- 5. a terminated child -----------------------------------------------------------------------------


def waiting_child(ctx):
    return (yield ctx.wait_for_external_event("never"))


def catching_parent(ctx):
    try:
        yield ctx.call_sub_orchestrator("child", instance_id="child-1")
    except Exception as exc:
        return str(exc)
    return "child completed"


def test_a_terminated_childs_failure_reason_is_the_termination_reason():
    """Old host: the Reason was ``Orchestration terminated: <reason>``. The framework completes the
    child with the reason as its result and sends that as the parent's Reason, without Details."""
    host = make_host({"parent": catching_parent, "child": waiting_child})
    iid = host.start_new("parent")
    host.run_until_idle()

    host.terminate("child-1", "operator said stop")
    status = host.run_until_complete(iid)

    (failed,) = events(host, iid, H.SUB_ORCHESTRATION_INSTANCE_FAILED)
    assert failed["Reason"] == "operator said stop"
    assert failed["Details"] is None
    assert status.output == "operator said stop \n None"  # the SDK's f"{Reason} \n {Details}"


# -- 6. a start message for a running instance id ----------------------------------------------------


def test_a_sub_orchestration_start_for_an_already_running_instance_id_is_dropped():
    """Old host: the parent's task failed with ``An Orchestration instance ... already exists``. The
    Azure Storage provider dedupes only top-level starts, and the dispatcher drops the child's start
    as a duplicate: the parent never hears back, even when the running instance completes."""
    host = make_host({"parent": catching_parent, "child": waiting_child})
    host.start_new("child", instance_id="child-1")  # started top-level first (as a watchdog might)
    host.run_until_idle()
    iid = host.start_new("parent")
    host.run_until_idle()

    assert events(host, iid, H.SUB_ORCHESTRATION_INSTANCE_FAILED) == []
    assert host.get_status(iid).runtime_status == Status.Running
    host.raise_event("child-1", "never", "done anyway")
    host.run_until_idle()
    assert host.get_status("child-1").runtime_status == Status.Completed
    assert events(host, iid, H.SUB_ORCHESTRATION_INSTANCE_COMPLETED) == []
    assert host.get_status(iid).runtime_status == Status.Running  # waits for good


def test_a_client_start_for_a_running_sub_orchestration_id_is_refused():
    """The reverse: the client checks the instance first and answers 409, so nothing reaches the
    running child (the extension's ``StartNewAsync``; Azure Storage dedupes top-level starts)."""
    host = make_host({"parent": catching_parent, "child": waiting_child})
    iid = host.start_new("parent")
    host.run_until_idle()

    with pytest.raises(OrchestrationAlreadyExistsError):
        host.start_new("child", instance_id="child-1")
    host.raise_event("child-1", "never", "ok")
    assert host.run_until_complete(iid).output == "child completed"


# -- 7. failure shapes ------------------------------------------------------------------------------


def test_an_activity_failure_has_the_extensions_reason_and_serialised_exception():
    """Old host: one space after ``failed:`` and a Python traceback as Details."""

    def charge(_):
        raise ValueError("card declined")

    def payer(ctx):
        yield ctx.call_activity("charge")

    host = make_host({"payer": payer}, {"charge": charge})
    iid = host.start_new("payer")
    host.run_until_complete(iid)

    (failed,) = events(host, iid, H.TASK_FAILED)
    assert failed["Reason"] == "Activity function 'charge' failed:  ValueError: card declined"
    details = json.loads(failed["Details"])
    assert details["ClassName"] == "System.Exception"
    assert details["Message"] == " ValueError: card declined"


def test_a_sub_orchestration_failure_has_the_extensions_reason_and_details():
    """Old host: Details was a Python traceback, not ``Message: <error>, StackTrace: ...``."""
    host = make_host({"parent": catching_parent, "child": fails_fast})
    iid = host.start_new("parent")
    status = host.run_until_complete(iid)

    (failed,) = events(host, iid, H.SUB_ORCHESTRATION_INSTANCE_FAILED)
    assert failed["Reason"] == "Orchestrator function 'child' failed: child A broke"
    assert failed["Details"].startswith("Message: child A broke, StackTrace: ")
    assert status.output.startswith("Orchestrator function 'child' failed: child A broke \n Message: ")
    assert host.get_status("child-1").output == "Orchestrator function 'child' failed: child A broke"


# -- 8. batches ------------------------------------------------------------------------------------


def deadline_race(ctx):
    result = ctx.wait_for_external_event("result")
    deadline = ctx.create_timer(ctx.current_utc_datetime + timedelta(minutes=10))
    winner = yield ctx.task_any([result, deadline])
    if winner == result:
        deadline.cancel()
        return {"won": "result", "value": result.result}
    return {"won": "deadline"}


@pytest.mark.parametrize("first", ["result", "deadline"])
def test_a_result_and_the_deadline_in_one_batch_the_first_in_the_batch_wins(first):
    """Old host: no way to hand an episode several events in a chosen order (``batched``)."""
    host = make_host({"race": deadline_race})
    iid = host.start_new("race")
    host.run_until_idle()

    with host.batched(iid):
        if first == "result":
            host.raise_event(iid, "result", 42)
            host.advance(timedelta(minutes=10))
        else:
            host.advance(timedelta(minutes=10))
            host.raise_event(iid, "result", 42)
    status = host.run_until_complete(iid)

    expected = {"won": "result", "value": 42} if first == "result" else {"won": "deadline"}
    assert status.output == expected
    order = [H.EVENT_RAISED, H.TIMER_FIRED] if first == "result" else [H.TIMER_FIRED, H.EVENT_RAISED]
    assert episode_batches(host, iid)[-1] == order


def attempts(ctx):
    """Two attempts, each racing its own result against a deadline; attempt 2 starts when 1 times out."""
    seen = []
    for attempt in (1, 2):
        result = ctx.wait_for_external_event(f"result:{attempt}")
        deadline = ctx.create_timer(ctx.current_utc_datetime + timedelta(minutes=10))
        winner = yield ctx.task_any([result, deadline])
        if winner == result:
            deadline.cancel()
            seen.append(result.result)
            return {"attempt": attempt, "result": result.result}
    return {"attempt": None}


@pytest.mark.parametrize("late_first", [True, False])
def test_a_late_result_of_attempt_1_in_the_batch_of_attempt_2s_result_is_ignored(late_first):
    host = make_host({"attempts": attempts})
    iid = host.start_new("attempts")
    host.advance(timedelta(minutes=10))  # attempt 1 times out; attempt 2 waits

    with host.batched(iid):
        pair = [("result:1", "late"), ("result:2", "fresh")]
        for name, value in pair if late_first else reversed(pair):
            host.raise_event(iid, name, value)
    status = host.run_until_complete(iid)

    assert status.output == {"attempt": 2, "result": "fresh"}
    assert episode_batches(host, iid)[-1] == [H.EVENT_RAISED, H.EVENT_RAISED]
