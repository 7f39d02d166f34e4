"""The bounded-recovery invariant, under random faults.

Whatever mix of faults one instance meets (agents that fail for a while or for good, agents that
stall, a scheduler that dies, work messages lost on the way, step inputs and compensation messages
over a size limit), the whole pattern (durable test host, real Azurite, real agents and watchdog):

* brings the instance to an end state (Succeeded, Compensated, Cancelled, CompensationFailed) or
  flags it for an operator with a reason and parks it, within a bounded number of watchdog ticks;
* restarts no work after that: no resume, restart, re-send, termination or raised result, and no
  agent called again, however long the watchdog keeps ticking.

Examples are few and derandomized (each is a whole run of the pattern): a failure reproduces on the
next run, and the test stays well under a minute.
"""

from __future__ import annotations

from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from activities.worker.handlers import faults
from devtools.harness import DEFAULT_WATCHDOG_PERIOD, PatternHarness
from tests.helpers.fault_matrix import CURRENT, ROWS, Row

END_STATES = frozenset({"Succeeded", "Compensated", "Cancelled", "CompensationFailed"})
# what restarts or repeats work; notes and the settling of a given-up step's row are not work
RESTARTS = frozenset(
    {
        "resume_instance",
        "compensate_instance",
        "restart_compensation",
        "terminate_stalled_scheduler",
        "terminate_stalled_compensation",
        "resend",
        "fail_step",
        "start_compensation",
        "fail_compensation",
        "end_scheduler",
    }
)
BOUND = timedelta(hours=12)  # virtual time to an end or a flag: BOUND / the tick period ticks at most
AFTERWARDS = timedelta(minutes=40)  # eight leases: every "look again" of the watchdog comes due

faults_of_one_instance = st.fixed_dictionaries(
    {
        "fail": st.sampled_from(
            [None, ("dns.register", 2), ("email.send_welcome", None), ("storage.delete", None)]
        ),
        "stall": st.sampled_from([None, ("storage.create", 1), ("dns.register", None)]),
        "scheduler_dies_after": st.sampled_from([None, timedelta(seconds=1), timedelta(minutes=3)]),
        "lost_send": st.sampled_from([None, ("register_dns", 1), ("send_welcome", 5)]),
        "oversize": st.sampled_from([None, "region", "derived_input"]),
    }
)


def start(h: PatternHarness, oversize: str | None) -> str:
    inputs = {"tenant_id": "t-prop", "admin_email": "a@b.example"}
    if oversize == "region":  # the compensation's message carries it twice: over the limit
        inputs["region"] = "r" * 30_000
    elif oversize == "derived_input":  # each field under the limit, send_welcome's input over it
        inputs = {"tenant_id": "t" * 14_000, "admin_email": "e" * 17_000 + "@b.example"}
    return h.start_workflow("provision-tenant", inputs)


def ended_or_parked(h: PatternHarness, iid: str) -> bool:
    record = h.ledger.get_instance(iid)
    if record.status.value in END_STATES:
        return True
    return record.needs_attention and record.scheduler_deadline is None


def restarts_since(h: PatternHarness, iid: str, first_tick: int) -> list[str]:
    done = []
    for report in h.tick_reports[first_tick:]:
        done += [d[2] for d in report.instance_decisions if d[0] == iid and d[2] in RESTARTS]
        done += [d.action for d in report.decisions if d.instance_id == iid and d.action in RESTARTS]
    return done


def agent_calls(h: PatternHarness, iid: str) -> int:
    steps = ("create_storage", "register_dns", "send_welcome")
    return sum(h.handler_calls(iid, s, kind=k) for s in steps for k in ("work", "compensate"))


@settings(
    max_examples=5,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(plan=faults_of_one_instance)
def test_every_instance_ends_or_is_flagged_within_bounded_ticks_and_nothing_restarts_after(azurite, plan):
    CURRENT["recorded"] = True  # checked here, summed up by the test below
    faults.clear()
    try:
        with PatternHarness(azurite) as h:
            if plan["fail"]:
                agent, times = plan["fail"]
                faults.inject(agent, faults.Fail(times=times))
            if plan["stall"]:
                agent, times = plan["stall"]
                faults.inject(agent, faults.Stall(times=times))
            if plan["lost_send"]:
                step, times = plan["lost_send"]
                h.fail_send(step, times=times)
            iid = start(h, plan["oversize"])
            if plan["scheduler_dies_after"] is not None:
                h.host.advance(plan["scheduler_dies_after"])
                if h.host.get_status(iid).runtime_status.value in ("Running", "Pending"):
                    h.host.terminate(iid, "the scheduler's host died")

            h.run_until(lambda: ended_or_parked(h, iid), timeout=BOUND)
            ticks = len(h.tick_reports)
            assert ticks <= BOUND / DEFAULT_WATCHDOG_PERIOD
            record = h.ledger.get_instance(iid)
            if record.status.value not in ("Succeeded", "Compensated", "Cancelled"):
                assert record.needs_attention and record.attention_reason, record  # flagged, with why
            if record.needs_attention:
                assert record.attention_reason
            calls = agent_calls(h, iid)

            h.host.advance(AFTERWARDS)
            assert restarts_since(h, iid, ticks) == [], plan
            assert agent_calls(h, iid) == calls, plan
            assert h.double_effects([iid]) == {}
            OUTCOMES.add(record.status.value + (" (flagged)" if record.needs_attention else ""))
    finally:
        faults.clear()


OUTCOMES: set[str] = set()


def test_the_invariant_row_in_the_fault_matrix():
    """One row for the property above (its examples are not rows of their own)."""
    if OUTCOMES:
        ROWS.append(
            Row(
                "random faults (property)",
                "fails, stalls, deaths, lost and oversize",
                0,
                0,
                ", ".join(sorted(OUTCOMES)),
            )
        )
    CURRENT["recorded"] = True
