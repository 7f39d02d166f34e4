"""The Agent role inside the whole pattern: real orchestrators on the in-process durable test host,
real activities, ledger and queues on Azurite, the worker and result handler driven by queue pumps
exactly as the Functions host would drive them (see docs/agents.md, "Driving the bodies")."""

from __future__ import annotations

import pytest

import activities
import orchestrators
from activities import handle_dead_letter, handle_result, process_work_message
from activities.worker.handlers import RemoteEffects, faults
from devtools.durable_host import DurableTestHost
from orchestrators.state import WorkflowStart
from workflow_core.ledger import StepStatus
from workflow_core.transport import pump
from workflow_core.workflows import get_workflow

S = StepStatus


@pytest.fixture
def host(services):
    with DurableTestHost(orchestrators.blueprint, activities.blueprint) as host:
        settings = services.settings

        def work_pump():
            return len(
                pump(
                    services.transport,
                    settings.work_queue,
                    lambda m: process_work_message(
                        m.body, delivery_count=m.delivery_count, services=services, worker_id="worker-1"
                    ),
                    max_delivery_count=settings.max_delivery_count,
                    max_messages=8,
                )
            )

        def result_pump():
            return len(
                pump(
                    services.transport,
                    settings.result_queue,
                    lambda m: host.call(handle_result, m.body, host.client, services),
                    max_delivery_count=settings.max_delivery_count,
                    max_messages=8,
                )
            )

        def dead_letter_pump():
            found = services.transport.receive_dead_letters(settings.work_queue, max_messages=8)
            for m in found:
                host.call(
                    handle_dead_letter,
                    m.body,
                    reason=m.dead_letter_reason,
                    description=m.dead_letter_description,
                    client=host.client,
                    services=services,
                )
                services.transport.complete(m)
            return len(found)

        for fn in (work_pump, result_pump, dead_letter_pump):
            host.add_pump(fn)
        yield host


def _start(host, workflow, **workflow_input):
    start = WorkflowStart.of(get_workflow(workflow), workflow_input)
    return host.start_new("workflow_orchestrator", input=start.model_dump(mode="json"))


def _statuses(services, instance_id):
    return {r.step_id: (r.status, r.attempt) for r in services.ledger.list_for_instance(instance_id)}


def test_a_failing_agent_is_retried_and_the_workflow_succeeds(host, services):
    faults.inject("dns.register", faults.Fail(times=1))
    iid = _start(host, "provision-tenant", tenant_id="contoso", admin_email="admin@contoso.example")
    status = host.run_until_complete(iid)

    assert status.output["status"] == "succeeded"
    assert status.output["outputs"]["send_welcome"]["hostname"] == "contoso.example.net"
    assert _statuses(services, iid) == {
        "create_storage": (S.SUCCEEDED, 1),
        "register_dns": (S.SUCCEEDED, 2),
        "send_welcome": (S.SUCCEEDED, 1),
    }


def test_a_dead_agent_times_out_and_completed_steps_are_compensated_in_reverse(host, services):
    faults.inject("email.send_welcome", faults.Stall())
    iid = _start(host, "provision-tenant", tenant_id="fabrikam", admin_email="admin@fabrikam.example")
    status = host.run_until_complete(iid)

    assert status.output["status"] == "compensated"
    assert [s["step_id"] for s in status.output["compensation"]["steps"]] == [
        "register_dns",
        "create_storage",
    ]
    assert _statuses(services, iid) == {
        "create_storage": (S.COMPENSATED, 1),
        "register_dns": (S.COMPENSATED, 1),
        "send_welcome": (S.CANCELLED, 3),
    }
    effects = RemoteEffects.for_services(services)
    assert effects.get("storage", f"{iid}:create_storage")["State"] == "undone"
    assert effects.get("dns", f"{iid}:register_dns")["State"] == "undone"


def test_a_crash_after_the_effect_is_redelivered_and_charges_once(host, services):
    faults.inject("payments.charge", faults.CrashAfterEffect())
    iid = _start(
        host,
        "order-fulfilment",
        order_id="o-1",
        customer_id="c-1",
        items=[{"sku": "A", "quantity": 1}],
        amount=12.5,
        shipping_address={"city": "Utrecht"},
    )
    status = host.run_until_complete(iid)

    assert status.output["status"] == "succeeded"
    charge = status.output["outputs"]["charge_payment"]
    effect = RemoteEffects.for_services(services).get("payments", f"{iid}:charge_payment")
    assert effect["Result"] and charge["payment_id"] in effect["Result"]
    assert _statuses(services, iid)["charge_payment"] == (S.SUCCEEDED, 1)  # same attempt, redelivered
    assert any(a.reason.startswith("took over") for a in services.ledger.audit_trail(iid))


def test_a_compensator_that_keeps_failing_ends_in_the_operators_inbox(host, services):
    faults.inject("shipping.create_shipment", faults.Fail())
    faults.inject("payments.refund", faults.Fail())
    iid = _start(
        host,
        "order-fulfilment",
        order_id="o-2",
        customer_id="c-2",
        items=[],
        amount=3,
        shipping_address={},
    )
    status = host.run_until_complete(iid)

    assert status.output["status"] == "compensation_failed"
    assert _statuses(services, iid)["charge_payment"][0] is S.COMPENSATION_FAILED
    assert _statuses(services, iid)["reserve_stock"][0] is S.COMPENSATED
    attention = [r.step_id for r in services.ledger.needing_attention() if r.instance_id == iid]
    assert attention == ["charge_payment"]


def test_poison_messages_fail_the_step_at_once_and_its_effect_is_undone(host, services):
    faults.inject("dns.register", faults.CrashAfterEffect(times=None))  # dies after every effect
    iid = _start(host, "provision-tenant", tenant_id="northwind", admin_email="admin@northwind.example")
    status = host.run_until_complete(iid)

    assert status.output["status"] == "compensated"
    assert status.output["failed_step"] == "register_dns"
    assert "dead-lettered: MaxDeliveryCountExceeded" in status.output["error"]
    # The given-up step is undone first: its attempts did take effect before dying.
    assert [s["step_id"] for s in status.output["compensation"]["steps"]] == [
        "register_dns",
        "create_storage",
    ]
    assert RemoteEffects.for_services(services).get("dns", f"{iid}:register_dns")["State"] == "undone"
    assert _statuses(services, iid)["register_dns"] == (S.COMPENSATED, 3)
