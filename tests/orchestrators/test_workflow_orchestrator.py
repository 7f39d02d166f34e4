"""Replay tests of the scheduler: the real workflow_orchestrator handler, driven episode by episode."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.durable_history import (
    CREATE_TIMER,
    SCHEMA_V1,
    SCHEMA_V3,
    TASK_COMPLETED,
    TIMER_FIRED,
    WAIT_FOR_EXTERNAL_EVENT,
    Reply,
    parse_time,
    run_orchestrator,
)
from tests.orchestrators.world import T0, TENANT_OUTPUTS, WORKFLOW, start_input, tenant_world, workflow_player
from workflow_core import contracts as c
from workflow_core.workflows import get_workflow

SCHEMAS = pytest.mark.parametrize("schema", [SCHEMA_V3, SCHEMA_V1], ids=["replay-v3", "replay-v1"])


@SCHEMAS
def test_happy_path_dispatches_each_step_in_order_and_completes(schema):
    ledger, scenario = tenant_world()
    player = workflow_player(scenario, schema=schema)

    final = player.play()

    assert final.error is None
    assert final.is_done
    assert final.output == {
        "status": "succeeded",
        "outputs": TENANT_OUTPUTS,
        "failed_step": None,
        "error": None,
    }
    # each result event is only a signal: the outcome is read from the ledger (verify_result)
    assert ledger.names() == [c.ACTIVITY_CREATE_STEPS] + [
        c.ACTIVITY_DISPATCH_STEP,
        c.ACTIVITY_VERIFY_RESULT,
    ] * 3 + [c.ACTIVITY_SETTLE_INSTANCE]
    assert ledger.called(c.ACTIVITY_SETTLE_INSTANCE) == [{"instance_id": "inst-1", "outcome": "succeeded"}]
    assert ledger.called(c.ACTIVITY_CREATE_STEPS) == [
        {"instance_id": "inst-1", "workflow": "provision-tenant", "version": start_input()["version"]}
    ]
    dispatches = ledger.called(c.ACTIVITY_DISPATCH_STEP)
    assert [(d["step_id"], d["attempt"], d["kind"]) for d in dispatches] == [
        ("create_storage", 1, "work"),
        ("register_dns", 1, "work"),
        ("send_welcome", 1, "work"),
    ]
    # inputs resolved from the workflow input and earlier outputs
    assert dispatches[0]["input"] == {"tenant_id": "tenant1", "region": "westeurope", "sku": "Standard_LRS"}
    assert dispatches[1]["input"] == {"tenant_id": "tenant1", "target": "sttenant1"}
    assert dispatches[2]["input"]["hostname"] == "tenant1.example.net"
    assert all(d["orchestration_id"] == "inst-1" and d["instance_id"] == "inst-1" for d in dispatches)
    assert list(player.waits) == ["result:create_storage:1", "result:register_dns:1", "result:send_welcome:1"]
    # one deadline timer per step, every one cancelled once its result won the race
    timers = player.timers()
    assert len(timers) == 3
    assert all(t.cancelled for t in timers)
    final_timer_actions = [a for a in final.actions if a["actionType"] == CREATE_TIMER]
    assert [a["isCanceled"] for a in final_timer_actions] == [True, True, True]
    assert final.custom_status["phase"] == "succeeded"


def test_deadline_of_each_dispatch_is_orchestration_time_plus_step_deadline():
    _, scenario = tenant_world()
    player = workflow_player(scenario)
    player.play()

    definition = get_workflow("provision-tenant")
    for item in player.activities(c.ACTIVITY_DISPATCH_STEP):
        step = definition.step(item.input["step_id"])
        expected = item.scheduled_at + timedelta(seconds=step.deadline_seconds)
        assert parse_time(item.input["deadline"]) == expected
        # the race's timer fires exactly at the deadline the ledger was given
        timer = next(t for t in player.timers() if t.episode > item.episode)
        assert timer.fire_at == expected


def test_ledger_write_happens_before_the_wait_for_each_attempt():
    """dispatch_step (ledger Dispatched + send) must complete before the orchestrator waits.

    For every result event the orchestrator waits for: the dispatch of that step and attempt was
    scheduled in an earlier episode, had completed by the episode that starts the wait, and comes
    before the wait in that episode's actions; the wait and its deadline timer start together.
    """
    _, scenario = tenant_world(result_register_dns_1=None)  # a timeout adds a second attempt
    player = workflow_player(scenario)
    player.play()
    assert len(player.waits) == 4  # create_storage:1, register_dns:1, register_dns:2, send_welcome:1

    for name, wait_episode in player.waits.items():
        _, step_id, attempt = name.split(":")
        dispatch = next(
            s
            for s in player.activities(c.ACTIVITY_DISPATCH_STEP)
            if s.input["step_id"] == step_id and s.input["attempt"] == int(attempt)
        )
        assert dispatch.episode < wait_episode
        history = json.loads(player.contexts[wait_episode])["history"]
        assert any(
            e["EventType"] == TASK_COMPLETED and e["TaskScheduledId"] == dispatch.task_id for e in history
        )
        actions = player.episodes[wait_episode].actions
        dispatch_at = next(
            i
            for i, a in enumerate(actions)
            if a.get("functionName") == c.ACTIVITY_DISPATCH_STEP
            and json.loads(a["input"])["attempt"] == int(attempt)
            and json.loads(a["input"])["step_id"] == step_id
        )
        wait_at = next(
            i
            for i, a in enumerate(actions)
            if a["actionType"] == WAIT_FOR_EXTERNAL_EVENT and a["externalEventName"] == name
        )
        assert dispatch_at < wait_at
        assert actions[wait_at + 1]["actionType"] == CREATE_TIMER  # raced in one task_any
    first_dispatch_episode = player.activities(c.ACTIVITY_DISPATCH_STEP)[0].episode
    assert not any(
        a["actionType"] == WAIT_FOR_EXTERNAL_EVENT for a in player.episodes[first_dispatch_episode].actions
    )


def test_result_just_before_the_deadline_wins_and_its_timer_is_cancelled():
    definition = get_workflow("provision-tenant")
    deadline = definition.step("send_welcome").deadline_seconds
    # the wait starts one activity-second after the deadline was computed
    ledger, scenario = tenant_world(
        result_send_welcome_1=Reply.succeed({"message_id": "m-1"}, after=deadline - 1 - 0.001)
    )
    player = workflow_player(scenario)

    final = player.play()

    assert final.is_done and final.output["status"] == "succeeded"
    assert c.ACTIVITY_CHECK_STEP not in ledger.names()
    last_timer = player.timers()[-1]
    assert last_timer.cancelled
    # the event came 1 ms before the deadline; verify_result and settle_instance follow it
    assert player.events_raised[-1][0] == last_timer.fire_at - timedelta(milliseconds=1)
    timer_json = [a for a in final.actions if a["actionType"] == CREATE_TIMER][-1]
    assert timer_json["isCanceled"] is True


def test_custom_status_names_workflow_step_attempt_and_phase():
    ledger, scenario = tenant_world(result_create_storage_1=None)
    player = workflow_player(scenario)
    player.play(stop_after=3)  # creating steps, dispatching, waiting

    waiting = player.episodes[2].custom_status
    dispatch = ledger.called(c.ACTIVITY_DISPATCH_STEP)[0]
    assert waiting == {
        "orchestration": "workflow",
        "workflow": "provision-tenant",
        "step": "create_storage",
        "attempt": 1,
        "phase": "waiting",
        "until": dispatch["deadline"],
        "completed_steps": 0,
        "total_steps": 3,
        "generation": 0,
    }
    assert player.episodes[0].custom_status["phase"] == "creating_steps"
    assert player.episodes[1].custom_status["phase"] == "dispatching"


def test_replaying_the_same_history_gives_identical_actions():
    ledger, scenario = tenant_world(
        result_create_storage_1=None,  # timeout, retry
        result_register_dns_1=Reply.fail("dns busy"),  # failure event, retry
        result_register_dns_2=Reply.succeed({"fqdn": "tenant1.example.net"}, after=200),
    )
    ledger.check("register_dns", 2, {"state": "extended", "deadline": (T0 + timedelta(hours=1)).isoformat()})
    player = workflow_player(scenario)
    final = player.play()
    assert final.is_done

    for context in player.contexts:
        first = run_orchestrator(WORKFLOW, context)
        second = run_orchestrator(WORKFLOW, context)
        assert first.raw == second.raw


def test_late_timer_of_a_cancelled_race_does_not_disturb_the_next_step():
    # create_storage answers after 200 s of its 300; register_dns then times out after 120 s, so the
    # cancelled create_storage timer fires (the host still delivers it) during register_dns's wait.
    ledger, scenario = tenant_world(
        result_create_storage_1=Reply.succeed({"account": "sttenant1"}, after=200), result_register_dns_1=None
    )
    player = workflow_player(scenario)

    final = player.play()

    assert final.is_done and final.output["status"] == "succeeded"
    cancelled = player.timers()[0]
    assert cancelled.cancelled and cancelled.completed
    history = json.loads(player.contexts[-1])["history"]
    assert any(e["EventType"] == TIMER_FIRED and e["TimerId"] == cancelled.task_id for e in history)
    assert [
        d["attempt"] for d in ledger.called(c.ACTIVITY_DISPATCH_STEP) if d["step_id"] == "register_dns"
    ] == [1, 2]


def test_an_input_without_its_pinned_definition_fails_the_orchestration_before_anything_runs():
    """Every start and resume carries its definition: an input without it is malformed, not a
    request to run on whatever YAML is deployed now."""
    ledger, scenario = tenant_world()
    unpinned = {"workflow": "provision-tenant", "input": start_input()["input"]}
    player = workflow_player(scenario, unpinned)

    final = player.play()

    assert not final.is_done
    assert "version" in final.error and "definition" in final.error and "Field required" in final.error
    assert final.actions == []
    assert ledger.calls == []


def test_invalid_input_fails_the_orchestration_before_any_step_is_created():
    ledger, scenario = tenant_world()
    player = workflow_player(scenario, start_input(data={"tenant_id": 7}))

    final = player.play()

    assert "invalid input for workflow 'provision-tenant'" in final.error
    assert "missing required field 'admin_email'" in final.error
    assert "field 'tenant_id' must be a string, got integer" in final.error
    assert ledger.calls == []


def test_malformed_start_request_fails_clearly():
    _, scenario = tenant_world()
    player = workflow_player(scenario, {"input": {}})

    final = player.play()

    assert "workflow" in final.error and "Field required" in final.error


@SCHEMAS
def test_result_raised_before_the_dispatch_activity_returns_is_still_received(schema):
    """A fast agent can answer before dispatch_step has returned (it sends, then records the send).
    The event is then in the history before the wait exists; the SDK must still deliver it."""
    ledger, scenario = tenant_world(result_create_storage_1=None)
    player = workflow_player(scenario, schema=schema)
    player.play(stop_after=2)  # create steps; dispatch create_storage (running, completes in 1 s)
    assert player.activity_names()[-1] == c.ACTIVITY_DISPATCH_STEP
    payload = player.result_message("work", "create_storage", 1, Reply.succeed({"account": "sttenant1"}))
    player.raise_event_later(0.5, "result:create_storage:1", payload)
    ledger.verdict("create_storage", 1, {"state": "succeeded", "output": {"account": "sttenant1"}})

    with pytest.warns(UserWarning, match="Potential duplicate Task completion"):  # the SDK defers it
        final = player.play()

    assert final.is_done and final.output["status"] == "succeeded"
    assert c.ACTIVITY_CHECK_STEP not in ledger.names()
    first_timer = player.timers()[0]
    assert first_timer.cancelled
    register = player.activities(c.ACTIVITY_DISPATCH_STEP)[1]
    assert register.input["step_id"] == "register_dns"
    # the event was taken in the episode the dispatch returned; verify_result's answer came next
    verify = player.activities(c.ACTIVITY_VERIFY_RESULT)[0]
    assert verify.episode == first_timer.episode
    assert register.episode == first_timer.episode + 1
