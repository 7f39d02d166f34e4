"""The YAML definitions in workflows/ pass ``sas lint``, whatever they are; the shipped ones say what
their agents expect.

Rules every definition must meet are lint rules (``workflow_core.workflows.loader``), run here over the
folder; the tests below that name a shipped workflow check that workflow's own behaviour, so adding
a workflow of your own needs no test edited."""

from __future__ import annotations

import pytest

from activities.worker.handlers import AGENT_HANDLERS
from workflow_core.workflows import (
    DEFAULT_DIRECTORY,
    UnknownWorkflow,
    agents_used,
    get_workflow,
    load_workflows,
    resolve_step_input,
)
from workflow_core.workflows.loader import lint_directory

FILES = sorted(p.stem for p in [*DEFAULT_DIRECTORY.glob("*.yaml"), *DEFAULT_DIRECTORY.glob("*.yml")])
# The examples this repository ships; their own shape is tested below (a taste, not a rule).
SHIPPED = ["onboard-tenant", "order-fulfilment", "provision-tenant"]


def test_every_file_loads_under_its_own_name():
    assert sorted(load_workflows()) == FILES
    assert set(SHIPPED) <= set(FILES)


def test_every_definition_passes_the_lint():
    definitions, problems = lint_directory(agents=set(AGENT_HANDLERS))
    assert [str(p) for p in problems] == []
    assert sorted(definitions) == FILES


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_definitions_are_realistic(name):
    definition = get_workflow(name)
    assert definition.description
    for step in definition.steps:
        assert 60 <= step.deadline_seconds <= 300
        assert step.retry.max_attempts == 3
        assert step.retry.backoff_coefficient > 1
    assert any(step.heartbeat_timeout_seconds for step in definition.steps)


def test_provision_tenant_steps_and_agents():
    definition = get_workflow("provision-tenant")
    assert [(s.id, s.agent, s.compensator) for s in definition.steps] == [
        ("create_storage", "storage.create", "storage.delete"),
        ("register_dns", "dns.register", "dns.unregister"),
        ("send_welcome", "email.send_welcome", None),
    ]


def test_order_fulfilment_steps_and_agents():
    definition = get_workflow("order-fulfilment")
    assert [(s.id, s.agent, s.compensator) for s in definition.steps] == [
        ("reserve_stock", "inventory.reserve", "inventory.release"),
        ("charge_payment", "payments.charge", "payments.refund"),
        ("ship_order", "shipping.create_shipment", "shipping.cancel_shipment"),
    ]


def test_agents_used_lists_work_and_compensation_agents():
    assert agents_used() >= {
        "storage.create",
        "storage.delete",
        "dns.register",
        "dns.unregister",
        "email.send_welcome",
        "inventory.reserve",
        "inventory.release",
        "payments.charge",
        "payments.refund",
        "shipping.create_shipment",
        "shipping.cancel_shipment",
    }


def test_order_fulfilment_inputs_resolve_through_the_chain():
    definition = get_workflow("order-fulfilment")
    data = definition.validate_input(
        {
            "order_id": "o-1",
            "customer_id": "c-1",
            "items": [{"sku": "A", "quantity": 2}],
            "amount": 19.5,
            "shipping_address": {"city": "Lyon"},
        }
    )
    outputs = {"reserve_stock": {"reservation_id": "r-1"}, "charge_payment": {"payment_id": "p-1"}}
    assert resolve_step_input(definition.step("charge_payment"), data, outputs) == {
        "order_id": "o-1",
        "customer_id": "c-1",
        "amount": 19.5,
        "currency": "EUR",
        "reservation_id": "r-1",
    }
    shipment = resolve_step_input(definition.step("ship_order"), data, outputs)
    assert shipment["address"] == {"city": "Lyon"} and shipment["payment_id"] == "p-1"


def test_unknown_workflow_lists_known_names():
    with pytest.raises(UnknownWorkflow) as info:
        get_workflow("provision")
    assert str(info.value) == f"unknown workflow 'provision'; known workflows: {', '.join(FILES)}"
    assert isinstance(info.value, LookupError)


def test_definitions_are_cached_and_immutable():
    first = get_workflow("provision-tenant")
    assert get_workflow("provision-tenant") is first
    with pytest.raises(ValueError):
        first.name = "other"  # type: ignore[misc]
    load_workflows().clear()  # a caller mutating its copy does not empty the cache
    assert get_workflow("provision-tenant") is first
