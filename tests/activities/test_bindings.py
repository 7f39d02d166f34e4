"""The Functions bindings: names from the contracts, triggers per AGENT_TRANSPORT, one blueprint."""

from __future__ import annotations

import azure.durable_functions as df
import pytest

import activities
from activities.replies.dead_letters import register_dead_letter_handler
from activities.replies.results import register_result_handler
from activities.worker.agent_worker import register_worker
from activities.worker.messages import transport_kind
from workflow_core import contracts as c
from workflow_core.settings import TransportKind


def _bindings(function):
    return {b.get_dict_repr()["type"]: b.get_dict_repr() for b in function.get_bindings()}


def test_the_blueprint_registers_every_contract_function():
    app = df.DFApp()
    app.register_blueprint(activities.blueprint)
    names = {f.get_function_name() for f in app.get_functions()}
    expected = {getattr(c, n) for n in dir(c) if n.startswith("ACTIVITY_")}
    expected |= {c.WORKER_FUNCTION, c.RESULT_FUNCTION, c.DEAD_LETTER_FUNCTION}
    assert names == expected


@pytest.mark.parametrize(
    ("kind", "trigger", "connection", "dlq"),
    [
        (
            TransportKind.SERVICE_BUS,
            "serviceBusTrigger",
            "ServiceBusConnection",
            "%WORK_QUEUE_NAME%/$DeadLetterQueue",
        ),
        (TransportKind.STORAGE_QUEUE, "queueTrigger", "AzureWebJobsStorage", "%DEAD_LETTER_QUEUE_NAME%"),
    ],
)
def test_queue_triggers_follow_the_transport(kind, trigger, connection, dlq):
    bp = df.Blueprint()
    functions = {
        c.WORKER_FUNCTION: register_worker(bp, kind).build(),
        c.RESULT_FUNCTION: register_result_handler(bp, kind).build(),
        c.DEAD_LETTER_FUNCTION: register_dead_letter_handler(bp, kind).build(),
    }
    queues = {}
    for name, function in functions.items():
        assert function.get_function_name() == name
        bindings = _bindings(function)
        assert bindings[trigger]["connection"] == connection
        queues[name] = bindings[trigger]["queueName"]
        assert ("durableClient" in bindings) == (name != c.WORKER_FUNCTION)
    assert queues == {
        c.WORKER_FUNCTION: "%WORK_QUEUE_NAME%",
        c.RESULT_FUNCTION: "%RESULT_QUEUE_NAME%",
        c.DEAD_LETTER_FUNCTION: dlq,
    }


def test_transport_kind_from_the_environment():
    assert transport_kind({}) is TransportKind.SERVICE_BUS
    assert transport_kind({"AGENT_TRANSPORT": "Storage-Queue"}) is TransportKind.STORAGE_QUEUE
    with pytest.raises(ValueError, match="AGENT_TRANSPORT must be one of"):
        transport_kind({"AGENT_TRANSPORT": "carrier-pigeon"})
