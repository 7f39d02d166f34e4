"""How long a stalled step takes to be noticed and recovered, on the real clock.

    python bench/detection_latency.py            # 6 stalled steps per scenario
    python bench/detection_latency.py --quick    # 3

Starts its own Azurite and runs the whole pattern in one process (``devtools.harness``)
with the durable test host on the **real** clock (timers fire when the wall clock reaches them) and
the supervisor's watchdog ticking every second. Three scenarios:

* **orchestration alive** (a one-step workflow, deadline 3 s, its agent takes the work and never
  answers), from the deadline recorded in the ledger: its own deadline timer notices (detected = the
  ledger says TimedOut) and recovers (recovered = attempt 2 dispatched; retry backoff 0.2 s, no jitter);
* **scheduler terminated, agent silent** (deadline 60 s, the scheduler terminated while the step is
  out), from the termination: only the watchdog can notice, when the step's deadline passes
  (detected = the watchdog claims the step; recovered = it resumed the instance);
* **scheduler terminated, agent replies** 1 s after the termination (deadline 60 s), from the
  termination: the reply's event cannot be raised, so the result handler makes the instance due now
  (detected = that write, ``workflow_core/ledger/scheduler_gone.py``) and the watchdog's next tick
  resumes it (recovered).

Prints min / median / max for each. The watchdog's figure is bounded by its period (1 s here; 30 s in
the shipped schedule) plus one tick's work, after the step's deadline (agent silent) or after the
reply (agent replies). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from activities.worker.handlers import faults
from devtools.azurite import Azurite
from devtools.harness import PatternHarness
from devtools.logs import quiet_logging
from workflow_core.ledger.scheduler_gone import REASON_PREFIX

DEADLINE_SECONDS = 3
LONG_DEADLINE_SECONDS = 60  # long enough that waiting for it shows
REPLY_AFTER_SECONDS = 1.0
STAGGER_SECONDS = 0.37  # starts spread over the 1 s watchdog period


def probe(name: str, deadline: int) -> dict:
    return {
        "name": name,
        "description": f"One step with a {deadline} s deadline (detection latency benchmark).",
        "input": {"required": ["tenant_id"], "properties": {"tenant_id": {"type": "string"}}},
        "steps": [
            {
                "id": "probe",
                "agent": "dns.register",
                "input": {"tenant_id": "$input.tenant_id"},
                "deadline_seconds": deadline,
                "retry": {"max_attempts": 2, "initial_interval_seconds": 0.2, "jitter": 0},
                "compensation": {"agent": "dns.unregister", "deadline_seconds": 30},
            }
        ],
    }


PROBES = {"latency-probe": probe("latency-probe", DEADLINE_SECONDS)}
PROBES["latency-probe-long"] = probe("latency-probe-long", LONG_DEADLINE_SECONDS)


def stagger(h: PatternHarness) -> None:
    """Let the host run for a fraction of the watchdog period, so deadlines fall at different phases
    of its ticks."""
    until = time.monotonic() + STAGGER_SECONDS
    h.run_until(lambda: time.monotonic() >= until, timeout=timedelta(seconds=10))


def first(events, predicate):
    return next((e for e in events if predicate(e)), None)


def alive(h: PatternHarness, count: int) -> list[tuple[float, float]]:
    faults.clear()
    faults.inject("dns.register", faults.Stall(times=count))  # every first attempt goes silent
    iids = []
    for n in range(count):
        iids.append(h.start_workflow("latency-probe", {"tenant_id": f"t{n}"}))
        stagger(h)
    for iid in iids:
        h.run_until_complete(iid, timeout=timedelta(seconds=60))
    results = []
    for iid in iids:
        events = h.events_for(iid)
        deadline = first(events, lambda e: e.to_status == "Dispatched" and e.attempt == 1).record.deadline
        detected = first(events, lambda e: e.to_status == "TimedOut" and e.action == "transition")
        recovered = first(events, lambda e: e.to_status == "Dispatched" and e.attempt == 2)
        results.append(((detected.at - deadline).total_seconds(), (recovered.at - deadline).total_seconds()))
    return results


# The instance record decides what a dead scheduler gets (resume, by the workflow's policy, or
# compensation); either is the recovery measured here.
RECOVERIES = ("resume_instance", "compensate_instance", "start_compensation")


def recovery(event) -> bool:
    return event.note == "recovery" and any(action in event.reason for action in RECOVERIES)


def terminated(h: PatternHarness, count: int, reply_after: float | None) -> list[tuple[float, float]]:
    """Schedulers terminated while their agent holds the step; the agent replies ``reply_after``
    seconds later (None: never). Seconds from each termination to detection and to recovery."""
    faults.clear()
    held = h.hold("probe", attempt=1, times=count)  # the agent took the work and hangs
    iids = []
    for n in range(count):
        iids.append(h.start_workflow("latency-probe-long", {"tenant_id": f"g{reply_after}-{n}"}))
        h.run_until(lambda n=n: len(h.held(held)) == n + 1, timeout=timedelta(seconds=30))
        stagger(h)
    killed = {}
    for iid in iids:
        h.host.terminate(iid, "benchmark: scheduler terminated")
        killed[iid] = h.now()
    if reply_after is not None:
        until = time.monotonic() + reply_after
        h.run_until(lambda: time.monotonic() >= until, timeout=timedelta(seconds=10))
        h.release(held)
    for iid in iids:
        h.run_until(
            lambda iid=iid: any(recovery(e) for e in h.events_for(iid)),
            timeout=timedelta(seconds=LONG_DEADLINE_SECONDS * 2),
        )
    h.release(held)  # a silent agent's, once recovered
    for iid in iids:  # finished before the next scenario holds work again
        h.run_until_complete(iid, timeout=timedelta(seconds=LONG_DEADLINE_SECONDS * 2))
    results = []
    for iid in iids:
        if reply_after is None:
            detected = first(h.events_for(iid), lambda e: e.actor.startswith("supervisor:")).at
        else:
            detected = first(h.ledger.audit_trail(iid), lambda a: a.reason.startswith(REASON_PREFIX)).at
        recovered = first(h.events_for(iid), recovery).at
        results.append(((detected - killed[iid]).total_seconds(), (recovered - killed[iid]).total_seconds()))
    return results


def show(label: str, results: list[tuple[float, float]]) -> None:
    for name, values in (("detected", [d for d, _ in results]), ("recovered", [r for _, r in results])):
        print(
            f"  {label:<46} {name:<9}  min {min(values) * 1000:7.0f} ms  "
            f"median {statistics.median(values) * 1000:7.0f} ms  max {max(values) * 1000:7.0f} ms"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6, help="stalled steps per scenario (default 6)")
    parser.add_argument("--quick", action="store_true", help="3 stalled steps per scenario")
    args = parser.parse_args(argv)
    count = 3 if args.quick else args.steps
    quiet_logging()
    warnings.filterwarnings("ignore")
    with (
        Azurite() as azurite,
        PatternHarness(
            azurite,
            clock="real",
            watchdog_every=timedelta(seconds=1),
            extra_workflows=PROBES,
        ) as h,
    ):
        print(f"real clock; watchdog every 1 s; {count} stalled steps each")
        print(f"agent transport: {h.transport_label}")
        print(f"deadline {DEADLINE_SECONDS} s, from the deadline:")
        show("orchestration alive (its own timer)", alive(h, count))
        print(f"deadline {LONG_DEADLINE_SECONDS} s, from the scheduler's termination:")
        show("scheduler terminated, agent silent", terminated(h, count, None))
        show(
            f"scheduler terminated, agent replies {REPLY_AFTER_SECONDS:g} s later",
            terminated(h, count, REPLY_AFTER_SECONDS),
        )
    faults.clear()
    return 0


if __name__ == "__main__":
    sys.exit(main())
