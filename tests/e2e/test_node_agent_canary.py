"""The Node.js example agent (``examples/node-agent``, a real ``node`` process) serves the recovery
canary of the message-only pool it runs in (``sas-canary-echo``, through the conformance echo contract)
on Azurite, next to the app's scheduler, result handler and watchdog: the ``retry`` run (its probe's
first attempt fails, the retry succeeds) and the ``compensate`` run (the finish step fails for good, the
probe is compensated) both pass their verdicts, and every message it sends validates against the
published schemas (``permanent: true`` included)."""

from __future__ import annotations

import os
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest

from api.canary import start_canary_run
from devtools.harness import PatternHarness
from supervisor.canary import verify_runs
from tests.faults.conftest import storage_queue_only
from tests.transport.test_message_schemas import validator

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "node-agent"
EDGE = "pools:\n  edge:\n    message_only: true\n    canary: true\n"


@storage_queue_only
def test_the_node_agent_passes_the_retry_and_compensate_canaries_of_its_pool(azurite, tmp_path):
    if not (EXAMPLE / "node_modules" / "@azure" / "storage-queue").is_dir():
        pytest.fail("examples/node-agent has no node_modules: run `npm ci` there (./scripts/bootstrap does)")
    pools = {"extra_workflows": {"pools": EDGE}, "hosted_pools": ["default"]}
    with PatternHarness(azurite, clock="real", **pools) as h:  # no in-process worker reads pool edge
        reports: list[dict] = []
        handle = h._result_handler

        def recording(message):
            reports.append(message.body)
            return handle(message)

        h._result_handler = recording
        env = {
            **os.environ,
            "AGENT_TRANSPORT": "storage-queue",
            "AzureWebJobsStorage": azurite.connection_string,
            "WORK_QUEUE_NAME": h.settings.work_queue,
            "RESULT_QUEUE_NAME": h.settings.result_queue,
            "AGENT_POOL": "edge",
        }
        env.pop("CONFORMANCE_EFFECTS", None)
        log = (tmp_path / "agent.log").open("w")
        agent = subprocess.Popen(["node", "agent.js"], cwd=EXAMPLE, env=env, stdout=log, stderr=log)
        try:
            started = {
                s: h.host.run_async(start_canary_run(h.host.client, h.services, s, "edge"))
                for s in ("compensate", "retry")
            }
            for iid in started.values():
                h.run_until(
                    lambda iid=iid: (
                        h.ledger.get_instance(iid).status.value not in ("Running", "Compensating")
                    ),
                    timeout=timedelta(seconds=60),
                )
        finally:
            agent.terminate()
            agent.wait(timeout=10)
        verdicts = {v.scenario: v for v in verify_runs(h.ledger, watchdog_period=30, grace=30, now=h.now())}
        for scenario, iid in started.items():
            assert h.ledger.get_instance(iid).workflow == "sas-canary-echo"
            verdict = verdicts[scenario]
            assert verdict.instance_id == iid and verdict.outcome == "passed" and verdict.pool == "edge", (
                verdict
            )
        assert h.statuses(started["compensate"])["probe"] == "Compensated"
    failed = [(b["step_id"], b.get("permanent")) for b in reports if b.get("outcome") == "failed"]
    assert sorted(failed) == [("finish", True), ("probe", None)], reports
    undone = [b["output"] for b in reports if b.get("kind") == "compensate" and b.get("outcome")]
    assert undone == [{"undone": True}], reports
    for body in reports:
        schema = "heartbeat-message" if body.get("type") == "heartbeat" else "result-message"
        assert list(validator(schema).iter_errors(body)) == [], body
