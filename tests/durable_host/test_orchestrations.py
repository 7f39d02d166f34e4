"""The durable test host runs real orchestrators through the real SDK replay: patterns end to end.

Every orchestrator and activity here is a tiny one written for the test.
"""

from __future__ import annotations

import json
import time
import warnings
from contextlib import contextmanager
from datetime import timedelta

import azure.durable_functions as df
import pytest
from azure.durable_functions.models.history.HistoryEventType import HistoryEventType

from devtools.durable_host import (
    DEFAULT_EPOCH,
    DurableTestHost,
    InstanceCompletedError,
    OrchestrationAlreadyExistsError,
)

Status = df.OrchestrationRuntimeStatus
SCHEMAS = pytest.mark.parametrize("schema", [2, 1, 0], ids=["schema-v3", "schema-v2", "schema-v1"])


def make_host(orchestrators: dict, activities: dict | None = None, **options) -> DurableTestHost:
    return DurableTestHost(orchestrators=orchestrators, activities=activities or {}, **options)


# -- activity chain --------------------------------------------------------------------------------


def chain(ctx: df.DurableOrchestrationContext):
    text = ctx.get_input()["text"]
    text = yield ctx.call_activity("upper", text)
    text = yield ctx.call_activity("exclaim", text)
    text = yield ctx.call_activity("exclaim", text)
    return {"result": text}


@SCHEMAS
def test_activity_chain_runs_in_order_and_passes_json_results(schema):
    host = make_host(
        {"chain": chain}, {"upper": str.upper, "exclaim": lambda s: s + "!"}, schema_version=schema
    )
    iid = host.start_new("chain", input={"text": "hi"})

    status = host.run_until_complete(iid)

    assert status.runtime_status == Status.Completed
    assert status.output == {"result": "HI!!"}
    assert status.input_ == {"text": "hi"}
    assert host.activity_calls == {"upper": 1, "exclaim": 2}
    history = host.history(iid)
    kinds = [HistoryEventType(e["EventType"]) for e in history]
    assert kinds[:2] == [HistoryEventType.ORCHESTRATOR_STARTED, HistoryEventType.EXECUTION_STARTED]
    scheduled = [e for e in history if e["EventType"] == HistoryEventType.TASK_SCHEDULED]
    assert [(e["EventId"], e["Name"]) for e in scheduled] == [(0, "upper"), (1, "exclaim"), (2, "exclaim")]
    assert all({"EventType", "EventId", "IsPlayed", "Timestamp"} <= e.keys() for e in history)
    assert kinds[-1] == HistoryEventType.EXECUTION_COMPLETED


def test_async_activities_and_fan_out_fan_in():
    async def square(n):
        return n * n

    def fan(ctx):
        results = yield ctx.task_all([ctx.call_activity("square", n) for n in range(5)])
        return sum(results)

    host = make_host({"fan": fan}, {"square": square})
    status = host.run_until_complete(host.start_new("fan"))
    assert status.output == 0 + 1 + 4 + 9 + 16
    assert host.activity_calls["square"] == 5


# -- failure, compensation -------------------------------------------------------------------------


def booking(ctx):
    done = []
    try:
        done.append((yield ctx.call_activity("reserve", "hotel")))
        done.append((yield ctx.call_activity("charge", "card")))
    except Exception as exc:
        for step in reversed(done):
            yield ctx.call_activity("undo", step)
        return {"status": "compensated", "error": str(exc).splitlines()[0]}
    return {"status": "ok"}


def test_activity_failure_is_caught_by_the_orchestrator_which_compensates():
    undone = []

    def charge(_):
        raise ValueError("card declined")

    host = make_host(
        {"booking": booking},
        {"reserve": lambda what: f"reserved {what}", "charge": charge, "undo": undone.append},
    )
    status = host.run_until_complete(host.start_new("booking"))

    assert status.runtime_status == Status.Completed
    assert status.output["status"] == "compensated"
    # The extension's shape: two spaces after "failed:", Details the serialised exception.
    assert status.output["error"] == "Activity function 'charge' failed:  ValueError: card declined "
    assert undone == ["reserved hotel"]
    failed = [e for e in host.history(status.instance_id) if e["EventType"] == HistoryEventType.TASK_FAILED]
    assert failed[0]["Reason"] == "Activity function 'charge' failed:  ValueError: card declined"
    details = json.loads(failed[0]["Details"])
    assert details["Message"] == " ValueError: card declined"
    assert "raise ValueError" in details["InnerException"]["Message"]


def test_uncaught_failure_fails_the_orchestration_with_the_out_of_proc_error():
    def fragile(ctx):
        yield ctx.call_activity("boom")
        return "unreachable"

    def boom(_):
        raise RuntimeError("kaput")

    host = make_host({"fragile": fragile}, {"boom": boom})
    status = host.run_until_complete(host.start_new("fragile"))

    assert status.runtime_status == Status.Failed
    assert status.output.startswith("Orchestrator function 'fragile' failed: Activity function 'boom' failed")
    assert "kaput" in status.output


def test_retry_options_are_honoured_with_durable_retry_timers():
    attempts = []

    def flaky(x):
        attempts.append(x)
        if len(attempts) < 3:
            raise TimeoutError("remote service timed out")
        return x * 2

    def with_retry(ctx):
        return (yield ctx.call_activity_with_retry("flaky", df.RetryOptions(60_000, 5), 21))

    host = make_host({"with_retry": with_retry}, {"flaky": flaky})
    status = host.run_until_complete(host.start_new("with_retry"))

    assert status.output == 42
    assert len(attempts) == 3
    assert host.clock.now() - DEFAULT_EPOCH == timedelta(minutes=2)  # two retry intervals


def test_exhausted_retries_surface_as_an_exception_after_the_last_retry_timer():
    def always_fails(_):
        raise ConnectionError("down")

    def give_up(ctx):
        try:
            yield ctx.call_activity_with_retry("always_fails", df.RetryOptions(30_000, 2))
        except Exception as exc:
            return f"gave up: {'down' in str(exc)}"

    host = make_host({"give_up": give_up}, {"always_fails": always_fails})
    status = host.run_until_complete(host.start_new("give_up"))

    assert status.output == "gave up: True"
    assert host.activity_calls["always_fails"] == 2
    # DTFx waits one retry interval after every failure, the last one included.
    assert host.clock.now() - DEFAULT_EPOCH == timedelta(minutes=1)


@SCHEMAS
def test_parallel_retries_keep_sequence_numbers_in_step_with_the_sdk(schema):
    failures = {"a": 1, "b": 2}

    def flaky(name):
        if failures[name]:
            failures[name] -= 1
            raise RuntimeError(f"{name} flaked")
        return name.upper()

    def parallel(ctx):
        retry = df.RetryOptions(1_000, 4)
        first = yield ctx.task_all([ctx.call_activity_with_retry("flaky", retry, n) for n in ("a", "b")])
        after = yield ctx.call_activity("flaky", "a")
        return [*first, after]

    host = make_host({"parallel": parallel}, {"flaky": flaky}, schema_version=schema)
    with no_duplicate_completion_warning():
        status = host.run_until_complete(host.start_new("parallel"))

    assert status.runtime_status == Status.Completed, status.output
    assert status.output == ["A", "B", "A"]


def test_retry_failure_and_an_event_in_the_same_episode_keep_sequence_numbers_aligned():
    host: DurableTestHost

    def flaky(n):
        if host.activity_calls["flaky"] == 1:
            host.raise_event(iid, "go", "now")  # arrives before this attempt's failure is reported
            raise RuntimeError("first attempt fails")
        return n

    def racer(ctx):
        retried = ctx.call_activity_with_retry("flaky", df.RetryOptions(60_000, 3), 7)
        go = ctx.wait_for_external_event("go")
        yield ctx.task_any([go, retried])
        side = yield ctx.call_activity("side", "x")  # scheduled in the same episode as the failure
        value = yield retried
        return [side, value]

    host = make_host({"racer": racer}, {"flaky": flaky, "side": str.upper})
    iid = host.start_new("racer")
    with no_duplicate_completion_warning():
        status = host.run_until_complete(iid)

    assert status.runtime_status == Status.Completed, status.output
    assert status.output == ["X", 7]
    assert host.clock.now() - DEFAULT_EPOCH == timedelta(minutes=1)


@contextmanager
def no_duplicate_completion_warning():
    """The SDK warns 'Potential duplicate Task completion' when a sequence id does not match."""
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        yield
    messages = [str(r.message) for r in records]
    assert not [m for m in messages if "duplicate Task completion" in m], messages


# -- external events and timers --------------------------------------------------------------------


def approval(ctx):
    deadline = ctx.current_utc_datetime + timedelta(minutes=10)
    event = ctx.wait_for_external_event("approved")
    timeout = ctx.create_timer(deadline)
    winner = yield ctx.task_any([event, timeout])
    if winner == event:
        timeout.cancel()
        return {"approved": event.result}
    return {"approved": None, "timed_out_at": ctx.current_utc_datetime.isoformat()}


@SCHEMAS
def test_event_wins_the_race_the_timer_is_cancelled_and_the_orchestration_completes_at_once(schema):
    host = make_host({"approval": approval}, schema_version=schema)
    iid = host.start_new("approval")
    host.run_until_idle()
    assert host.get_status(iid).runtime_status == Status.Running

    host.raise_event(iid, "approved", {"by": "ops"})
    status = host.run_until_complete(iid)

    assert status.output == {"approved": {"by": "ops"}}
    assert host.clock.now() == DEFAULT_EPOCH  # no time had to pass
    assert any("cancelled" in text for _, text in host.timeline(iid))
    fired = [e for e in host.history(iid) if e["EventType"] == HistoryEventType.TIMER_FIRED]
    assert fired == []


@SCHEMAS
def test_timer_wins_the_race_when_no_event_comes(schema):
    host = make_host({"approval": approval}, schema_version=schema)
    iid = host.start_new("approval")

    status = host.run_until_complete(iid)

    assert status.output["approved"] is None
    assert status.output["timed_out_at"] == (DEFAULT_EPOCH + timedelta(minutes=10)).isoformat()
    fired = [e for e in host.history(iid) if e["EventType"] == HistoryEventType.TIMER_FIRED]
    created = [e for e in host.history(iid) if e["EventType"] == HistoryEventType.TIMER_CREATED]
    assert [e["TimerId"] for e in fired] == [e["EventId"] for e in created]


def test_an_uncancelled_losing_timer_keeps_the_instance_running_until_it_fires():
    def forgetful(ctx):
        event = ctx.wait_for_external_event("approved")
        timeout = ctx.create_timer(ctx.current_utc_datetime + timedelta(minutes=10))
        winner = yield ctx.task_any([event, timeout])
        return winner == event  # forgot timeout.cancel()

    host = make_host({"forgetful": forgetful})
    iid = host.start_new("forgetful")
    host.raise_event(iid, "approved", True)
    host.run_until_idle()
    assert host.get_status(iid).runtime_status == Status.Running

    status = host.run_until_complete(iid)
    assert status.output is True
    assert host.clock.now() == DEFAULT_EPOCH + timedelta(minutes=10)


def test_ten_minute_deadline_three_attempts_takes_well_under_a_second():
    def dispatch_with_deadline(ctx):
        for attempt in range(1, 4):
            yield ctx.call_activity("dispatch", attempt)
            result = ctx.wait_for_external_event("result")
            deadline = ctx.create_timer(ctx.current_utc_datetime + timedelta(minutes=10))
            winner = yield ctx.task_any([result, deadline])
            if winner == result:
                deadline.cancel()
                return {"attempt": attempt, "result": result.result}
        return {"gave_up_after": 3, "at": ctx.current_utc_datetime.isoformat()}

    host = make_host({"deadline": dispatch_with_deadline}, {"dispatch": lambda attempt: None})
    started = time.perf_counter()
    status = host.run_until_complete(host.start_new("deadline"))
    elapsed = time.perf_counter() - started

    assert status.output == {"gave_up_after": 3, "at": (DEFAULT_EPOCH + timedelta(minutes=30)).isoformat()}
    assert elapsed < 1.0
    assert host.clock.now() - DEFAULT_EPOCH == timedelta(minutes=30)
    assert host.activity_calls["dispatch"] == 3


@pytest.mark.filterwarnings("ignore:Potential duplicate Task completion")
def test_an_event_raised_before_the_orchestrator_waits_is_buffered():
    def late_listener(ctx):
        prepared = yield ctx.call_activity("prepare")
        answer = yield ctx.wait_for_external_event("answer")
        return [prepared, answer]

    host = make_host({"late": late_listener}, {"prepare": lambda _: "ready"})
    iid = host.start_new("late")
    host.raise_event(iid, "answer", 42)  # before the first replay even ran

    status = host.run_until_complete(iid)
    assert status.output == ["ready", 42]


def test_orchestrator_time_comes_from_the_virtual_clock():
    def clock_reader(ctx):
        first = ctx.current_utc_datetime
        yield ctx.create_timer(first + timedelta(hours=2))
        return [first.isoformat(), ctx.current_utc_datetime.isoformat()]

    host = make_host({"clock_reader": clock_reader})
    status = host.run_until_complete(host.start_new("clock_reader"))
    assert status.output == [DEFAULT_EPOCH.isoformat(), (DEFAULT_EPOCH + timedelta(hours=2)).isoformat()]


# -- sub-orchestrations and continue-as-new --------------------------------------------------------


def test_sub_orchestration_result_and_failure_reach_the_parent():
    def child(ctx):
        n = ctx.get_input()
        if n < 0:
            raise ValueError("negative input")
        return (yield ctx.call_activity("double", n))

    def parent(ctx):
        ok = yield ctx.call_sub_orchestrator("child", 21)
        named = yield ctx.call_sub_orchestrator("child", 5, instance_id="child-five")
        try:
            yield ctx.call_sub_orchestrator("child", -1)
        except Exception as exc:
            return [ok, named, "negative input" in str(exc)]

    host = make_host({"parent": parent, "child": child}, {"double": lambda n: n * 2})
    iid = host.start_new("parent")
    status = host.run_until_complete(iid)

    assert status.output == [42, 10, True]
    assert host.get_status("child-five").output == 10
    children = [host.get_status(i) for i in host.instance_ids() if i != iid]
    assert sorted(c.runtime_status.value for c in children) == ["Completed", "Completed", "Failed"]
    created = [
        e for e in host.history(iid) if e["EventType"] == HistoryEventType.SUB_ORCHESTRATION_INSTANCE_CREATED
    ]
    assert [e["InstanceId"] == "child-five" for e in created] == [False, True, False]


def test_continue_as_new_runs_five_generations_with_fresh_history():
    def counter(ctx):
        state = ctx.get_input()
        total = yield ctx.call_activity("add", state)
        if state["generation"] < 5:
            ctx.continue_as_new({"generation": state["generation"] + 1, "total": total})
            return None
        return {"generations": state["generation"], "total": total}

    host = make_host({"counter": counter}, {"add": lambda s: s["total"] + s["generation"]})
    iid = host.start_new("counter", input={"generation": 1, "total": 0})
    status = host.run_until_complete(iid)

    assert status.output == {"generations": 5, "total": 1 + 2 + 3 + 4 + 5}
    assert status.input_ == {"generation": 5, "total": 10}
    assert host.activity_calls["add"] == 5
    history = host.history(iid)  # only the last generation's
    assert sum(e["EventType"] == HistoryEventType.EXECUTION_STARTED for e in history) == 1
    assert sum("continued as new" in text for _, text in host.timeline(iid)) == 4


def test_events_arriving_during_continue_as_new_reach_the_next_generation():
    def looping(ctx):
        state = ctx.get_input()
        value = yield ctx.wait_for_external_event("tick")
        seen = [*state["seen"], value]
        if len(seen) < 3:
            ctx.continue_as_new({"seen": seen})
            return None
        return seen

    host = make_host({"looping": looping})
    iid = host.start_new("looping", input={"seen": []})
    host.run_until_idle()
    host.raise_event(iid, "tick", 0)
    host.step()  # generation 1 consumes tick 0 and continues as new
    assert host.get_status(iid).runtime_status == Status.ContinuedAsNew
    host.raise_event(iid, "tick", 1)  # arrives during the hand-over
    host.run_until_idle()
    host.raise_event(iid, "tick", 2)

    assert host.run_until_complete(iid).output == [0, 1, 2]


# -- crash, terminate, restart ---------------------------------------------------------------------


def pipeline(ctx):
    a = yield ctx.call_activity("step", "a")
    b = yield ctx.call_activity("step", a + "b")
    c = yield ctx.call_activity("step", b + "c")
    return c


def test_crash_mid_flow_replays_from_history_without_rerunning_completed_activities():
    reference = make_host({"pipeline": pipeline}, {"step": lambda s: s + "."})
    expected = reference.run_until_complete(reference.start_new("pipeline")).output

    calls = []

    def step(s):
        calls.append(s)
        return s + "."

    host = make_host({"pipeline": pipeline}, {"step": step})
    iid = host.start_new("pipeline")
    while len(calls) < 2:  # until the second activity has run, before its result is committed
        host.step()
    host.crash(iid)
    status = host.run_until_complete(iid)

    assert status.output == expected == "a.b.c."
    # 'a' was committed to history before the crash: never re-run. The second activity's result was
    # still in flight: it is redelivered (at-least-once), then the flow goes on.
    assert calls == ["a", "a.b", "a.b", "a.b.c"]
    assert any("CRASH" in text for _, text in host.timeline(iid))


def test_crash_after_results_are_committed_re_executes_nothing():
    calls = []
    host = make_host({"pipeline": pipeline}, {"step": lambda s: calls.append(s) or s + "."})
    iid = host.start_new("pipeline")
    host.step()
    host.step()  # activity 'a' ran...
    host.step()  # ...and its result is in history; activity 'a.b' ran
    host.step()  # ... its result committed too
    host.crash()  # the whole process
    assert host.run_until_complete(iid).output == "a.b.c."
    assert calls == ["a", "a.b", "a.b.c"]


def test_fault_injection_before_and_after_the_side_effect():
    side_effects = []

    def pay(amount):
        side_effects.append(amount)
        return "paid"

    def payer(ctx):
        outcomes = []
        for amount in (1, 2, 3):
            try:
                outcomes.append((yield ctx.call_activity("pay", amount)))
            except Exception as exc:
                outcomes.append(str(exc).split(" \n ")[0].split(": ")[-1])
        return outcomes

    host = make_host({"payer": payer}, {"pay": pay})
    # call 1 fails before its side effect; call 2 fails after it
    host.crash_activity_once("pay", ConnectionError("no route"))
    host.crash_activity_once("pay", TimeoutError("reply lost"), after=True)
    status = host.run_until_complete(host.start_new("payer"))

    assert status.output == ["no route", "reply lost", "paid"]
    assert side_effects == [2, 3]


def test_a_lost_activity_result_is_redelivered():
    host = make_host({"pipeline": pipeline}, {"step": lambda s: s + "."})
    host.lose_activity_result_once("step")
    assert host.run_until_complete(host.start_new("pipeline")).output == "a.b.c."
    assert host.activity_calls["step"] == 4


def test_terminate_stops_a_waiting_instance():
    host = make_host({"approval": approval})
    iid = host.start_new("approval")
    host.run_until_idle()

    assert host.terminate(iid, "operator said so") is True
    status = host.get_status(iid)
    assert status.runtime_status == Status.Terminated
    assert status.output == "operator said so"
    with pytest.raises(InstanceCompletedError):
        host.raise_event(iid, "approved", True)
    assert host.terminate(iid, "again") is False
    host.advance(timedelta(hours=1))  # its timer never fires into a finished instance
    assert host.get_status(iid).runtime_status == Status.Terminated


def test_a_running_id_cannot_be_started_twice_but_a_finished_one_can():
    host = make_host({"approval": approval})
    host.start_new("approval", instance_id="fixed")
    with pytest.raises(OrchestrationAlreadyExistsError):
        host.start_new("approval", instance_id="fixed")
    host.run_until_complete("fixed")
    host.start_new("approval", instance_id="fixed")
    assert host.get_status("fixed").runtime_status == Status.Pending


def test_unknown_orchestrator_and_activity_names_fail_clearly():
    def typo(ctx):
        yield ctx.call_activity("no_such_activity")

    host = make_host({"typo": typo})
    with pytest.raises(ValueError, match="doesn't exist"):
        host.start_new("no_such_orchestrator")
    status = host.run_until_complete(host.start_new("typo"))
    assert status.runtime_status == Status.Failed
    assert "The function 'no_such_activity' doesn't exist" in status.output


def test_non_deterministic_orchestrator_code_is_detected():
    switch = {"name": "first"}

    def unstable(ctx):
        yield ctx.call_activity(switch["name"])
        yield ctx.wait_for_external_event("go")
        return "done"

    host = make_host({"unstable": unstable}, {"first": lambda _: 1, "second": lambda _: 2})
    iid = host.start_new("unstable")
    host.run_until_idle()
    switch["name"] = "second"  # the code "changed" between replays
    host.raise_event(iid, "go")
    status = host.run_until_complete(iid)

    assert status.runtime_status == Status.Failed
    assert "Non-Deterministic workflow detected" in status.output


def test_custom_status_and_timeline():
    def reporter(ctx):
        ctx.set_custom_status({"stage": "waiting"})
        yield ctx.create_timer(ctx.current_utc_datetime + timedelta(seconds=30))
        ctx.set_custom_status({"stage": "done"})
        return "ok"

    host = make_host({"reporter": reporter})
    iid = host.start_new("reporter")
    host.run_until_idle()
    assert host.get_status(iid).custom_status == {"stage": "waiting"}
    status = host.run_until_complete(iid)

    assert status.custom_status == {"stage": "done"}
    timeline = host.timeline(iid)
    assert timeline[0][0] == DEFAULT_EPOCH
    assert timeline[-1] == (DEFAULT_EPOCH + timedelta(seconds=30), "completed: ok")
    assert "+00:00:30.000" in host.format_timeline(iid)
