"""Replay tests of a parallel step group: onboard-tenant's two DNS steps, each in a step_orchestrator.

The simulated host runs each child to completion when the parent's history receives it, one after
the other; what matters here is what the parent schedules, waits for and records.
"""

from __future__ import annotations

import json

import pytest

from tests.durable_history import (
    CALL_SUB_ORCHESTRATOR,
    SCHEMA_V1,
    SCHEMA_V3,
    WHEN_ALL,
    Reply,
    play_generations,
    run_orchestrator,
)
from tests.orchestrators.world import T0, WORKFLOW, LedgerStub, pinned, workflow_player
from workflow_core import contracts as c
from workflow_core.workflows import get_workflow, parse_workflow

GROUP = ["register_portal_dns", "register_files_dns"]
OUTPUTS = {
    "create_storage": {"account": "sttenant1", "endpoint": "https://sttenant1.blob.core.windows.net"},
    "register_portal_dns": {"fqdn": "tenant1.example.net"},
    "register_files_dns": {"fqdn": "tenant1.files.example.net"},
    "send_welcome": {"message_id": "m-1"},
}
START = pinned("onboard-tenant", {"tenant_id": "tenant1", "admin_email": "a@tenant1.example"})


def onboard_world(replies: dict[str, Reply | None] | None = None):
    ledger = LedgerStub(get_workflow("onboard-tenant"), OUTPUTS)
    return ledger, ledger.scenario(replies)


def _walk(actions):
    for item in actions:
        if isinstance(item, list):
            yield from _walk(item)
        else:
            yield item


def group_episode(player):
    """The parent episode that started the group's children."""
    return next(
        index
        for index, episode in enumerate(player.episodes)
        if any(a["actionType"] == CALL_SUB_ORCHESTRATOR for a in episode.actions)
    )


@pytest.mark.parametrize("schema", [SCHEMA_V3, SCHEMA_V1], ids=["replay-v3", "replay-v1"])
def test_group_starts_one_step_orchestrator_per_step_in_one_episode_and_records_outputs(schema):
    ledger, scenario = onboard_world()
    player = workflow_player(scenario, START, schema=schema)

    final = player.play()

    assert final.error is None and final.is_done
    assert final.output == {"status": "succeeded", "outputs": OUTPUTS, "failed_step": None, "error": None}
    episode = player.episodes[group_episode(player)]
    subs = [a for a in episode.actions if a["actionType"] == CALL_SUB_ORCHESTRATOR]
    assert [(a["functionName"], a["instanceId"]) for a in subs] == [
        (c.STEP_ORCHESTRATOR, "inst-1:step:register_portal_dns"),
        (c.STEP_ORCHESTRATOR, "inst-1:step:register_files_dns"),
    ]
    definition = get_workflow("onboard-tenant")
    portal, files = (json.loads(a["input"]) for a in subs)
    assert portal == {
        "kind": "work",
        "instance_id": "inst-1",
        "workflow": "onboard-tenant",
        "step_id": "register_portal_dns",
        "deadline_seconds": definition.step("register_portal_dns").deadline_seconds,
        "retry": definition.step("register_portal_dns").retry.model_dump(),
        "input": {"hostname": "tenant1", "zone": "example.net", "target": "portal.example.net"},
    }
    # the sibling's input is resolved from the step before the group
    assert files["input"]["target"] == "https://sttenant1.blob.core.windows.net"
    if schema is SCHEMA_V3:  # both children are awaited together, in one WhenAll
        (when_all,) = [
            a
            for a in _walk(episode.raw_actions)
            if a.get("actionType") == WHEN_ALL and any("instanceId" in x for x in a["compoundActions"])
        ]
        assert [a["instanceId"] for a in when_all["compoundActions"]] == [s["instanceId"] for s in subs]
    # each child dispatched its step under its own orchestration id, so results go to it
    dispatches = {d["step_id"]: d for d in ledger.called(c.ACTIVITY_DISPATCH_STEP)}
    assert list(dispatches) == ["create_storage", *GROUP, "send_welcome"]
    assert dispatches["create_storage"]["orchestration_id"] == "inst-1"
    for step_id in GROUP:
        assert dispatches[step_id]["orchestration_id"] == f"inst-1:step:{step_id}"
        assert dispatches[step_id]["instance_id"] == "inst-1"
    children = [p for p in scenario.players if p.name == c.STEP_ORCHESTRATOR]
    assert [p.instance_id for p in children] == [f"inst-1:step:{s}" for s in GROUP]
    assert [p.episodes[-1].output for p in children] == [
        {"succeeded": True, "attempts": 1, "output": OUTPUTS[s], "error": None} for s in GROUP
    ]
    # the step after the group starts only once the whole group is done, with its outputs
    assert dispatches["send_welcome"]["input"]["hostname"] == "tenant1.example.net"
    welcome = player.activities(c.ACTIVITY_DISPATCH_STEP)[-1]
    assert welcome.input["step_id"] == "send_welcome"
    # after both children completed (then: dispatch, event, verify_result, settle)
    assert welcome.episode == len(player.episodes) - 5


def test_a_failing_step_in_the_group_gives_up_and_the_rest_is_compensated():
    replies = {f"result:register_files_dns:{n}": Reply.fail("zone locked") for n in (1, 2, 3)}
    ledger, scenario = onboard_world(replies)
    player = workflow_player(scenario, START)

    final = player.play()

    assert final.is_done and final.output["status"] == "compensated"
    assert final.output["failed_step"] == "register_files_dns"
    assert final.output["error"] == "zone locked"
    # the sibling that succeeded is recorded (and then undone)
    assert final.output["outputs"] == {k: OUTPUTS[k] for k in ("create_storage", "register_portal_dns")}
    assert ledger.called(c.ACTIVITY_GIVE_UP_STEP) == [
        {
            "instance_id": "inst-1",
            "step_id": "register_files_dns",
            "reason": "step 'register_files_dns' gave up after 3 attempt(s): zone locked",
        }
    ]
    (files,) = [p for p in scenario.players if p.instance_id == "inst-1:step:register_files_dns"]
    assert files.episodes[-1].output == {
        "succeeded": False,
        "attempts": 3,
        "output": None,
        "error": "zone locked",
    }
    assert c.ACTIVITY_GIVE_UP_STEP not in files.activity_names()  # giving up is the parent's decision
    # compensation runs once, after the whole group, in the ledger's order
    assert ledger.plans == [["register_files_dns", "register_portal_dns", "create_storage"]]
    subs = [s for s in player.scheduled if s.kind == "sub_orchestration"]
    assert [(s.name, s.instance_id) for s in subs][-1] == (c.COMPENSATION_ORCHESTRATOR, "inst-1:compensation")
    assert "send_welcome" not in [d["step_id"] for d in ledger.called(c.ACTIVITY_DISPATCH_STEP)]


def test_every_failed_step_of_the_group_gives_up_before_one_compensation():
    replies = {f"result:{s}:{n}": Reply.fail(f"{s} down") for s in GROUP for n in (1, 2, 3)}
    ledger, scenario = onboard_world(replies)
    player = workflow_player(scenario, START)

    final = player.play()

    assert final.output["status"] == "compensated"
    assert final.output["failed_step"] == "register_portal_dns"  # the first in the group's order
    assert [d["step_id"] for d in ledger.called(c.ACTIVITY_GIVE_UP_STEP)] == GROUP
    assert ledger.names().count(c.ACTIVITY_PLAN_COMPENSATION) == 1
    compensation = next(p for p in scenario.players if p.name == c.COMPENSATION_ORCHESTRATOR)
    assert "register_portal_dns" in compensation.input["reason"]
    assert "register_files_dns" in compensation.input["reason"]


def test_replaying_the_same_history_gives_identical_actions():
    replies = {"result:register_portal_dns:1": None, "result:register_files_dns:1": Reply.fail("busy")}
    _, scenario = onboard_world(replies)
    player = workflow_player(scenario, START)
    final = player.play()
    assert final.is_done and final.output["status"] == "succeeded"

    for context in player.contexts:
        assert run_orchestrator(WORKFLOW, context).raw == run_orchestrator(WORKFLOW, context).raw
    for child in (p for p in scenario.players if p.name == c.STEP_ORCHESTRATOR):
        assert child.episodes[-1].output["attempts"] == 2
        for context in child.contexts:
            assert (
                run_orchestrator(child.handler, context).raw == run_orchestrator(child.handler, context).raw
            )


def _chain_with_group(every: int):
    steps = "".join(
        f"""
  - id: s{n}
    agent: test.echo
    deadline_seconds: 60
    input: {{n: {n}}}
"""
        for n in (1, 4)
    )
    group = """
  - parallel:
      - {id: s2, agent: test.echo, deadline_seconds: 60, input: {n: 2}}
      - {id: s3, agent: test.echo, deadline_seconds: 60, input: {n: 3}}
"""
    first, last = steps.split("\n  - id: s4")
    return parse_workflow(
        f"name: chain\nhistory_checkpoint_every: {every}\nsteps:{first}{group}  - id: s4{last}",
        source="chain.yaml",
    )


@pytest.mark.parametrize(
    ("every", "checkpoints"),
    [(1, [(1, ["s1"]), (3, ["s1", "s2", "s3"])]), (2, [(3, ["s1", "s2", "s3"])])],
)
def test_checkpoint_counts_a_group_as_its_steps_and_never_splits_it(monkeypatch, every, checkpoints):
    definition = _chain_with_group(every=every)
    ledger = LedgerStub(definition, {f"s{n}": {"n": n} for n in range(1, 5)})

    players = play_generations(WORKFLOW, pinned(definition, {}), ledger.scenario(), start=T0)

    carried = [p.continued_as_new().input["state"] for p in players[:-1]]
    assert [(s["position"], s["completed"]) for s in carried] == checkpoints
    final = players[-1].episodes[-1]
    assert final.output["status"] == "succeeded"
    assert final.output["outputs"] == {f"s{n}": {"n": n} for n in range(1, 5)}
    assert [d["step_id"] for d in ledger.called(c.ACTIVITY_DISPATCH_STEP)] == ["s1", "s2", "s3", "s4"]


def test_checkpoint_inside_a_group_fails_loudly(monkeypatch):
    definition = _chain_with_group(every=25)
    ledger = LedgerStub(definition)
    state = {"position": 2, "completed": ["s1", "s2"], "outputs": {}, "generation": 1}

    players = play_generations(WORKFLOW, pinned(definition, {}, state=state), ledger.scenario())

    assert "does not match its definition" in players[-1].episodes[-1].error
    assert ledger.calls == []
