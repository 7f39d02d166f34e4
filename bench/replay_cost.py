"""What replaying the scheduler costs as workflows get long, and whether continue_as_new bounds it.

    python bench/replay_cost.py            # 10, 100, 500 steps; 100 and 500 also without checkpoints
    python bench/replay_cost.py --quick    # 10, 100, 500 steps; only 100 without checkpoints

Starts its own Azurite and runs synthetic workflows of 10, 100 and 500 steps (every step: one
agent call that succeeds at once) through the whole pattern in one process
(``devtools.harness``: the real orchestrator through the SDK's replay on the durable
test host's virtual clock, real activities, agents and queues). Every episode of the orchestrator
is timed (the SDK replaying the history, deciding the next actions) and the history it was given is
measured.

With the definitions' default ``history_checkpoint_every: 25`` the orchestrator continues as new
every 25 completed steps, so the history an episode replays stays bounded whatever the length of the
workflow; the comparison runs with ``history_checkpoint_every: 1000`` (never) show the growth that
continue_as_new prevents. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devtools.azurite import Azurite
from devtools.harness import PatternHarness
from devtools.logs import quiet_logging
from workflow_core.contracts import WORKFLOW_ORCHESTRATOR


def definition(name: str, steps: int, checkpoint_every: int) -> dict:
    return {
        "name": name,
        "description": f"{steps} quick steps (replay benchmark)",
        "history_checkpoint_every": checkpoint_every,
        "input": {"required": ["tenant_id"], "properties": {"tenant_id": {"type": "string"}}},
        "steps": [
            {
                "id": f"step{n:04d}",
                "agent": "dns.register",
                "input": {"tenant_id": "$input.tenant_id"},
                "deadline_seconds": 60,
                "retry": {"max_attempts": 1},
            }
            for n in range(steps)
        ],
    }


def run(azurite: Azurite, steps: int, checkpoint_every: int) -> dict:
    name = f"replay-{steps}-every-{checkpoint_every}"
    with PatternHarness(
        azurite, extra_workflows={name: definition(name, steps, checkpoint_every)}, watchdog_every=None
    ) as h:
        orchestrator = h.host.functions.orchestrators[WORKFLOW_ORCHESTRATOR]
        real_handler = orchestrator.handler
        episodes: list[tuple[int, float]] = []  # (history events replayed, seconds)

        def timed(context):
            history = len(json.loads(context.body)["history"])
            started = time.perf_counter()
            try:
                return real_handler(context)
            finally:
                episodes.append((history, time.perf_counter() - started))

        orchestrator.handler = timed
        wall = time.perf_counter()
        iid = h.start_workflow(name, {"tenant_id": "bench"})
        status = h.run_until_complete(iid)
        wall = time.perf_counter() - wall
        orchestrator.handler = real_handler
        if not isinstance(status.output, dict) or status.output.get("status") != "succeeded":
            raise RuntimeError(f"{name} did not succeed: {status.runtime_status} {status.output}")
    replay = [seconds for _, seconds in episodes]
    return {
        "steps": steps,
        "checkpoint": checkpoint_every,
        "generations": sum(1 for n, _ in episodes if n <= 2),  # each execution starts with an empty history
        "episodes": len(episodes),
        "max_history": max(n for n, _ in episodes),
        "median_ms": statistics.median(replay) * 1000,
        "max_ms": max(replay) * 1000,
        "total_replay_s": sum(replay),
        "wall_s": wall,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="skip the 500-step run without checkpoints")
    args = parser.parse_args(argv)
    quiet_logging()
    warnings.filterwarnings("ignore")
    plan = [(10, 25), (100, 25), (500, 25), (100, 1000)]
    plan += [] if args.quick else [(500, 1000)]
    header = (
        f"{'steps':>5}  {'continue_as_new':>15}  {'executions':>10}  {'episodes':>8}  {'max history':>11}  "
        f"{'median/episode':>14}  {'max/episode':>11}  {'replay total':>12}  {'wall':>7}"
    )
    with Azurite() as azurite:
        print(f"Azurite 127.0.0.1:{azurite.table_port}; virtual clock; storage-queue transport")
        print(header)
        for steps, every in plan:
            r = run(azurite, steps, every)
            checkpoint = f"every {r['checkpoint']}" if r["checkpoint"] < 1000 else "never"
            print(
                f"{r['steps']:>5}  {checkpoint:>15}  {r['generations']:>10}  {r['episodes']:>8}  "
                f"{r['max_history']:>11}  {r['median_ms']:>11.2f} ms  {r['max_ms']:>8.2f} ms  "
                f"{r['total_replay_s']:>10.2f} s  {r['wall_s']:>5.1f} s",
                flush=True,
            )
    print("max history: events an episode replays (bounded by continue_as_new when it is on)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
