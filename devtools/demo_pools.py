"""``./scripts/demo --pools``: an agent pool served by a ``sas-agent`` process that is killed mid-step and
started again, while the app's own pool keeps flowing.

Pool ``remote`` holds one agent, ``demo.remote_job`` (a few seconds of work, then its remote effect,
once per idempotency key); the app (the harness, on a real clock) hosts only ``default``. The runner
is SIGKILLed while the step is Running; with that pool dead, a ``provision-tenant`` of the default pool
runs to the end; a new runner then takes the step over from the queue (its message came back when
the dead runner's lock ran out), with one effect and no new attempt.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

from activities.worker.handlers.base import StepContext, agent

ROOT = Path(__file__).resolve().parents[1]
EFFECT_MADE = "demo.remote_job: remote effect made"
POOLS = "pools:\n  remote:\n    agents: [demo.remote_job]\n"
REMOTE_JOB = """name: remote-job
description: One step in the default pool, then one in pool remote.
input: {required: [tenant_id], properties: {tenant_id: {type: string}}}
steps:
  - {id: create_storage, agent: storage.create, deadline_seconds: 60,
     input: {tenant_id: $input.tenant_id, region: westeurope, sku: Standard_LRS}}
  - {id: remote_work, agent: demo.remote_job, input: {}, deadline_seconds: 120}
"""
# ``sas-agent`` over a workflows directory of its own (argv[1]): the one that declares the pools
LAUNCH_RUNNER = (
    "import sys; from pathlib import Path; from workflow_core.workflows import loader; "
    "loader.DEFAULT_DIRECTORY = Path(sys.argv.pop(1)); from agent_runner.cli import run; run()"
)


@agent("demo.remote_job")
def remote_job(ctx: StepContext) -> dict:
    time.sleep(float(os.environ.get("DEMO_REMOTE_JOB_SECONDS", "3")))
    result = {"step": ctx.step_id}
    if ctx.effects.apply("demo-remote", ctx.idempotency_key, result) is result:
        print(EFFECT_MADE, flush=True)  # into the runner's log: the demo counts them
    return result


def runner_argv(workflows: Path, pool: str, handlers: str, *options: str) -> list[str]:
    """``sas-agent --pool POOL --handlers HANDLERS OPTIONS`` on this interpreter, reading the pools of
    ``workflows`` (a directory other than the shipped one, as the harness's ``extra_workflows`` is)."""
    launch = [sys.executable, "-c", LAUNCH_RUNNER, str(workflows)]
    return [*launch, "--pool", pool, "--handlers", handlers, *options]


def main(out: TextIO = sys.stdout) -> int:
    from devtools.azurite import Azurite
    from devtools.harness import PatternHarness
    from workflow_core.workflows import loader

    began = time.monotonic()

    def say(text: str) -> None:
        out.write(f"  {time.monotonic() - began:5.1f} s  {text}\n")
        out.flush()

    out.write("Scheduler Agent Supervisor demo: agent pools, one served by a runner that gets killed\n")
    served = {"pools": POOLS, "remote-job": REMOTE_JOB}
    log = Path(tempfile.mkdtemp(prefix="demo-pools-")) / "sas-agent.log"
    options = {"clock": "real", "watchdog_every": timedelta(seconds=2), "hosted_pools": ["default"]}
    with Azurite() as azurite, PatternHarness(azurite, extra_workflows=served, **options) as h:
        argv = runner_argv(loader.DEFAULT_DIRECTORY, "remote", __name__, "--lock-seconds", "2")

        def start_runner() -> subprocess.Popen:
            with log.open("ab") as sink:
                return subprocess.Popen(argv, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)

        out.write(f"  pools: default (served by the app), remote (a sas-agent process, log {log})\n")
        out.write(f"  work queues: {h.settings.work_queue} and {h.settings.work_queue}-remote\n\n")
        runner = start_runner()
        try:
            iid = h.start_workflow("remote-job", {"tenant_id": "remote-co"})
            say(
                f"started remote-job {iid[:8]}: create_storage (pool default), then remote_work (pool remote)"
            )
            h.run_until(lambda: _status(h, iid) == "Running", timeout=timedelta(seconds=60))
            say(f"remote_work is Running in the runner ({h.ledger.get(iid, 'remote_work').owner})")
            runner.send_signal(signal.SIGKILL)
            runner.wait(10)
            say("runner KILLED (SIGKILL) mid-step: pool remote has no agent now")
            tenant = {"tenant_id": "contoso", "admin_email": "a@contoso.example"}
            other = h.start_workflow("provision-tenant", tenant)
            status = h.run_until_complete(other, timeout=timedelta(seconds=60))
            say(
                f"provision-tenant {other[:8]} (pool default) {status.output['status']} meanwhile; "
                f"remote_work is still {_status(h, iid)}"
            )
            runner = start_runner()
            say("runner started again")
            status = h.run_until_complete(iid, timeout=timedelta(seconds=90))
            row = h.ledger.get(iid, "remote_work")
            actors = [a.actor for a in h.ledger.audit_trail(iid) if a.step_id == "remote_work"]
            owners = list(dict.fromkeys(a for a in actors if a.startswith("worker:")))  # any process's
            say(f"remote-job {iid[:8]} {status.output['status']}: remote_work taken over from the queue")
        finally:
            runner.kill()
            runner.wait(10)
    made = log.read_text(errors="replace").count(EFFECT_MADE)
    out.write(
        f"\n  remote_work: attempt {row.attempt}, run by {len(owners)} workers ({', '.join(owners)}); "
        f"remote effect made {made} time(s)\n"
    )
    return 0


def _status(h: Any, iid: str) -> str:
    return h.ledger.get(iid, "remote_work").status.value
