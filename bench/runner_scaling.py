"""One agent pool served by one ``sas-agent`` process, then by two, on one Azurite: steps/s and the ratio.

    python bench/runner_scaling.py                  # 400 steps a run, 2 rounds
    python bench/runner_scaling.py --quick          # 150 steps, 1 round
    python bench/runner_scaling.py --steps 600 --rounds 3 --concurrency 8

Starts its own Azurite. Each run gets tables and queues of its own and N steps put in flight by the
real ``dispatch_step`` body (Dispatched in the ledger, the work message in the pool's queue: the
set-up of ``bench/dispatch_throughput.py``, not timed); then 1 or 2 runner processes start on that
queue (``--concurrency`` deliveries each; a no-op handler, so the figure is the runner's own work:
claim, record and reply on the ledger and the queues) and the clock runs from the moment every
runner says it is serving until N replies are in the result queue. Rounds alternate which run goes
first, so Azurite's drift hits both alike.

Printed: per run, steps/s, the CPU milliseconds per step the runners and Azurite spent, how many
cores they kept busy together and the machine's load average; then the medians, the two-runner /
one-runner ratio and the profile: near all cores busy, or a load average at the core count (other
work on the machine competes too), the cores stop a second process from doubling the rate (on a
2-core machine Azurite shares them); well below both, the runs wait on what both runners share, one
Azurite process.
Azurite keeps its files on ``/dev/shm`` where there is one (its queues write every message to disk).
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dispatch_throughput
from azure.storage.queue import QueueClient
from dispatch_throughput import bench_dispatch, prepare

from devtools.azurite import Azurite, private_env
from workflow_core.runtime import Services
from workflow_core.settings import load_settings

SAS_AGENT = str(Path(sys.executable).parent / "sas-agent")
NOOP_AGENTS = """from activities.worker.handlers.base import agent


@agent("dns.register")  # the agent bench/dispatch_throughput.py's steps name
def register(ctx):
    return {"ok": True}
"""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# One step per instance, as independent workflows would put them in flight: steps of one instance share
# its partition and its instance record, so fifty of them at once would measure their ETag races.
dispatch_throughput.STEPS_PER_INSTANCE = 1


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a live process (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def one_run(azurite: Azurite, steps: int, runners: int, concurrency: int, workdir: Path) -> dict[str, float]:
    env = {**os.environ, **private_env(azurite, "rs")}
    services = Services(load_settings(env))
    services.ledger  # noqa: B018 - creates the tables
    services.transport  # noqa: B018 - creates the queues
    bench_dispatch(services, prepare(services, steps))
    results = QueueClient.from_connection_string(azurite.connection_string, services.settings.result_queue)
    logs = [workdir / f"runner-{runners}-{n}.log" for n in range(runners)]
    argv = [SAS_AGENT, "--pool", "default", "--handlers", "noop_agents", "--concurrency", str(concurrency)]
    processes = []
    for log in logs:
        with log.open("wb") as out:
            processes.append(
                subprocess.Popen(argv, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT)
            )
    try:
        while not all("serving" in log.read_text(errors="replace") for log in logs):
            if any(p.poll() is not None for p in processes):
                raise SystemExit(f"a runner exited: {logs[0].read_text()[-2000:]}")
            time.sleep(0.02)
        started, azurite_cpu = time.perf_counter(), cpu_seconds(azurite.process.pid)
        runner_cpu = sum(cpu_seconds(p.pid) for p in processes)
        while results.get_queue_properties().approximate_message_count < steps:
            time.sleep(0.1)
        seconds = time.perf_counter() - started
        azurite_cpu = cpu_seconds(azurite.process.pid) - azurite_cpu
        runner_cpu = sum(cpu_seconds(p.pid) for p in processes) - runner_cpu
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(60)
        services.close()
    return {
        "rate": steps / seconds,
        "seconds": seconds,
        "runner_cpu": runner_cpu / steps * 1000,
        "azurite_cpu": azurite_cpu / steps * 1000,
        "busy": (runner_cpu + azurite_cpu) / seconds,
        "load": os.getloadavg()[0],  # the machine's, over the last minute: every process on it
    }


def in_memory() -> dict[str, Path]:
    """Azurite's files on a RAM disk where there is one: its queues write every message to disk."""
    shm = Path("/dev/shm")
    return {"location": Path(tempfile.mkdtemp(prefix="azurite-", dir=shm))} if shm.is_dir() else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=400, help="steps per run (default 400)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of (one runner, two runners)")
    parser.add_argument("--concurrency", type=int, default=8, help="--concurrency of each runner (default 8)")
    parser.add_argument("--quick", action="store_true", help="150 steps, 1 round")
    args = parser.parse_args(argv)
    steps, rounds = (150, 1) if args.quick else (args.steps, args.rounds)
    print(
        f"{steps} steps a run, {rounds} round(s), "
        f"concurrency {args.concurrency} per runner, {os.cpu_count()} cores"
    )
    print("runners   steps/s   wall s   runner CPU ms/step   Azurite CPU ms/step   cores busy   load avg")
    figures: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    with Azurite(**in_memory()) as azurite, tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "noop_agents.py").write_text(NOOP_AGENTS)
        for round_ in range(rounds):
            for runners in (1, 2) if round_ % 2 == 0 else (2, 1):
                run = one_run(azurite, steps, runners, args.concurrency, workdir)
                figures[runners].append(run)
                print(
                    f"{runners:>7}   {run['rate']:7.1f}   {run['seconds']:6.2f}   {run['runner_cpu']:18.1f}"
                    f"   {run['azurite_cpu']:19.1f}   {run['busy']:10.2f}   {run['load']:8.1f}",
                    flush=True,
                )
    one, two = (statistics.median(r["rate"] for r in figures[n]) for n in (1, 2))
    busy, load = (statistics.median(r[key] for r in figures[2]) for key in ("busy", "load"))
    print(f"median steps/s: one runner {one:.1f}, two runners {two:.1f}")
    print(f"ratio two / one: {two / one:.2f}x (goal >= 1.5x)")
    cores = os.cpu_count() or 1
    limit = (
        "the cores are the limit, this machine's other work included"
        if busy >= 0.85 * cores or load >= cores
        else "the runs wait on what both runners share, Azurite"
    )
    print(
        f"profile, two runners: runners and Azurite kept {busy:.2f} of {cores} cores busy, load {load:.1f}:"
    )
    print(f"  {limit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
