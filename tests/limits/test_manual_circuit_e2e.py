"""An operator's open holds against the watchdog (and against the clock: no probe) until an operator
closes it; both moves are audited; the waiting instance is neither resumed nor compensated, and the
watchdog's next tick wakes it from its park once the circuit is closed."""

from __future__ import annotations

from datetime import timedelta

from devtools.harness import PatternHarness
from tests.limits.support import AGENT, one_step, pools
from workflow_core.workflows.pools import CircuitSettings

SETTINGS = CircuitSettings(failure_threshold=3, open_seconds=10)


def test_a_manual_open_holds_until_a_manual_close(azurite):
    served = {"limited": one_step(deadline=60, attempts=3), "pools": pools(threshold=3, open_seconds=10)}
    with PatternHarness(azurite, extra_workflows=served, watchdog_every=timedelta(seconds=15)) as h:
        h.services.circuits.operator_move(
            AGENT, SETTINGS, open_it=True, actor="operator:ann", reason="maintenance"
        )
        iid = h.start_workflow("limited", {"tenant_id": "held"})
        opened_at = h.now()
        h.run_until(lambda: h.now() - opened_at >= timedelta(seconds=150), timeout=timedelta(minutes=5))
        (view,) = h.services.circuits.states()
        assert (view.circuit.state.value, view.circuit.manual) == ("open", True)
        assert h.statuses(iid)["create_storage"] == "Pending"  # never dispatched, no attempt spent
        assert h.handler_calls(iid, "create_storage") == 0
        ticks = [r for r in h.tick_reports if r.now - opened_at >= timedelta(seconds=30)]
        assert len(ticks) >= 5 and not any(r.instance_decisions for r in ticks)  # nothing resumed it
        h.services.circuits.operator_move(AGENT, SETTINGS, open_it=False, actor="operator:bob", reason="done")
        closed_at = h.now()
        assert h.run_until_complete(iid, timeout=timedelta(minutes=5)).runtime_status.name == "Completed"
        # parked for 60 s at a time, it was woken by the next watchdog tick (every 15 s) instead
        (dispatched,) = [a.at for a in h.services.ledger.audit_trail(iid) if a.to_status == "Dispatched"]
        assert dispatched - closed_at < timedelta(seconds=25)
        assert h.statuses(iid)["create_storage"] == "Succeeded"
        trail = h.services.circuits.audit(AGENT)
        assert [(a["actor"], a["action"], a["to"]) for a in trail] == [
            ("operator:ann", "operator_open", "open"),
            ("operator:bob", "operator_close", "closed"),
        ]
