"""Storage requests one recovery-canary run costs, per scenario, counted at the SDK.

    PYTHONPATH=. python bench/canary_requests.py

Starts its own Azurite; each scenario runs once in the in-process durable host (``devtools.harness``,
the watchdog every 30 s of virtual time) from the start to its recorded verdict. Counted: every Table
and Queue request of the app's clients (``tests.helpers.request_counter``), the watchdog ticks that ran
during the run included, empty receives (idle polls of the harness's pumps) excluded; the Durable
task hub's own requests (the durable host is in-process) are not, see docs/capacity.md. Raw counts
first, then the monthly figure at the default hourly schedule. Then the same for ``sas-canary-echo`` in
an opted-in message-only pool, served by a message-only echo agent (``tests.helpers.message_only_echo``)
whose heartbeats and results travel on the result queue. Not part of the test suite.
"""

from __future__ import annotations

from collections import Counter

from devtools.azurite import Azurite
from devtools.harness import PatternHarness
from supervisor.canary import verify_runs
from tests.helpers.message_only_echo import MessageOnlyEcho
from tests.helpers.request_counter import RequestCounter
from workflow_core.canary import SCENARIOS, echo_input

RUNS_PER_MONTH = 24 * 30  # hourly
EDGE = "pools:\n  edge:\n    message_only: true\n    canary: true\n"


def main() -> int:
    with Azurite() as azurite, RequestCounter() as counter:
        print("sas-canary, in a hosted pool (the app's worker)")
        with PatternHarness(azurite) as h:
            measure(h, counter, lambda s: h.start_workflow("sas-canary", {"scenario": s}))
        print("sas-canary-echo, in a message-only pool (its agent answers with messages)")
        pools = {"extra_workflows": {"pools": EDGE}, "hosted_pools": ["default"]}
        with PatternHarness(azurite, **pools) as h:
            MessageOnlyEcho(h, "edge")
            measure(h, counter, lambda s: h.start_workflow("sas-canary-echo", echo_input(s, "edge")))
    return 0


def measure(h: PatternHarness, counter: RequestCounter, start) -> None:
    totals: dict[str, int] = {}
    for scenario in SCENARIOS:
        with counter.measure() as made:
            iid = start(scenario)
            if scenario == "scheduler-lost":
                h.host.terminate(iid, "bench")
            h.run_until(
                lambda iid=iid: h.ledger.get_instance(iid).status.value in ("Succeeded", "Compensated")
            )
            verify_runs(h.ledger, watchdog_period=30, grace=30, now=h.now())
        counted = [r for r in made if not r.empty]
        totals[scenario] = len(counted)
        ops = Counter(f"{r.service}:{r.op}" for r in counted)
        detail = ", ".join(f"{k} {v}" for k, v in sorted(ops.items()))
        print(f"{scenario:<16} {len(counted):>4} requests  ({detail})")
    mean = sum(totals.values()) / len(totals)
    monthly = mean * RUNS_PER_MONTH
    print(f"=> {mean:.1f} requests per run on average; {monthly:,.0f} per month hourly, per canary pool")


if __name__ == "__main__":
    raise SystemExit(main())
