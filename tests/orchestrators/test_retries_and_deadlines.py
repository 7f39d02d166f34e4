"""The deadline race, heartbeat extensions, retries with backoff timers, and giving up."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.durable_history import (
    CALL_SUB_ORCHESTRATOR,
    CREATE_TIMER,
    SCHEMA_V1,
    SCHEMA_V3,
    WAIT_FOR_EXTERNAL_EVENT,
    Reply,
    parse_time,
)
from tests.orchestrators.world import T0, tenant_world, workflow_player
from workflow_core import contracts as c
from workflow_core.workflows import get_workflow

SCHEMAS = pytest.mark.parametrize("schema", [SCHEMA_V3, SCHEMA_V1], ids=["replay-v3", "replay-v1"])
STORAGE = get_workflow("provision-tenant").step("create_storage")
SEED = "inst-1:create_storage:work"


def _dispatches(ledger, step_id):
    return [d for d in ledger.called(c.ACTIVITY_DISPATCH_STEP) if d["step_id"] == step_id]


def test_timeout_checks_the_ledger_then_retries_after_an_exponential_backoff_timer():
    ledger, scenario = tenant_world(result_create_storage_1=None, result_create_storage_2=None)
    player = workflow_player(scenario)

    final = player.play()

    assert final.is_done and final.output["status"] == "succeeded"
    assert ledger.names()[:10] == [
        c.ACTIVITY_CREATE_STEPS,
        c.ACTIVITY_DISPATCH_STEP,  # attempt 1
        c.ACTIVITY_CHECK_STEP,  # deadline passed: ask the ledger -> timed_out
        c.ACTIVITY_SCHEDULE_RETRY,
        c.ACTIVITY_DISPATCH_STEP,  # attempt 2
        c.ACTIVITY_CHECK_STEP,
        c.ACTIVITY_SCHEDULE_RETRY,
        c.ACTIVITY_DISPATCH_STEP,  # attempt 3 (answered)
        c.ACTIVITY_VERIFY_RESULT,  # the answer is read from the ledger
        c.ACTIVITY_DISPATCH_STEP,  # register_dns
    ]
    assert ledger.called(c.ACTIVITY_CHECK_STEP)[0] == {
        "instance_id": "inst-1",
        "step_id": "create_storage",
        "attempt": 1,
    }
    assert [d["attempt"] for d in _dispatches(ledger, "create_storage")] == [1, 2, 3]
    assert "result:create_storage:2" in player.waits and "result:create_storage:3" in player.waits

    checks = player.activities(c.ACTIVITY_CHECK_STEP)
    retries = player.activities(c.ACTIVITY_SCHEDULE_RETRY)
    delays = []
    for failed_attempt, (check, retry) in enumerate(zip(checks, retries, strict=True), start=1):
        assert retry.input["attempt"] == failed_attempt
        decided_at = check.scheduled_at + timedelta(seconds=1)  # the episode where the check answered
        retry_at = parse_time(retry.input["retry_at"])
        delay = (retry_at - decided_at).total_seconds()
        delays.append(delay)
        base = STORAGE.retry.base_delay_seconds(failed_attempt)
        assert base * (1 - STORAGE.retry.jitter) <= delay <= base
        assert delay == pytest.approx(STORAGE.retry.delay_seconds(failed_attempt, SEED), abs=1e-6)
        # the backoff timer is the first timer after schedule_retry, at exactly retry_at
        backoff = next(t for t in player.timers() if t.episode > retry.episode)
        assert backoff.fire_at == retry_at and not backoff.cancelled
        # the next attempt is dispatched when the backoff timer fires, with a fresh deadline
        redispatch = _dispatches(ledger, "create_storage")[failed_attempt]
        assert parse_time(redispatch["deadline"]) == retry_at + timedelta(seconds=STORAGE.deadline_seconds)
    assert STORAGE.retry.base_delay_seconds(2) == 2 * STORAGE.retry.base_delay_seconds(1)  # 10 s then 20 s
    assert delays[1] > delays[0]


def test_failure_event_retries_without_asking_the_ledger():
    ledger, scenario = tenant_world(result_register_dns_1=Reply.fail("zone locked"))
    player = workflow_player(scenario)

    final = player.play()

    assert final.output["status"] == "succeeded"
    assert c.ACTIVITY_CHECK_STEP not in ledger.names()
    assert [d["attempt"] for d in _dispatches(ledger, "register_dns")] == [1, 2]
    assert ledger.called(c.ACTIVITY_SCHEDULE_RETRY)[0]["step_id"] == "register_dns"
    # the failed attempt's deadline timer lost the race and was cancelled
    dns_timers = [t for t in player.timers() if t.episode >= player.waits["result:register_dns:1"]]
    assert dns_timers[0].cancelled


@SCHEMAS
def test_heartbeat_extension_waits_again_on_the_same_event_with_a_new_timer(schema):
    extended_to = T0 + timedelta(minutes=20)
    ledger, scenario = tenant_world(
        result_create_storage_1=Reply.succeed({"account": "sttenant1"}, after=600)
    )
    ledger.check("create_storage", 1, {"state": "extended", "deadline": extended_to.isoformat()})
    player = workflow_player(scenario, schema=schema)

    final = player.play()

    assert final.is_done and final.output["status"] == "succeeded"
    assert [d["attempt"] for d in _dispatches(ledger, "create_storage")] == [1]  # no retry
    assert len(ledger.called(c.ACTIVITY_CHECK_STEP)) == 1
    first, second = [t for t in player.timers()][:2]
    assert not first.cancelled  # it fired: that is what triggered the check
    assert second.fire_at == extended_to
    assert second.cancelled  # the result then won the second race
    assert player.episodes[-1].output["outputs"]["create_storage"] == {"account": "sttenant1"}
    if schema is SCHEMA_V3:  # V3 lists each wait once; V1 repeats it in every race it is part of
        waits = [a for a in final.actions if a["actionType"] == WAIT_FOR_EXTERNAL_EVENT]
        assert [a["externalEventName"] for a in waits].count("result:create_storage:1") == 1


def test_result_arriving_while_the_ledger_is_checked_is_not_lost():
    # The deadline fires at +301 s, the check answers at +302 s; the result event lands in between.
    ledger, scenario = tenant_world(
        result_create_storage_1=Reply.succeed({"account": "sttenant1"}, after=299.5)
    )
    ledger.check(
        "create_storage", 1, {"state": "extended", "deadline": (T0 + timedelta(hours=2)).isoformat()}
    )
    player = workflow_player(scenario)

    final = player.play()

    assert final.output["status"] == "succeeded"
    assert len(ledger.called(c.ACTIVITY_CHECK_STEP)) == 1
    register = _dispatches(ledger, "register_dns")[0]
    assert parse_time(register["deadline"]) < T0 + timedelta(minutes=10)  # did not wait out the 2 h timer
    assert all(t.cancelled for t in player.timers()[1:])


def test_check_reporting_success_uses_the_ledger_output():
    ledger, scenario = tenant_world(result_create_storage_1=None)
    ledger.check("create_storage", 1, {"state": "succeeded", "output": {"account": "from-ledger"}})
    player = workflow_player(scenario)

    final = player.play()

    assert final.output["outputs"]["create_storage"] == {"account": "from-ledger"}
    assert _dispatches(ledger, "register_dns")[0]["input"]["target"] == "from-ledger"
    assert c.ACTIVITY_SCHEDULE_RETRY not in ledger.names()


def test_check_reporting_failure_retries():
    ledger, scenario = tenant_world(result_create_storage_1=None)
    ledger.check("create_storage", 1, {"state": "failed", "error": "quota exceeded"})
    player = workflow_player(scenario)

    final = player.play()

    assert final.output["status"] == "succeeded"
    assert [d["attempt"] for d in _dispatches(ledger, "create_storage")] == [1, 2]


def test_malformed_result_event_counts_as_a_failed_attempt():
    ledger, scenario = tenant_world()
    scenario.replies["result:create_storage:1"] = Reply("exploded")  # not a valid outcome
    player = workflow_player(scenario)

    final = player.play()

    assert final.output["status"] == "succeeded"
    assert [d["attempt"] for d in _dispatches(ledger, "create_storage")] == [1, 2]


@SCHEMAS
def test_exhausted_retries_give_up_then_start_compensation_with_the_deterministic_id(schema):
    ledger, scenario = tenant_world(
        result_register_dns_1=None,
        result_register_dns_2=Reply.fail("zone locked"),
        result_register_dns_3=None,
    )
    player = workflow_player(scenario, schema=schema)

    final = player.play()

    assert final.is_done and final.error is None
    names = ledger.names()
    give_up_at = names.index(c.ACTIVITY_GIVE_UP_STEP)
    assert names[give_up_at - 1] == c.ACTIVITY_CHECK_STEP  # attempt 3 timed out...
    assert names.count(c.ACTIVITY_SCHEDULE_RETRY) == 2  # ...after two retries; no third
    give_up = ledger.called(c.ACTIVITY_GIVE_UP_STEP)[0]
    assert give_up["instance_id"] == "inst-1" and give_up["step_id"] == "register_dns"
    assert "3 attempt(s)" in give_up["reason"]

    subs = [a for a in final.actions if a["actionType"] == CALL_SUB_ORCHESTRATOR]
    assert len(subs) == 1
    assert subs[0]["functionName"] == c.COMPENSATION_ORCHESTRATOR
    assert subs[0]["instanceId"] == c.compensation_instance_id("inst-1") == "inst-1:compensation"
    sub = player.scheduled[-1]
    assert sub.kind == "sub_orchestration"
    assert sub.input == {"instance_id": "inst-1", "workflow": "provision-tenant", "reason": give_up["reason"]}
    assert sub.episode > player.activities(c.ACTIVITY_GIVE_UP_STEP)[0].episode  # after give_up completed

    assert final.output["status"] == "compensated"
    assert final.output["failed_step"] == "register_dns"
    assert "no result by the deadline" in final.output["error"]
    assert final.output["outputs"] == {"create_storage": {"account": "sttenant1"}}
    assert [s["step_id"] for s in final.output["compensation"]["steps"]] == ["register_dns", "create_storage"]
    assert final.custom_status["phase"] == "compensated"
    assert "send_welcome" not in [d["step_id"] for d in ledger.called(c.ACTIVITY_DISPATCH_STEP)]
    assert all(t.cancelled or t.completed for t in player.timers())


def test_failed_compensation_is_reported_as_compensation_failed():
    _, scenario = tenant_world(
        result_send_welcome_1=None,
        result_send_welcome_2=None,
        result_send_welcome_3=None,
        compensation_create_storage_1=Reply.fail("account locked"),
        compensation_create_storage_2=Reply.fail("account locked"),
        compensation_create_storage_3=Reply.fail("account locked"),
    )
    player = workflow_player(scenario)

    final = player.play()

    assert final.output["status"] == "compensation_failed"
    assert final.output["failed_step"] == "send_welcome"
    assert final.output["compensation"]["steps"] == [
        {"step_id": "register_dns", "outcome": "compensated", "error": None},
        {"step_id": "create_storage", "outcome": "compensation_failed", "error": "account locked"},
    ]


def test_compensation_sub_orchestration_crash_is_reported_not_raised():
    ledger, scenario = tenant_world(result_create_storage_1=None, result_create_storage_2=None)
    # A plan outside the contract fails the compensation orchestration outright (activity failures
    # are retried by the runtime first; the durable test host covers those retries).
    ledger.plan_override = [{"step_id": "create_storage"}]
    scenario.replies["result:create_storage:3"] = None
    player = workflow_player(scenario)

    final = player.play()

    assert final.is_done and final.error is None
    assert final.output["status"] == "compensation_failed"
    assert "compensator" in final.output["compensation"]["error"]


def test_unresolvable_step_input_gives_up_without_dispatching():
    ledger, scenario = tenant_world(result_create_storage_1=Reply.succeed({"acct": "typo"}))
    player = workflow_player(scenario)

    final = player.play()

    assert [d["step_id"] for d in ledger.called(c.ACTIVITY_DISPATCH_STEP)] == ["create_storage"]
    give_up = ledger.called(c.ACTIVITY_GIVE_UP_STEP)[0]
    assert give_up["step_id"] == "register_dns"
    assert "$steps.create_storage.output.account" in give_up["reason"]
    assert final.output["status"] == "compensated" and final.output["failed_step"] == "register_dns"
    assert "result:register_dns:1" not in player.waits


def test_timer_actions_are_plain_create_timer_actions():
    _, scenario = tenant_world()
    player = workflow_player(scenario)
    final = player.play()
    timers = [a for a in final.actions if a["actionType"] == CREATE_TIMER]
    assert {tuple(sorted(a)) for a in timers} == {("actionType", "fireAt", "isCanceled")}


def test_dispatch_that_finds_the_step_settled_asks_the_ledger_instead_of_waiting():
    ledger, scenario = tenant_world(result_create_storage_1=None)
    ledger.dispatch_outcomes[("work", "create_storage", 1)] = "settled"
    ledger.check("create_storage", 1, {"state": "succeeded", "output": {"account": "done-before"}})
    player = workflow_player(scenario)

    final = player.play()

    assert final.output["outputs"]["create_storage"] == {"account": "done-before"}
    assert ledger.names()[:3] == [c.ACTIVITY_CREATE_STEPS, c.ACTIVITY_DISPATCH_STEP, c.ACTIVITY_CHECK_STEP]
    assert "result:create_storage:1" not in player.waits  # no race at all for a settled step
    assert len(player.timers()) == 3 - 1


def test_dispatch_of_an_attempt_already_under_way_waits_until_the_ledgers_deadline():
    ledger_deadline = T0 + timedelta(minutes=3)
    ledger, scenario = tenant_world(result_create_storage_1=Reply.succeed({"account": "sttenant1"}, after=60))
    ledger.dispatch_outcomes[("work", "create_storage", 1)] = "already-dispatched"
    ledger.check("create_storage", 1, {"state": "extended", "deadline": ledger_deadline.isoformat()})
    player = workflow_player(scenario)

    final = player.play()

    assert final.output["status"] == "succeeded"
    assert player.timers()[0].fire_at == ledger_deadline and player.timers()[0].cancelled
    assert len(ledger.called(c.ACTIVITY_CHECK_STEP)) == 1
