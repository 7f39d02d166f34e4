"""The circuit's state table, the slot gate and the watchdog's sweep, on real Azurite tables."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from supervisor.watchdog import tend_limits
from workflow_core import clock
from workflow_core.limits import (
    Circuit,
    CircuitEvent,
    CircuitState,
    CircuitStore,
    Holder,
    LimitsStore,
    next_circuit,
)
from workflow_core.limits.circuit_rules import TABLE
from workflow_core.limits.gate import PARK_SECONDS, HolderState, Phase, admit, slot_park
from workflow_core.limits.rows import read_rows
from workflow_core.workflows import loader
from workflow_core.workflows.errors import WorkflowDefinitionError
from workflow_core.workflows.pools import AgentLimits, CircuitSettings, clear_pools_cache, parse_pools

T0 = datetime(2026, 1, 1, 10, 2, tzinfo=UTC)
SETTINGS = CircuitSettings(failure_threshold=3, open_seconds=30)
S, E = CircuitState, CircuitEvent


def test_unset_limits_are_none_and_bad_ones_are_refused():
    pools = parse_pools("agents:\n  pay.refund:\n    max_in_flight: 2\n  quiet.agent: {}\n")
    assert pools.limits_of("pay.refund").max_in_flight == 2
    assert pools.limits_of("quiet.agent") is None and pools.limits_of("other") is None
    for bad, why in (
        ("agents:\n  Pay:\n    max_in_flight: 2\n", "not an agent name"),
        ("agents:\n  a:\n    max_in_flight: 0\n", "greater than or equal to 1"),
        ("agents:\n  a:\n    circuit: {failure_threshold: 0}\n", "greater than or equal to 1"),
        ("agents:\n  a:\n    wait_poll_seconds: -1\n", "greater than or equal to 0.1"),
        ("agents:\n  a:\n    max_inflight: 2\n", "Extra inputs"),
        ("agents: [a]\n", "valid dictionary"),
    ):
        with pytest.raises(WorkflowDefinitionError, match=why):
            parse_pools(bad)


def test_the_state_table():
    closed = Circuit()
    one = next_circuit(closed, E.FAILURE, T0, SETTINGS, error="ConnectionError")
    two = next_circuit(one, E.FAILURE, T0, SETTINGS)
    assert (two.state, two.failures) == (S.CLOSED, 2)
    assert next_circuit(two, E.SUCCESS, T0, SETTINGS).failures == 0  # consecutive: a success resets
    opened = next_circuit(two, E.FAILURE, T0, SETTINGS, error="ConnectionError: down")
    assert (opened.state, opened.open_until, opened.since) == (S.OPEN, T0 + timedelta(seconds=30), T0)
    assert next_circuit(opened, E.SUCCESS, T0, SETTINGS) is None  # a late success: the probe decides
    assert next_circuit(opened, E.PROBE, T0 + timedelta(seconds=29), SETTINGS, probe="p") is None
    half = next_circuit(opened, E.PROBE, T0 + timedelta(seconds=30), SETTINGS, probe="p")
    assert (half.state, half.probe) == (S.HALF_OPEN, "p")
    assert next_circuit(half, E.FAILURE, T0, SETTINGS).state is S.OPEN
    assert next_circuit(half, E.SUCCESS, T0, SETTINGS).state is S.CLOSED
    manual = next_circuit(closed, E.OPERATOR_OPEN, T0, SETTINGS, actor="operator:ann")
    assert (manual.state, manual.manual, manual.open_until) == (S.OPEN, True, None)
    assert next_circuit(manual, E.PROBE, T0 + timedelta(days=9), SETTINGS, probe="p") is None
    assert next_circuit(closed, E.OPERATOR_CLOSE, T0, SETTINGS).state is S.CLOSED
    assert (S.OPEN, E.SUCCESS) not in TABLE and (S.CLOSED, E.PROBE) not in TABLE


def test_circuit_moves_are_guarded_audited_and_manual_holds(ledger):
    circuits = CircuitStore(ledger)
    for _ in range(3):
        circuits.record_outcome("pay.refund", SETTINGS, ok=False, error="ConnectionError: refused")
    (view,) = circuits.states({"pay.refund": AgentLimits(circuit=SETTINGS)})
    assert view.circuit.state is S.OPEN and view.circuit.failures == 3
    assert view.attention_text().startswith("circuit open for pay.refund since ")
    assert view.attention_text().endswith(": 3 failures, last ConnectionError: refused")
    circuits.operator_move("pay.refund", SETTINGS, open_it=True, actor="operator:ann", reason="maintenance")
    circuits.operator_move("pay.refund", SETTINGS, open_it=False, actor="operator:bob", reason="back")
    trail = circuits.audit("pay.refund")
    assert [(a["actor"], a["action"], a["to"]) for a in trail] == [
        ("results", "failure", "open"),
        ("operator:ann", "operator_open", "open"),
        ("operator:bob", "operator_close", "closed"),
    ]
    assert trail[1]["reason"] == "maintenance"


def test_slots_go_oldest_waiter_first_and_a_dead_holders_at_its_deadline(ledger):
    table, limits = ledger.table_client(), AgentLimits(max_in_flight=1, wait_poll_seconds=5)
    a, b, c = (Holder("i-a", "s", 1), Holder("i-b", "s", 1), Holder("i-c", "s", 1))
    live = {a: T0 + timedelta(seconds=60)}

    def state_of(h: Holder) -> HolderState:
        return HolderState(Phase.IN_FLIGHT, live[h]) if h in live else HolderState(Phase.SETTLED)

    ask = lambda h, at: admit(table, "pay.refund", limits, h, T0 + timedelta(seconds=60), at, state_of)  # noqa: E731
    assert ask(a, T0).admitted
    assert ask(a, T0).admitted  # a re-run keeps its slot
    first = ask(b, T0 + timedelta(seconds=1))
    assert (first.admitted, first.first_wait) == (False, True)
    assert "1 of 1 slots of pay.refund in flight" in first.reason and first.retry_after == 5  # a poll
    behind = ask(c, T0 + timedelta(seconds=2))  # one waiting ahead on one slot: parks two polls
    assert (behind.admitted, behind.retry_after, behind.wake) == (False, 10, None)
    assert slot_park(10, 2, 5) == 30 and slot_park(400, 2, 5) == PARK_SECONDS
    del live[a]  # a's attempt settled: its slot is free, and b (older) takes it before c
    assert not ask(c, T0 + timedelta(seconds=3)).admitted
    assert ask(b, T0 + timedelta(seconds=4)).admitted
    live[b] = T0 + timedelta(seconds=60)
    assert [w.holder for w in read_rows(table, "pay.refund").waiters] == [c]
    # b dies mid-step: the ledger still says Running, but its deadline passes
    assert not ask(c, T0 + timedelta(seconds=59)).admitted
    assert ask(c, T0 + timedelta(seconds=61)).admitted


def test_the_watchdog_frees_a_crashed_holders_slot_only_past_its_deadline(ledger, tmp_path, monkeypatch):
    (tmp_path / "pools.yaml").write_text("agents:\n  pay.refund:\n    max_in_flight: 1\n")
    monkeypatch.setattr(loader, "DEFAULT_DIRECTORY", tmp_path)
    clear_pools_cache()
    try:
        table, limits, store = ledger.table_client(), AgentLimits(max_in_flight=1), LimitsStore(ledger)
        dead = Holder("i-dead", "s", 1)  # no step row: whatever it was, it is not in flight
        until = T0 + timedelta(seconds=40)
        assert store.admit("pay.refund", limits, dead, until, T0).admitted
        services = SimpleNamespace(limits=store)
        assert asyncio.run(tend_limits(None, services, T0 + timedelta(seconds=39))) == 0
        assert asyncio.run(tend_limits(None, services, T0 + timedelta(seconds=41))) == 1
        assert [s.holder for s in read_rows(table, "pay.refund").slots.values()] == [None]
    finally:
        clear_pools_cache()


class Wakes:
    """The Durable client's ``raise_event``, recorded: which parked schedulers a tick woke."""

    def __init__(self) -> None:
        self.raised: list[tuple[str, str]] = []

    async def raise_event(self, instance_id: str, name: str, data: object = None) -> None:
        self.raised.append((instance_id, name))


def test_steps_held_by_the_circuit_park_and_one_tick_per_agent_wakes_them(ledger, tmp_path, monkeypatch):
    (tmp_path / "pools.yaml").write_text("agents:\n  pay.refund:\n    circuit: {failure_threshold: 3}\n")
    monkeypatch.setattr(loader, "DEFAULT_DIRECTORY", tmp_path)
    clear_pools_cache()
    store, circuits = LimitsStore(ledger), CircuitStore(ledger)
    limits = AgentLimits(circuit=SETTINGS, wait_poll_seconds=5)
    a, b = Holder("i-a", "s", 1), Holder("i-b", "s", 1)
    services, wakes = SimpleNamespace(limits=store), Wakes()

    def ask(h: Holder, at):
        return store.admit("pay.refund", limits, h, at + timedelta(seconds=60), at, f"orch-{h.instance_id}")

    try:
        for _ in range(3):
            circuits.record_outcome("pay.refund", SETTINGS, ok=False, error="down")
        now = clock.utcnow()
        open_until = circuits.states({"pay.refund": limits})[0].circuit.open_until
        parked = ask(a, now)  # an automatic open: parked until its probe time, not polling
        assert not parked.admitted and parked.wake.startswith("wake:s:1:")
        assert parked.retry_after == pytest.approx((open_until - now).total_seconds())
        again = ask(a, now + timedelta(seconds=1))
        assert again.wake != parked.wake  # a fresh event name per park
        assert asyncio.run(tend_limits(wakes, services, now + timedelta(seconds=2))) == 0
        assert wakes.raised == []  # still open: nobody woken
        asyncio.run(tend_limits(wakes, services, open_until + timedelta(seconds=1)))
        assert wakes.raised == [("orch-i-a", again.wake)]  # probe time: the oldest, to probe
        circuits.operator_move("pay.refund", SETTINGS, open_it=True, actor="operator:ann", reason="hold")
        held = ask(b, now + timedelta(seconds=3))  # an operator's open has no end: the longest park
        assert (held.retry_after, held.first_wait) == (PARK_SECONDS, True)
        circuits.operator_move("pay.refund", SETTINGS, open_it=False, actor="operator:ann", reason="go")
        assert sorted(store.parked("pay.refund")) == [("orch-i-a", again.wake), ("orch-i-b", held.wake)]
        assert ask(a, now + timedelta(seconds=4)).admitted
        assert [w.holder for w in read_rows(store.table, "pay.refund").waiters] == [b]  # a left the queue
    finally:
        clear_pools_cache()
