"""What the app registers: three orchestration triggers on one Durable blueprint, named per contract."""

from __future__ import annotations

import inspect

import azure.durable_functions as df

import orchestrators
from tests.durable_history import HistoryBuilder, blueprint_handler, run_orchestrator
from tests.orchestrators.world import T0, TENANT_INPUT, pinned
from workflow_core import contracts as c


def test_blueprint_registers_the_orchestrators_by_contract_name():
    assert isinstance(orchestrators.blueprint, df.Blueprint)
    functions = {
        fb._function.get_function_name(): fb._function for fb in orchestrators.blueprint._function_builders
    }
    assert set(functions) == {c.WORKFLOW_ORCHESTRATOR, c.COMPENSATION_ORCHESTRATOR, c.STEP_ORCHESTRATOR}
    for function in functions.values():
        assert function.get_trigger().type == "orchestrationTrigger"
        assert function.get_trigger().name == "context"


def test_registered_handlers_are_generator_orchestrators_that_start_with_their_first_activity():
    cases = {
        c.WORKFLOW_ORCHESTRATOR: (
            pinned("provision-tenant", TENANT_INPUT),
            c.ACTIVITY_CREATE_STEPS,
        ),
        c.COMPENSATION_ORCHESTRATOR: (
            {"instance_id": "i", "workflow": "provision-tenant"},
            c.ACTIVITY_PLAN_COMPENSATION,
        ),
        c.STEP_ORCHESTRATOR: (
            {
                "kind": "work",
                "instance_id": "i",
                "workflow": "onboard-tenant",
                "step_id": "register_portal_dns",
                "deadline_seconds": 60,
                "retry": {"max_attempts": 2},
                "input": {"tenant_id": "t"},
            },
            c.ACTIVITY_DISPATCH_STEP,
        ),
    }
    for name, (input_, first_activity) in cases.items():
        handler = blueprint_handler(orchestrators.blueprint, name)
        assert inspect.isgeneratorfunction(handler.orchestrator_function)
        history = HistoryBuilder().orchestrator_started(T0).execution_started(name, input_)
        episode = run_orchestrator(handler, history.context_json("i", input_))
        assert [a["functionName"] for a in episode.actions] == [first_activity]
