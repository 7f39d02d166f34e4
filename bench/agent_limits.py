"""Storage requests per step with per-agent limits (docs/agent-limits.md), counted at the SDK.

    python bench/agent_limits.py            # 20 one-step workflows per scenario
    python bench/agent_limits.py --quick    # 6

Starts its own Azurite and runs one-step workflows (agent ``storage.create``) on the in-process
durable host (``devtools.harness``), counting every Table/Queue request as ``bench/requests_per_step.py``
does (empty receives, the example agent's effect and the harness's own reads left out):

1. **no limits** (no ``agents:`` key): today's cost;
2. **limits for another agent only**: must equal 1. (the gate reads nothing for an unlimited agent);
3. **max_in_flight 2** for the agent, the workflows started together: the slot rows, the waiters'
   polls (every ``wait_poll_seconds``), the releases;
4. **circuit open** (an operator's open) for ``--open-seconds`` of virtual time while the workflows
   wait: requests per waiting step per minute. A held-back step parks (``PARK_SECONDS``, or until an
   automatic open's probe time, or until a wake-up): about four requests per park (the step and the
   agent's rows read, the wait row, the scheduler's promise), at most 6 a minute.

Raw counts first, then ratios. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devtools.azurite import Azurite
from devtools.harness import PatternHarness
from devtools.logs import quiet_logging
from tests.helpers.request_counter import AGENT_EFFECT, HARNESS, RequestCounter, pattern_operation
from tests.helpers.request_scenarios import forget_effect_clients
from workflow_core.limits.gate import PARK_SECONDS
from workflow_core.workflows.pools import CircuitSettings

AGENT = "storage.create"
POLL_SECONDS = 5
BY = {"actor": "operator:bench", "reason": "bench"}  # who opens and closes the circuit by hand
STEP = {
    "id": "create_storage",
    "agent": AGENT,
    "input": {"tenant_id": "$input.tenant_id", "region": "westeurope", "sku": "Standard_LRS"},
    "deadline_seconds": 600,
    "retry": {"max_attempts": 3, "initial_interval_seconds": 1},
}
WORKFLOW = {
    "name": "limited-bench",
    "input": {"required": ["tenant_id"], "properties": {"tenant_id": {"type": "string"}}},
    "steps": [STEP],
}


def pools(agent: str | None, *, slots: int | None = None, circuit: bool = False) -> str:
    if agent is None:
        return "pools: {}\n"
    lines = ["agents:", f"  {agent}:", f"    wait_poll_seconds: {POLL_SECONDS}"]
    if slots:
        lines.append(f"    max_in_flight: {slots}")
    if circuit:
        lines.append("    circuit: {failure_threshold: 5, open_seconds: 60}")
    return "\n".join(lines) + "\n"


def counted(made: list) -> list:
    return [r for r in made if not (r.op == "receive" and r.empty) and r.label not in (AGENT_EFFECT, HARNESS)]


def run(azurite: Azurite, workflows: int, pools_yaml: str, open_for: float | None = None) -> tuple[int, int]:
    """(requests, of which while the circuit was held open) for ``workflows`` one-step workflows."""
    forget_effect_clients()
    served = {"limited-bench": WORKFLOW, "pools": pools_yaml}
    with (
        RequestCounter(classify=pattern_operation) as counter,
        PatternHarness(azurite, watchdog_every=None, extra_workflows=served) as h,
    ):
        held = 0
        if open_for is not None:
            h.services.circuits.operator_move(AGENT, CircuitSettings(), open_it=True, **BY)
        counter.reset()
        ids = [h.start_workflow("limited-bench", {"tenant_id": f"t{n}"}) for n in range(workflows)]
        if open_for is not None:
            began = h.now()
            h.run_until(lambda: h.now() - began >= timedelta(seconds=open_for), timeout=timedelta(hours=1))
            held = len(counted(counter.snapshot()))
            h.services.circuits.operator_move(AGENT, CircuitSettings(), open_it=False, **BY)
        for iid in ids:
            h.run_until_complete(iid, timeout=timedelta(hours=2))
        return len(counted(counter.snapshot())), held


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=20)
    parser.add_argument("--open-seconds", type=float, default=300, help="virtual seconds held open (4.)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    n = 6 if args.quick else args.workflows
    quiet_logging()
    warnings.filterwarnings("ignore")
    with Azurite() as azurite:
        base, _ = run(azurite, n, pools(None))
        other, _ = run(azurite, n, pools("payments.refund", slots=2, circuit=True))
        slots, _ = run(azurite, n, pools(AGENT, slots=2))
        total, held = run(azurite, n, pools(AGENT, circuit=True), open_for=args.open_seconds)
    per_minute = held / n / (args.open_seconds / 60)
    print(f"{n} one-step workflows per scenario; requests counted at the SDK (idle receives excluded)")
    print(f"1. no limits:                     {base:>6} requests  {base / n:6.2f} per step")
    print(f"2. limits for another agent only: {other:>6} requests  {other / n:6.2f} per step")
    print(f"3. max_in_flight 2:               {slots:>6} requests  {slots / n:6.2f} per step")
    print(
        f"4. circuit held open {args.open_seconds:g} s:       {held:>6} requests while open; {total} in all"
    )
    print()
    print(f"   2/1 = {other / base:.2f} (must be 1.00)")
    print(f"   3/1 = {slots / base:.2f} (slots, waiting polls, releases with {n} steps on 2 slots)")
    print(
        f"   4: {per_minute:.1f} requests per waiting step per minute (at most 6): parked, asking again "
        f"after {PARK_SECONDS:g} s or when woken, not every wait_poll_seconds ({POLL_SECONDS} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
