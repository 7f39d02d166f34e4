"""The replay harness itself: if it accepted what the host rejects, every other test would lie."""

from __future__ import annotations

import warnings
from datetime import UTC, datetime, timedelta

import azure.durable_functions as df
import pytest

from tests.durable_history import (
    HistoryBuilder,
    NonDeterminism,
    OrchestrationPlayer,
    Scenario,
    run_orchestrator,
)

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def _timer_then_activity(context):
    yield context.create_timer(context.current_utc_datetime + timedelta(seconds=30))
    result = yield context.call_activity("hello", "world")
    return result


HANDLER = df.Orchestrator.create(_timer_then_activity)


def test_timer_fires_only_with_the_timers_sequence_id():
    history = HistoryBuilder().orchestrator_started(T0).execution_started("o", None)
    fire_at = "2030-01-01T00:00:30.000000Z"
    history.timer_created(0, fire_at).orchestrator_completed()

    history.orchestrator_started(T0 + timedelta(seconds=30)).timer_fired(5, fire_at)  # wrong id
    with pytest.warns(UserWarning, match="Potential duplicate Task completion"):
        stuck = run_orchestrator(HANDLER, history.context_json("i", None))
    assert [a["actionType"] for a in stuck.actions] == [5]

    history.orchestrator_completed().orchestrator_started(T0 + timedelta(seconds=31)).timer_fired(0, fire_at)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the stray completion for id 5 is still in the history
        moved = run_orchestrator(HANDLER, history.context_json("i", None))
    assert [a["actionType"] for a in moved.actions] == [5, 0]


def test_player_completes_activities_and_timers_in_time_order():
    scenario = Scenario(activities={"hello": lambda data, player: f"hello {data}"})
    player = OrchestrationPlayer(HANDLER, None, scenario, start=T0)

    final = player.play()

    assert final.is_done and final.output == "hello world"
    assert player.now == T0 + timedelta(seconds=31)
    assert player.timers()[0].fire_at == T0 + timedelta(seconds=30)


def test_orchestrator_exception_is_reported_as_an_error_episode():
    def broken(context):
        yield context.call_activity("hello", None)
        raise ValueError("boom")

    scenario = Scenario(activities={"hello": lambda data, player: None})
    final = OrchestrationPlayer(df.Orchestrator.create(broken), None, scenario).play()
    assert final.error == "boom" and not final.is_done


def test_player_detects_a_non_deterministic_orchestrator():
    def uses_wall_clock(context):
        yield context.create_timer(datetime.now(UTC) + timedelta(seconds=5))  # wrong on purpose
        yield context.call_activity("hello", None)

    scenario = Scenario(activities={"hello": lambda data, player: None})
    player = OrchestrationPlayer(df.Orchestrator.create(uses_wall_clock), None, scenario, start=T0)
    with pytest.raises(NonDeterminism):
        player.play()
