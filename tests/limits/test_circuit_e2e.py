"""The circuit breaker end to end: an agent failing for 60 s then recovering opens its circuit,
nobody compensates, the agent receives nothing but the probe while it is open, everyone completes,
and the inbox line shows the open circuit while it lasts."""

from __future__ import annotations

from datetime import timedelta

from activities.worker.handlers import faults
from devtools.harness import PatternHarness
from tests.limits.support import AGENT, one_step, pools


def test_an_outage_opens_the_circuit_and_everyone_completes_after_it(azurite):
    served = {"limited": one_step(deadline=60, attempts=5), "pools": pools(threshold=3, open_seconds=20)}
    with PatternHarness(azurite, extra_workflows=served) as h:
        outage = faults.inject(AGENT, faults.Fail(message="ConnectionError: payments down"))
        began = h.now()
        ids = [h.start_workflow("limited", {"tenant_id": f"t{i}"}) for i in range(8)]

        def view():
            (v,) = h.services.circuits.states()
            return v

        h.run_until(lambda: view().circuit.state.value == "open", timeout=timedelta(minutes=1))
        line = view().attention_text()
        assert line is not None and line.startswith(f"circuit open for {AGENT} since ")
        assert " failures, last InjectedFailure: ConnectionError: payments down" in line
        h.run_until(lambda: h.now() - began >= timedelta(seconds=60), timeout=timedelta(minutes=2))
        assert view().circuit.state.value != "closed"
        faults.remove(outage)  # the service is back
        for iid in ids:
            assert h.run_until_complete(iid, timeout=timedelta(hours=1)).runtime_status.name == "Completed"
        assert {h.statuses(iid)["create_storage"] for iid in ids} == {"Succeeded"}
        assert view().circuit.state.value == "closed" and view().attention_text() is None

        # While open the agent got nothing but probes: the 8 first attempts (all sent before it
        # opened) and one probe per half-open spell, which failed while the outage lasted.
        trail = [(a["from"], a["to"]) for a in h.services.circuits.audit(AGENT)]
        failed_probes = trail.count(("half_open", "open"))
        assert trail[0] == ("closed", "open") and trail[-1] == ("half_open", "closed")
        assert failed_probes >= 2  # at 20 s and 40 s
        assert len(faults.events()) == 8 + failed_probes
        assert not [e for e in h.events if e.to_status == "Compensating"]


def test_timeouts_count_like_failures(azurite):
    served = {"limited": one_step(deadline=10, attempts=5), "pools": pools(threshold=2, open_seconds=30)}
    with PatternHarness(azurite, extra_workflows=served) as h:
        hang = faults.inject(AGENT, faults.Stall(times=2))  # two attempts never answer
        ids = [h.start_workflow("limited", {"tenant_id": f"t{i}"}) for i in range(2)]

        def state():
            (v,) = h.services.circuits.states()
            return v.circuit

        h.run_until(lambda: state().state.value == "open", timeout=timedelta(minutes=2))
        assert state().last_error == "timed out" and state().failures >= 2
        faults.remove(hang)
        for iid in ids:
            assert h.run_until_complete(iid, timeout=timedelta(hours=1)).runtime_status.name == "Completed"
        assert state().state.value == "closed"
