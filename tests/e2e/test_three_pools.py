"""One workflow whose steps live in three pools, each served elsewhere, end to end on Azurite:

* ``default``: ``storage.create``, served by the app (the harness's own worker, the only pool it hosts);
* ``remote``: ``runner.block``, served by a ``sas-agent`` process (the real runner, over this test's
  workflows directory), which is SIGKILLed mid-step and started again;
* ``mail``: ``email.send_welcome``, served by the Node.js message-only agent.

While the ``remote`` pool has no agent at all and a backlog, a workflow of the ``default`` pool only
runs in its normal time: the pools' queues are apart, so a dead pool delays nobody else."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import timedelta

import azure.durable_functions as df

from devtools.demo_pools import runner_argv as runner_argv_of
from devtools.harness import PatternHarness
from tests.agent_runner.test_runner_process import files
from tests.e2e.node_agent import EXAMPLE, require_node_modules
from tests.helpers.fault_matrix import storage_queue_only
from tests.helpers.runner import ROOT, Runner
from workflow_core.workflows import loader

POOLS = """pools:
  remote:
    agents: [runner.block]
  mail:
    agents: [email.send_welcome]
    message_only: true
"""
STRING = {"type": "string"}
THREE_POOLS = {
    "name": "three-pools",
    "input": {
        "required": ["tenant_id", "admin_email"],
        "properties": {"tenant_id": STRING, "admin_email": STRING},
    },
    "steps": [
        {
            "id": "create_storage",
            "agent": "storage.create",
            "input": {"tenant_id": "$input.tenant_id", "region": "westeurope", "sku": "Standard_LRS"},
            "deadline_seconds": 60,
        },
        {"id": "wait", "agent": "runner.block", "input": {}, "deadline_seconds": 300},
        {
            "id": "send_welcome",
            "agent": "email.send_welcome",
            "input": {"to": "$input.admin_email", "tenant_id": "$input.tenant_id"},
            "deadline_seconds": 60,
        },
    ],
}
DEFAULT_ONLY = {
    "name": "default-only",
    "input": {"required": ["tenant_id"], "properties": {"tenant_id": STRING}},
    "steps": [
        {
            "id": f"create_{n}",
            "agent": "storage.create",
            "input": {"tenant_id": "$input.tenant_id", "region": "westeurope", "sku": f"sku{n}"},
            "deadline_seconds": 60,
        }
        for n in range(3)
    ],
}


def timed_run(h: PatternHarness, workflow: str, workflow_input: dict) -> float:
    """Seconds from start to completion of one instance (a real clock)."""
    began = time.monotonic()
    iid = h.start_workflow(workflow, workflow_input)
    status = h.run_until_complete(iid, timeout=timedelta(seconds=60))
    assert status.runtime_status == df.OrchestrationRuntimeStatus.Completed, status.output
    return time.monotonic() - began


@storage_queue_only
def test_three_pools_one_killed_runner_and_no_pool_waits_for_another(azurite, tmp_path):
    require_node_modules()
    box, outbox = tmp_path / "box", tmp_path / "outbox"
    box.mkdir()
    served = {"pools": POOLS, "three-pools": THREE_POOLS, "default-only": DEFAULT_ONLY}
    with PatternHarness(
        azurite,
        clock="real",
        watchdog_every=timedelta(seconds=2),
        extra_workflows=served,
        hosted_pools=["default"],
    ) as h:
        env = {**os.environ, "RUNNER_TEST_DIR": str(box), "MAIL_OUTBOX": str(outbox), "AGENT_POOL": "mail"}
        runner_argv = runner_argv_of(
            loader.DEFAULT_DIRECTORY,
            "remote",
            "tests.agent_runner.blocking_agents",
            "--lock-seconds",
            "2",
            "--concurrency",
            "1",  # one step at a time: the others wait in the queue while it blocks
        )
        runners = [Runner(runner_argv, env, ROOT, tmp_path / "runner-0.log")]
        node_log = (tmp_path / "node.log").open("w")
        node = subprocess.Popen(["node", "agent.js"], cwd=EXAMPLE, env=env, stdout=node_log, stderr=node_log)
        try:
            normal = timed_run(h, "default-only", {"tenant_id": "warm-up"})
            normal = min(normal, timed_run(h, "default-only", {"tenant_id": "normal"}))

            tenants = [f"t{n}" for n in range(3)]
            iids = [
                h.start_workflow("three-pools", {"tenant_id": t, "admin_email": f"a@{t}.example"})
                for t in tenants
            ]
            h.run_until(lambda: len(files(box, "started")) == 1, timeout=timedelta(seconds=60))
            runners[0].signal(signal.SIGKILL)  # mid-step: its step is Running, its message locked
            assert runners[0].wait() == -signal.SIGKILL

            # pool remote has no agent now; wait until all three instances are queued up there
            def waiting() -> int:
                return sum(h.steps(i)["wait"].status.value in ("Dispatched", "Running") for i in iids)

            h.run_until(lambda: waiting() == 3, timeout=timedelta(seconds=60))
            stalled = timed_run(h, "default-only", {"tenant_id": "while-remote-is-down"})
            print(f"default-only: {normal:.2f} s normally, {stalled:.2f} s with pool remote down")
            assert waiting() == 3  # the backlog was still there, untouched, the whole time
            assert stalled < max(3 * normal, normal + 3), (stalled, normal)

            runners.append(Runner(runner_argv, env, ROOT, tmp_path / "runner-1.log"))
            (box / "release").touch()
            for iid in iids:
                status = h.run_until_complete(iid, timeout=timedelta(seconds=90))
                assert status.runtime_status == df.OrchestrationRuntimeStatus.Completed, status.output
                assert status.output["status"] == "succeeded", status.output
        finally:
            for runner in runners:
                runner.close()
            node.terminate()
            node.wait(timeout=10)

        # each effect once: the app's storage steps, the runner's step (the killed run made none),
        # the Node.js agent's e-mails
        assert h.double_effects() == {}
        assert len(files(box, "effect")) == 3 and len(files(box, "started")) == 4, os.listdir(box)
        assert len(list(outbox.iterdir())) == 3
        for iid in iids:
            steps = h.steps(iid)
            assert steps["wait"].attempt == 1  # redelivered to the restarted runner, not retried
            assert steps["send_welcome"].owner == "email.send_welcome"  # recorded for the Node.js agent
        assert "from " + f"{h.settings.work_queue}-mail" in (tmp_path / "node.log").read_text()
