"""The scheduler stays correct when the backend hands it several events in one episode.

The Azure Storage backend delivers every message queued for an instance in one batch, in whatever
order they were dequeued (issue 11, point 8): a step's result and its deadline's TimerFired together,
in either order; a late result of attempt N beside attempt N+1's. The real workflow orchestrator is
replayed through ``OrchestrationPlayer`` with batching on, over many seeds.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.durable_history import EVENT_RAISED, ORCHESTRATOR_STARTED, TIMER_FIRED, Reply
from tests.orchestrators.world import TENANT_OUTPUTS, tenant_world, workflow_player
from workflow_core import contracts as c
from workflow_core.workflows import get_workflow

TENANT = get_workflow("provision-tenant")
STEPS = [s.id for s in TENANT.steps]


def _batches(player) -> list[list[tuple[int, str | None]]]:
    """Per episode, the (event type, event name) of what it brought in."""
    batches: list[list[tuple[int, str | None]]] = []
    for event in player.history.events:
        if event["EventType"] == ORCHESTRATOR_STARTED:
            batches.append([])
        elif event["EventType"] in (EVENT_RAISED, TIMER_FIRED):
            batches[-1].append((event["EventType"], event.get("Name")))
    return batches


def _result_at_the_deadline(step_id: str, outcome: str = "succeeded"):
    """A world where attempt 1's result lands exactly when its deadline timer fires (the wait starts
    one activity-second after the dispatch that set the deadline)."""
    after = TENANT.step(step_id).deadline_seconds - 1
    reply = (
        Reply.succeed(TENANT_OUTPUTS[step_id], after=after)
        if outcome == "succeeded"
        else Reply.fail("agent failed", after=after)
    )
    ledger, scenario = tenant_world(**{f"result_{step_id}_1": reply})
    # The agent records its outcome in the ledger before it replies, so a check at the deadline
    # finds what the result event says.
    answer = (
        {"state": "succeeded", "output": TENANT_OUTPUTS[step_id]}
        if outcome == "succeeded"
        else {"state": "failed", "error": "agent failed"}
    )
    ledger.check(step_id, 1, answer)
    return ledger, scenario


@pytest.mark.parametrize("first", ["result", "deadline"])
@pytest.mark.parametrize("step_id", STEPS)
def test_result_and_deadline_in_one_batch_either_order_the_step_succeeds_once(step_id, first):
    ledger, scenario = _result_at_the_deadline(step_id)
    result_first = first == "result"

    def order(batch):
        return sorted(batch, key=lambda h: (h.kind != "event") if result_first else (h.kind == "event"))

    player = workflow_player(scenario, batch_window=0.0, order=order)
    final = player.play()

    assert final.is_done and final.output["status"] == "succeeded"
    assert final.output["outputs"] == TENANT_OUTPUTS
    name = f"result:{step_id}:1"
    together = [b for b in _batches(player) if (EVENT_RAISED, name) in b and len(b) > 1]
    assert together, "the result and the deadline never shared an episode"
    assert (together[0][0] == (EVENT_RAISED, name)) is result_first
    dispatched = [d["attempt"] for d in ledger.called(c.ACTIVITY_DISPATCH_STEP) if d["step_id"] == step_id]
    assert dispatched == [1]
    checks = [d for d in ledger.called(c.ACTIVITY_CHECK_STEP) if d["step_id"] == step_id]
    assert len(checks) == (0 if result_first else 1)  # the deadline won: the ledger is asked


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    step_id=st.sampled_from(STEPS),
    outcome=st.sampled_from(["succeeded", "failed"]),
    window=st.sampled_from([0.0, 0.5, 1.0, 3.0]),
)
def test_any_batching_and_order_around_a_deadline_keeps_the_workflow_correct(seed, step_id, outcome, window):
    """Batches of any width (activity results, results, timers, cancelled timers together), in a
    random order per batch: the workflow ends as the agents answered, each attempt dispatched once."""
    ledger, scenario = _result_at_the_deadline(step_id, outcome)
    rng = random.Random(seed)
    player = workflow_player(scenario, batch_window=window, order=lambda b: rng.sample(b, len(b)))

    final = player.play()

    assert final.is_done and final.output["status"] == "succeeded"
    assert final.output["outputs"] == TENANT_OUTPUTS
    dispatched = [d["attempt"] for d in ledger.called(c.ACTIVITY_DISPATCH_STEP) if d["step_id"] == step_id]
    assert dispatched == ([1] if outcome == "succeeded" else [1, 2])


def _play_until_waiting(player, name: str) -> None:
    while name not in player.waits:
        episode = player.play(stop_after=len(player.episodes) + 1)
        assert not (episode.is_done or episode.error), f"finished before waiting for {name}"


@settings(max_examples=30, deadline=None)
@given(late_first=st.booleans(), late_outcome=st.sampled_from(["succeeded", "failed"]))
def test_a_late_result_of_attempt_1_beside_attempt_2s_in_one_batch_is_ignored(late_first, late_outcome):
    ledger, scenario = tenant_world(
        result_register_dns_1=None, result_register_dns_2=Reply.succeed({"fqdn": "second"}, after=5)
    )
    player = workflow_player(scenario, batch_window=0.0)
    _play_until_waiting(player, "result:register_dns:2")
    late = Reply.succeed({"fqdn": "first"}) if late_outcome == "succeeded" else Reply.fail("late failure")
    player.raise_event_later(
        5, "result:register_dns:1", player.result_message("work", "register_dns", 1, late)
    )
    player.order = lambda batch: sorted(
        batch, key=lambda h: (h.event_name != "result:register_dns:1") == late_first
    )

    final = player.play()

    assert final.is_done and final.output["status"] == "succeeded"
    assert final.output["outputs"]["register_dns"] == {"fqdn": "second"}
    names = [n for b in _batches(player) for _, n in b if n and n.startswith("result:register_dns")]
    assert names[-2:] == (
        ["result:register_dns:1", "result:register_dns:2"]
        if late_first
        else ["result:register_dns:2", "result:register_dns:1"]
    )
    assert [
        d["attempt"] for d in ledger.called(c.ACTIVITY_DISPATCH_STEP) if d["step_id"] == "register_dns"
    ] == [
        1,
        2,
    ]
