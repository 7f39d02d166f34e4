"""``max_in_flight``: 20 instances started at once never have more than 2 steps of the agent in
flight, all finish, and a holder killed mid-step frees its slot at its deadline."""

from __future__ import annotations

from datetime import timedelta

from activities.worker.handlers import faults
from api.circuits_api import mark_waiting
from api.views import instance_detail_view
from devtools.harness import PatternHarness
from tests.limits.support import AGENT, InFlightSampler, one_step, pools


def test_twenty_instances_share_two_slots_and_all_finish(azurite):
    sampler = InFlightSampler()
    served = {"limited": one_step(), "pools": pools(max_in_flight=2)}
    with PatternHarness(azurite, extra_workflows=served, on_event=sampler) as h:
        ids = [h.start_workflow("limited", {"tenant_id": f"t{i}"}) for i in range(20)]
        for iid in ids:
            assert h.run_until_complete(iid, timeout=timedelta(hours=2)).runtime_status.name == "Completed"
        assert {h.statuses(iid)["create_storage"] for iid in ids} == {"Succeeded"}
        assert sampler.most == 2  # never more than two in flight, and the limit was used
        assert h.double_effects() == {}
        waited = [e for e in h.events if e.note == "waiting"]
        assert waited, "some steps must have waited for a slot"
        (view,) = h.services.circuits.states()
        assert (view.agent, view.max_in_flight, view.waiting) == (AGENT, 2, 0)


def test_a_holder_killed_mid_step_frees_its_slot_at_its_deadline(azurite):
    sampler = InFlightSampler()
    served = {"limited": one_step(deadline=40), "pools": pools(max_in_flight=1)}
    with PatternHarness(azurite, extra_workflows=served, on_event=sampler) as h:
        faults.inject(AGENT, faults.Stall(times=1))  # the first holder dies mid-step: no reply ever
        first = h.start_workflow("limited", {"tenant_id": "killed"})
        h.run_until(lambda: h.statuses(first)["create_storage"] == "Running", timeout=timedelta(minutes=1))
        started = h.now()
        second = h.start_workflow("limited", {"tenant_id": "waiter"})
        ledger = h.services.ledger

        def view():
            steps, audit = ledger.list_for_instance(second), ledger.audit_trail(second)
            body = instance_detail_view(second, ledger.find_instance(second), steps, audit)
            mark_waiting(body, steps, audit)
            return body["steps"][0]

        h.run_until(lambda: "waiting" in view(), timeout=timedelta(minutes=1))
        assert view()["waiting"].startswith("attempt 1 waits: 1 of 1 slots of storage.create in flight")
        assert view()["status"] == "Pending" and view()["attempt"] == 0  # no attempt spent
        h.run_until(
            lambda: h.statuses(second)["create_storage"] in {"Dispatched", "Running", "Succeeded"},
            timeout=timedelta(minutes=10),
        )
        # the waiter got the only slot only once the dead holder's deadline (40 s) had passed
        assert h.now() - started >= timedelta(seconds=35)
        for iid in (first, second):
            assert h.run_until_complete(iid, timeout=timedelta(hours=1)).runtime_status.name == "Completed"
        assert sampler.most == 1
        assert "waiting" not in view()
