"""Agent handlers: registry and start-up check, the fault injector, the simulated remote services."""

from __future__ import annotations

import uuid

import pytest

from activities.worker.handlers import (
    AGENT_HANDLERS,
    EffectCancelled,
    MissingAgentHandlers,
    RemoteEffects,
    StepContext,
    agent,
    check_agents_registered,
    check_shipped_workflows,
    faults,
)
from workflow_core.workflows import load_workflows, parse_workflow


def _ctx(agent_name="dns.register", step="dns", attempt=1, services=None, **kw):
    return StepContext(
        instance_id="inst-1",
        step_id=step,
        attempt=attempt,
        agent=agent_name,
        kind="work",
        input=kw.pop("input", {}),
        deadline=None,
        services=services,
        **kw,
    )


def test_every_agent_of_the_shipped_workflows_has_a_handler():
    used = check_shipped_workflows()
    served = {n: w for n, w in load_workflows().items() if n != "sas-canary-echo"}  # a message-only pool's
    assert used == set().union(*(w.agents_used() for w in served.values()))
    assert used <= set(AGENT_HANDLERS)
    assert "conformance.echo" not in used  # the message-only canary's agent lives in its pool's runtime
    assert {"storage.create", "storage.delete", "dns.register", "dns.unregister", "payments.refund"} <= used


def test_missing_handlers_are_named_with_the_workflows_that_use_them():
    definition = parse_workflow(
        """
name: needs-more
steps:
  - id: a
    agent: fax.send
    deadline_seconds: 10
    compensation: {agent: fax.unsend, deadline_seconds: 10}
  - id: b
    agent: dns.register
    deadline_seconds: 10
"""
    )
    with pytest.raises(MissingAgentHandlers) as caught:
        check_agents_registered({"needs-more": definition})
    assert caught.value.missing == {"fax.send": ["needs-more"], "fax.unsend": ["needs-more"]}
    assert "fax.send (used by needs-more)" in str(caught.value)
    assert "dns.register" not in str(caught.value)


def test_agent_decorator_refuses_a_second_handler_for_a_name(services):
    @agent("tests.once")
    def first(ctx):
        return {}

    with pytest.raises(ValueError, match="already has a handler"):

        @agent("tests.once")
        def second(ctx):
            return {}


def test_idempotency_key_is_stable_across_attempts():
    assert _ctx(attempt=1).idempotency_key == _ctx(attempt=3).idempotency_key == "inst-1:dns"


# ---- fault injector -------------------------------------------------------------------------------


def test_fail_times_then_succeed_and_step_rules_win():
    faults.clear()
    try:
        agent_rule = faults.inject("dns.register", faults.Fail(times=2))
        step_rule = faults.inject("dns.register", faults.Fail(times=1, message="only dns"), step="dns")
        with pytest.raises(faults.InjectedFailure, match="only dns"):
            faults.before_handler(_ctx())
        for _ in range(2):
            with pytest.raises(faults.InjectedFailure, match="injected failure"):
                faults.before_handler(_ctx())
        faults.before_handler(_ctx())  # rules used up: the agent works again
        faults.before_handler(_ctx(step="other"))
        assert (agent_rule.fired, step_rule.fired) == (2, 1)
        assert [e.rule for e in faults.events()] == ["Fail", "Fail", "Fail"]
        faults.inject("dns.register", faults.Fail())  # unlimited
        for _ in range(5):
            with pytest.raises(faults.InjectedFailure):
                faults.before_handler(_ctx())
    finally:
        faults.clear()
    faults.before_handler(_ctx())
    assert faults.events() == []


def test_stall_and_crash_rules():
    faults.clear()
    try:
        faults.inject("storage.create", faults.Stall())
        with pytest.raises(faults.StallInjected):
            faults.before_handler(_ctx("storage.create"))
        faults.clear()
        faults.inject("storage.create", faults.Stall(seconds=0.01, times=1))
        faults.before_handler(_ctx("storage.create"))  # sleeps, then lets the handler run
        faults.inject("storage.create", faults.CrashAfterEffect())
        faults.before_handler(_ctx("storage.create"))  # crash rules fire only after the effect
        with pytest.raises(faults.InjectedCrash):
            faults.after_handler(_ctx("storage.create"))
        faults.after_handler(_ctx("storage.create"))  # times=1 by default
        with pytest.raises(TypeError):
            faults.inject("x.y", object())
    finally:
        faults.clear()


# ---- simulated remote services --------------------------------------------------------------------


def test_remote_effect_is_made_once_per_key(services):
    effects = RemoteEffects.for_services(services)
    key = f"inst-{uuid.uuid4().hex[:8]}:charge"
    first = effects.apply("payments-test", key, {"payment_id": "p1"})
    second = effects.apply("payments-test", key, {"payment_id": "p2"})
    assert first == second == {"payment_id": "p1"}
    assert [e["RowKey"] for e in effects.list("payments-test")].count(key) == 1
    assert effects.get("payments-test", key)["State"] == "applied"


def test_undo_is_idempotent_and_nothing_to_undo_leaves_a_tombstone(services):
    effects = RemoteEffects.for_services(services)
    done, never = (f"inst-{uuid.uuid4().hex[:8]}:dns" for _ in range(2))
    effects.apply("dns-test", done, {"fqdn": "b.example.net"})
    assert effects.undo("dns-test", done) == {"undone": True}
    assert effects.undo("dns-test", done) == {"undone": False, "reason": "already undone"}

    assert effects.undo("dns-test", never) == {"undone": False, "reason": "nothing to undo"}
    # An attempt that arrives after its compensation is refused instead of taking effect.
    with pytest.raises(EffectCancelled):
        effects.apply("dns-test", never, {"fqdn": "c.example.net"})


def test_example_handlers_return_the_fields_later_steps_reference(services):
    from activities.worker.handlers import get_handler

    def run(name, step, **input):
        return get_handler(name)(_ctx(name, step=step, services=services, input=input))

    assert {"account"} <= set(run("storage.create", "create_storage", tenant_id="t"))
    assert {"fqdn"} <= set(run("dns.register", "register_dns", tenant_id="t"))
    assert {"reservation_id"} <= set(run("inventory.reserve", "reserve_stock", items=[]))
    assert {"payment_id"} <= set(run("payments.charge", "charge_payment", amount=3))
    assert {"shipment_id"} <= set(run("shipping.create_shipment", "ship_order"))
    assert run("shipping.cancel_shipment", "ship_order") == {"service": "shipping", "undone": True}
