"""Replay tests of the compensation orchestrator, run directly and as the scheduler's sub-orchestration."""

from __future__ import annotations

from datetime import timedelta

from tests.durable_history import OrchestrationPlayer, Reply, parse_time
from tests.orchestrators.world import COMPENSATION, T0, tenant_world, workflow_player
from workflow_core import contracts as c

START = {"instance_id": "inst-1", "workflow": "provision-tenant", "reason": "step 'x' gave up"}


def _entry(step_id, deadline=60, retry=None):
    return {
        "step_id": step_id,
        "compensator": f"undo.{step_id}",
        "input": {"name": step_id},
        "output": {"made": step_id},
        "deadline_seconds": deadline,
        "retry": retry
        or {
            "max_attempts": 2,
            "initial_interval_seconds": 4,
            "backoff_coefficient": 2,
            "max_interval_seconds": 30,
            "jitter": 0,
        },
    }


def _compensation_player(scenario, **kwargs):
    return OrchestrationPlayer(
        COMPENSATION,
        START,
        scenario,
        instance_id="inst-1:compensation",
        start=T0,
        name=c.COMPENSATION_ORCHESTRATOR,
        **kwargs,
    )


def test_compensates_in_exactly_the_order_the_plan_gives():
    ledger, scenario = tenant_world()
    ledger.plan_override = [_entry("b"), _entry("a"), _entry("c")]  # deliberately neither forward nor sorted
    player = _compensation_player(scenario)

    final = player.play()

    assert final.is_done and final.error is None
    assert ledger.called(c.ACTIVITY_PLAN_COMPENSATION) == [{"instance_id": "inst-1"}]
    dispatches = ledger.called(c.ACTIVITY_DISPATCH_COMPENSATION)
    assert [d["step_id"] for d in dispatches] == ["b", "a", "c"]
    assert list(player.waits) == [
        "compensation-result:b:1",
        "compensation-result:a:1",
        "compensation-result:c:1",
    ]
    first = dispatches[0]
    assert first["kind"] == "compensate" and first["attempt"] == 1
    assert first["instance_id"] == "inst-1"  # the workflow's ledger partition...
    assert first["orchestration_id"] == "inst-1:compensation"  # ...but results come back here
    assert first["input"] == {"input": {"name": "b"}, "output": {"made": "b"}}
    assert parse_time(first["deadline"]) == player.activities(c.ACTIVITY_DISPATCH_COMPENSATION)[
        0
    ].scheduled_at + timedelta(seconds=60)
    assert final.output == {
        "status": "compensated",
        "steps": [
            {"step_id": "b", "outcome": "compensated", "error": None},
            {"step_id": "a", "outcome": "compensated", "error": None},
            {"step_id": "c", "outcome": "compensated", "error": None},
        ],
    }
    assert all(t.cancelled for t in player.timers())
    assert c.ACTIVITY_FINISH_COMPENSATION not in ledger.names()


def test_workflow_compensation_undoes_completed_steps_in_reverse_completion_order():
    """End to end with a plan that follows the contract: the steps that completed (create_storage,
    then register_dns) are undone newest first; send_welcome, which gave up, has no compensator."""
    ledger, scenario = tenant_world(
        result_send_welcome_1=None, result_send_welcome_2=None, result_send_welcome_3=None
    )
    player = workflow_player(scenario)

    final = player.play()

    completion_order = [d["step_id"] for d in ledger.called(c.ACTIVITY_DISPATCH_STEP) if d["attempt"] == 1][
        :2
    ]
    assert completion_order == ["create_storage", "register_dns"]
    assert ledger.plans == [["register_dns", "create_storage"]]
    undo_order = [d["step_id"] for d in ledger.called(c.ACTIVITY_DISPATCH_COMPENSATION)]
    assert undo_order == list(reversed(completion_order))
    assert final.output["status"] == "compensated"


def test_a_compensator_that_keeps_failing_is_finished_and_the_rest_still_compensated():
    ledger, scenario = tenant_world(
        compensation_b_1=Reply.fail("locked"),
        compensation_b_2=None,  # silent: the deadline and the ledger check decide
    )
    ledger.plan_override = [_entry("b"), _entry("a")]
    player = _compensation_player(scenario)

    final = player.play()

    names = ledger.names()
    assert names == [
        c.ACTIVITY_PLAN_COMPENSATION,
        c.ACTIVITY_DISPATCH_COMPENSATION,  # b attempt 1: failure event
        c.ACTIVITY_VERIFY_RESULT,  # ...confirmed by the ledger
        c.ACTIVITY_SCHEDULE_RETRY,  # the backoff is recorded, so the watchdog leaves it alone
        c.ACTIVITY_DISPATCH_COMPENSATION,  # b attempt 2 after backoff
        c.ACTIVITY_CHECK_COMPENSATION,  # b attempt 2 deadline passed
        c.ACTIVITY_FINISH_COMPENSATION,  # b exhausted
        c.ACTIVITY_DISPATCH_COMPENSATION,  # a
        c.ACTIVITY_VERIFY_RESULT,
        c.ACTIVITY_SETTLE_INSTANCE,  # the instance record says how it ended
    ]
    assert ledger.called(c.ACTIVITY_CHECK_COMPENSATION) == [
        {"instance_id": "inst-1", "step_id": "b", "attempt": 2}
    ]
    (retry,) = ledger.called(c.ACTIVITY_SCHEDULE_RETRY)
    assert (retry["kind"], retry["step_id"], retry["attempt"]) == ("compensate", "b", 1)
    finish = ledger.called(c.ACTIVITY_FINISH_COMPENSATION)[0]
    assert finish["instance_id"] == "inst-1" and finish["step_id"] == "b"
    assert "no result by the deadline" in finish["error"]
    # the backoff between b's attempts is a durable timer of exactly the policy's delay (jitter 0)
    b1, b2 = [s for s in player.activities(c.ACTIVITY_DISPATCH_COMPENSATION) if s.input["step_id"] == "b"]
    backoff = [t for t in player.timers() if b1.episode < t.episode < b2.episode][-1]
    assert not backoff.cancelled
    assert backoff.fire_at == b2.scheduled_at
    assert (b2.scheduled_at - b1.scheduled_at) > timedelta(seconds=4)
    assert final.output == {
        "status": "compensation_failed",
        "steps": [
            {"step_id": "b", "outcome": "compensation_failed", "error": finish["error"]},
            {"step_id": "a", "outcome": "compensated", "error": None},
        ],
    }
    assert final.custom_status["phase"] == "compensation_failed"


def test_compensation_heartbeat_extension_and_ledger_confirmed_success():
    ledger, scenario = tenant_world(compensation_a_1=None)
    ledger.plan_override = [_entry("a")]
    ledger.check(
        "a", 1, {"state": "extended", "deadline": (T0 + timedelta(minutes=30)).isoformat()}, kind="compensate"
    )
    ledger.check("a", 1, {"state": "succeeded", "output": {}}, kind="compensate")
    player = _compensation_player(scenario)

    final = player.play()

    assert final.output == {
        "status": "compensated",
        "steps": [{"step_id": "a", "outcome": "compensated", "error": None}],
    }
    assert [t.fire_at for t in player.timers()][1] == T0 + timedelta(minutes=30)
    assert len(ledger.called(c.ACTIVITY_DISPATCH_COMPENSATION)) == 1


def test_empty_plan_is_compensated_at_once():
    ledger, scenario = tenant_world()
    ledger.plan_override = []
    final = _compensation_player(scenario).play()
    assert final.output == {"status": "compensated", "steps": []}
    assert ledger.names() == [c.ACTIVITY_PLAN_COMPENSATION, c.ACTIVITY_SETTLE_INSTANCE]


def test_custom_status_of_compensation():
    ledger, scenario = tenant_world(compensation_a_1=None)
    ledger.plan_override = [_entry("a")]
    player = _compensation_player(scenario)
    player.play(stop_after=3)
    assert player.episodes[2].custom_status == {
        "orchestration": "compensation",
        "workflow": "provision-tenant",
        "instance_id": "inst-1",
        "step": "a",
        "attempt": 1,
        "phase": "waiting",
        "until": ledger.called(c.ACTIVITY_DISPATCH_COMPENSATION)[0]["deadline"],
        "compensated_steps": 0,
        "total_steps": 1,
    }


def test_a_deadline_longer_than_a_durable_timer_is_waited_out_in_chunks():
    ledger, scenario = tenant_world(compensation_slow_1=None)
    ledger.plan_override = [_entry("slow", deadline=7 * 24 * 3600)]
    player = _compensation_player(scenario)

    final = player.play()

    dispatched = player.activities(c.ACTIVITY_DISPATCH_COMPENSATION)[0].scheduled_at
    deadline = dispatched + timedelta(days=7)
    fire_times = [t.fire_at for t in player.timers()][:3]
    start = dispatched + timedelta(seconds=1)  # the wait starts when the dispatch returns
    assert fire_times == [start + timedelta(days=3), start + timedelta(days=6), deadline]
    assert len(ledger.called(c.ACTIVITY_CHECK_COMPENSATION)) == 1  # only at the real deadline
    assert [d["attempt"] for d in ledger.called(c.ACTIVITY_DISPATCH_COMPENSATION)] == [1, 2]
    assert final.output["status"] == "compensated"


def test_rerun_after_an_operator_retry_continues_from_the_ledgers_attempt():
    """The supervisor restarts compensation after an operator's retry; the ledger is at compensation
    attempt 3 (failed). Attempts 1 and 2 are stale, 3 is checked at once, 4 does the work."""
    ledger, scenario = tenant_world(compensation_a_4=Reply.succeed({"undone": "a"}))
    ledger.plan_override = [
        _entry("a", retry={"max_attempts": 2, "initial_interval_seconds": 4, "jitter": 0})
    ]
    ledger.dispatch_outcomes.update(
        {
            ("compensate", "a", 1): "stale",
            ("compensate", "a", 2): "stale",
            ("compensate", "a", 3): "already-dispatched",
        }
    )
    ledger.check("a", 3, {"state": "failed", "error": "dns api down"}, kind="compensate")
    player = _compensation_player(scenario)

    final = player.play()

    assert final.output == {
        "status": "compensated",
        "steps": [{"step_id": "a", "outcome": "compensated", "error": None}],
    }
    assert [d["attempt"] for d in ledger.called(c.ACTIVITY_DISPATCH_COMPENSATION)] == [1, 2, 3, 4]
    assert ledger.called(c.ACTIVITY_CHECK_COMPENSATION) == [
        {"instance_id": "inst-1", "step_id": "a", "attempt": 3}
    ]
    assert list(player.waits) == ["compensation-result:a:4"]
    # the one backoff is the policy's first interval: stale attempts did not spend the budget
    backoff = player.timers()[0]
    check = player.activities(c.ACTIVITY_CHECK_COMPENSATION)[0]
    assert backoff.fire_at == check.scheduled_at + timedelta(seconds=1) + timedelta(seconds=4)
