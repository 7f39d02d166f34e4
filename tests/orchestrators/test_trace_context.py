"""The orchestrators carry the workflow's trace context as data: from their input into every dispatch
input and every sub-orchestration input, deterministically (replay reads it from the input, never from
an ambient context), and leave the inputs as they were when there is none."""

from __future__ import annotations

import json

from tests.durable_history import CALL_SUB_ORCHESTRATOR, OrchestrationPlayer
from tests.orchestrators.test_parallel_groups import START as GROUP_START
from tests.orchestrators.test_parallel_groups import onboard_world
from tests.orchestrators.world import COMPENSATION, T0, start_input, tenant_world, workflow_player
from workflow_core import contracts as c

TRACE = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "k=v"}


def test_every_dispatch_of_a_workflow_carries_the_trace_of_its_input():
    ledger, scenario = tenant_world()
    final = workflow_player(scenario, {**start_input(), "trace": TRACE}).play()
    assert final.is_done and final.error is None
    dispatches = ledger.called(c.ACTIVITY_DISPATCH_STEP)
    assert len(dispatches) == 3 and all(d["trace"] == TRACE for d in dispatches)


def test_without_a_trace_the_dispatch_input_has_no_trace_field():
    ledger, scenario = tenant_world()
    assert workflow_player(scenario).play().is_done
    assert all("trace" not in d for d in ledger.called(c.ACTIVITY_DISPATCH_STEP))


def test_a_parallel_groups_step_orchestrators_get_the_trace():
    ledger, scenario = onboard_world()
    player = workflow_player(scenario, {**GROUP_START, "trace": TRACE})
    assert player.play().is_done
    subs = [
        json.loads(a["input"])
        for episode in player.episodes
        for a in episode.actions
        if a["actionType"] == CALL_SUB_ORCHESTRATOR
    ]
    assert subs and all(s["trace"] == TRACE for s in subs)
    assert all(d.get("trace") == TRACE for d in ledger.called(c.ACTIVITY_DISPATCH_STEP))


def test_a_compensations_dispatches_carry_the_trace_of_its_input():
    ledger, scenario = tenant_world()
    ledger.plan_override = [
        {
            "step_id": "a",
            "compensator": "undo.a",
            "input": {},
            "output": {},
            "deadline_seconds": 60,
        }
    ]
    start = {"instance_id": "inst-1", "workflow": "provision-tenant", "reason": "x", "trace": TRACE}
    player = OrchestrationPlayer(
        COMPENSATION,
        start,
        scenario,
        instance_id="inst-1:compensation",
        start=T0,
        name=c.COMPENSATION_ORCHESTRATOR,
    )
    assert player.play().is_done
    (dispatch,) = ledger.called(c.ACTIVITY_DISPATCH_COMPENSATION)
    assert dispatch["trace"] == TRACE
