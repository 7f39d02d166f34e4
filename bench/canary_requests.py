"""Storage requests one recovery-canary run costs, per scenario, counted at the SDK.

    PYTHONPATH=. python bench/canary_requests.py

Starts its own Azurite; each scenario runs once in the in-process durable host (``devtools.harness``,
the watchdog every 30 s of virtual time) from the start to its recorded verdict. Counted: every Table
and Queue request of the app's clients (``devtools.request_counter``), the watchdog ticks that ran
during the run included, empty receives (idle polls of the harness's pumps) excluded; the Durable
task hub's own requests (the durable host is in-process) are not, see docs/capacity.md. Raw counts
first, then the monthly figure at the default hourly schedule. Not part of the test suite.
"""

from __future__ import annotations

from collections import Counter

from devtools.azurite import Azurite
from devtools.harness import PatternHarness
from devtools.request_counter import RequestCounter
from supervisor.canary import verify_runs
from workflow_core.canary import SCENARIOS

RUNS_PER_MONTH = 24 * 30  # hourly


def main() -> int:
    totals: dict[str, int] = {}
    with Azurite() as azurite, RequestCounter() as counter, PatternHarness(azurite) as h:
        for scenario in SCENARIOS:
            with counter.measure() as made:
                iid = h.start_workflow("sas-canary", {"scenario": scenario})
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
