"""continue_as_new every ``history_checkpoint_every`` completed steps, carrying the instance's state."""

from __future__ import annotations

import pytest

from tests.durable_history import CONTINUE_AS_NEW, play_generations
from tests.orchestrators.world import T0, WORKFLOW, LedgerStub, pinned
from workflow_core import contracts as c
from workflow_core.workflows import parse_workflow

CHAIN = parse_workflow(
    """
name: chain
input:
  required: [seed]
  properties: {seed: {type: integer}}
history_checkpoint_every: 2
steps:
"""
    + "".join(
        f"""
  - id: s{n}
    agent: test.echo
    deadline_seconds: 60
    input: {{value: {"$input.seed" if n == 1 else f"$steps.s{n - 1}.output.value"}}}
    compensation: {{agent: test.undo, deadline_seconds: 30}}
"""
        for n in range(1, 6)
    ),
    source="chain.yaml",
)
OUTPUTS = {f"s{n}": {"value": n * 10} for n in range(1, 6)}


@pytest.fixture
def chain():
    ledger = LedgerStub(CHAIN, OUTPUTS)
    return ledger, ledger.scenario()


def test_continues_as_new_every_n_completed_steps_carrying_position_outputs_and_order(chain):
    ledger, scenario = chain
    players = play_generations(WORKFLOW, pinned(CHAIN, {"seed": 7}), scenario, start=T0)

    assert len(players) == 3  # s1 s2 | s3 s4 | s5
    first = players[0]
    last_action = first.episodes[-1].numbered_actions[-1]
    assert last_action["actionType"] == CONTINUE_AS_NEW
    carried = first.continued_as_new().input
    assert carried == {
        **pinned(CHAIN, {"seed": 7}),  # the pinned definition travels on
        "epoch": 0,
        "state": {
            "position": 2,
            "completed": ["s1", "s2"],
            "outputs": {"s1": {"value": 10}, "s2": {"value": 20}},
            "generation": 1,
        },
    }
    # no timer is left running in a generation that ends
    assert all(t.cancelled for p in players for t in p.timers())
    # steps are created once, for the whole instance
    assert ledger.names().count(c.ACTIVITY_CREATE_STEPS) == 1
    assert players[1].activity_names()[0] == c.ACTIVITY_DISPATCH_STEP
    # outputs carried across generations feed later inputs
    s3 = next(d for d in ledger.called(c.ACTIVITY_DISPATCH_STEP) if d["step_id"] == "s3")
    assert s3["input"] == {"value": 20}
    assert players[1].continued_as_new().input["state"]["completed"] == ["s1", "s2", "s3", "s4"]
    final = players[-1].episodes[-1]
    assert final.output == {"status": "succeeded", "outputs": OUTPUTS, "failed_step": None, "error": None}
    assert final.custom_status["generation"] == 2
    assert [d["step_id"] for d in ledger.called(c.ACTIVITY_DISPATCH_STEP)] == ["s1", "s2", "s3", "s4", "s5"]
    assert all(len(p.episodes) <= 2 + 3 * 2 for p in players)  # each generation's history stays small


def test_generation_after_checkpoint_still_compensates_steps_of_earlier_generations(chain):
    ledger, scenario = chain
    scenario.replies.update({f"result:s4:{n}": None for n in (1, 2, 3)})
    players = play_generations(WORKFLOW, pinned(CHAIN, {"seed": 7}), scenario, start=T0)

    final = players[-1].episodes[-1]
    assert len(players) == 2
    assert final.output["status"] == "compensated"
    assert final.output["failed_step"] == "s4"
    assert final.output["outputs"] == {f"s{n}": OUTPUTS[f"s{n}"] for n in (1, 2, 3)}
    assert ledger.plans == [["s4", "s3", "s2", "s1"]]


def test_checkpoint_that_does_not_match_the_definition_fails_loudly(chain):
    ledger, scenario = chain
    state = {"position": 2, "completed": ["s2", "s1"], "outputs": {}, "generation": 1}
    players = play_generations(WORKFLOW, pinned(CHAIN, {"seed": 7}, state=state), scenario)
    final = players[-1].episodes[-1]
    assert "checkpoint of workflow 'chain' does not match its definition" in final.error
    assert ledger.calls == []
