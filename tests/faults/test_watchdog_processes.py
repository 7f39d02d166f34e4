"""Two watchdog *processes*, one dead workflow instance with two overdue steps: exactly one resume (or
one compensation start) per instance.

Each process runs ``supervisor.run_tick`` with the real ``DurableOrchestrationClient`` pointed at one
shared stub of the Durable extension's HTTP API (on loopback, in this test's process) and the real
ledger on Azurite. A barrier makes both processes read the overdue steps and the overdue instances
before either claims anything, the worst interleaving for a claim. The stub records every start.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote

from tests.api.durable_http_stub import DurableHttpStub
from tests.helpers.fault_matrix import CURRENT, ROWS, Row
from workflow_core.contracts import COMPENSATION_ORCHESTRATOR, WORKFLOW_ORCHESTRATOR
from workflow_core.ledger import NewStep, encode_json
from workflow_core.runtime import Services
from workflow_core.settings import load_settings
from workflow_core.workflows import get_workflow, version_of

INSTANCES = 20
WORKFLOW = "provision-tenant"
STEPS = [
    NewStep(
        step_id="create_storage",
        step_name="Create storage",
        agent="storage.create",
        compensator="storage.delete",
    ),
    NewStep(
        step_id="register_dns", step_name="Register DNS", agent="dns.register", compensator="dns.unregister"
    ),
    NewStep(step_id="send_welcome", step_name="Send welcome", agent="email.send_welcome"),
]


def _watchdog_process(env: dict[str, str], binding: str, barrier: Any, results: Any) -> None:
    """One watchdog process: one tick, both reads synchronised with the other process."""
    os.environ.update(env)
    from azure.durable_functions import DurableOrchestrationClient

    from supervisor import run_tick

    services = Services(load_settings(env))
    ledger = services.ledger
    real_overdue, real_overdue_instances = ledger.overdue, ledger.overdue_instances

    def overdue(now, limit=100):
        found = real_overdue(now, limit)
        barrier.wait()  # both have their overdue steps...
        return found

    def overdue_instances(now, limit=100):
        found = real_overdue_instances(now, limit)
        barrier.wait()  # ...and their overdue instances, before either claims one
        return found

    ledger.overdue, ledger.overdue_instances = overdue, overdue_instances
    try:
        report = asyncio.run(run_tick(DurableOrchestrationClient(binding), services, batch_size=100))
        results.put(
            {
                "pid": os.getpid(),
                "overdue": report.overdue,
                "overdue_instances": report.overdue_instances,
                "instance_actions": [(i, a) for i, _, a, _ in report.instance_decisions],
                "step_actions": [(d.instance_id, d.action) for d in report.decisions],
                "errors": report.errors,
            }
        )
    except BaseException as exc:  # reported to the test, not lost in the child's stderr
        results.put({"pid": os.getpid(), "crash": repr(exc)})
    finally:
        services.close()


def seed_dead_instances(env: dict[str, str], policy: str, instance_overdue: bool) -> list[str]:
    """20 instances whose scheduler died with create_storage and register_dns both out, both past
    their deadlines (by far more than the grace); the instance's own promise passed too, or not."""
    services = Services(load_settings(env))
    ledger = services.ledger
    now = datetime.now(UTC)
    past = now - timedelta(minutes=10)
    ids = [f"dead-{policy}-{n:02d}" for n in range(INSTANCES)]
    try:
        for iid in ids:
            ledger.create_instance(
                iid,
                WORKFLOW,
                actor="test",
                input_json=encode_json({"tenant_id": iid, "admin_email": "ops@contoso.example"}),
                scheduler_deadline=past if instance_overdue else now + timedelta(hours=1),
                on_scheduler_lost=policy,
                version=version_of(get_workflow(WORKFLOW)),
            )
            for record in ledger.create_steps(iid, WORKFLOW, STEPS, actor="test")[:2]:
                ledger.transition(
                    record, "Dispatched", actor="scheduler", attempt=1, deadline=past, owner="scheduler"
                )
    finally:
        services.close()
    return ids


def test_two_watchdog_processes_start_each_dead_instance_once(app_env):
    """20 instances resumed (found through the instance and through both steps) and 20 compensated
    (policy ``compensate``, their promise not passed: found through the two steps only), by two
    processes that both read everything before either claims: one start per instance."""
    resumed = seed_dead_instances(app_env, "resume", instance_overdue=True)
    compensated = seed_dead_instances(app_env, "compensate", instance_overdue=False)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2, timeout=60)
    results = ctx.Queue()
    with DurableHttpStub(known_orchestrators={WORKFLOW_ORCHESTRATOR, COMPENSATION_ORCHESTRATOR}) as stub:
        processes = [
            ctx.Process(target=_watchdog_process, args=(app_env, stub.binding_json(), barrier, results))
            for _ in range(2)
        ]
        for p in processes:
            p.start()
        reports = [results.get(timeout=90) for _ in processes]
        for p in processes:
            p.join(30)
        starts = stub.requests_to("POST", "/orchestrators/")
        started = dict(stub.instances)

    per_start = Counter("/".join(unquote(r.path).rsplit("/", 2)[1:]) for r in starts)
    recovered = {key.split("/", 1)[1].removesuffix(":compensation") for key in per_start}
    ROWS.append(
        Row(
            "two watchdog processes",
            f"2 spawned processes, {2 * INSTANCES} dead instances, all read first",
            len(set(resumed + compensated) - recovered),  # instances nobody resumed or compensated
            sum(n - 1 for n in per_start.values()),  # extra starts of the same orchestration
            "1 resume or 1 compensation start each" if set(per_start.values()) == {1} else "double starts",
        )
    )
    CURRENT["recorded"] = True
    assert [r.get("crash") for r in reports] == [None, None]
    assert len({r["pid"] for r in reports} | {os.getpid()}) == 3  # two processes besides this one
    assert [p.exitcode for p in processes] == [0, 0]
    assert [r["errors"] for r in reports] == [0, 0]
    # both read every overdue step (two per instance) and every instance whose promise passed
    assert [r["overdue"] for r in reports] == [2 * 2 * INSTANCES] * 2
    assert [r["overdue_instances"] for r in reports] == [INSTANCES] * 2

    expected = {
        **{f"{WORKFLOW_ORCHESTRATOR}/{iid}": 1 for iid in resumed},
        **{f"{COMPENSATION_ORCHESTRATOR}/{iid}:compensation": 1 for iid in compensated},
    }
    assert per_start == expected
    assert set(started) == {key.split("/", 1)[1] for key in expected}
    decided = Counter((i, a) for r in reports for i, a in r["instance_actions"] if a.endswith("_instance"))
    assert decided == {
        **{(iid, "resume_instance"): 1 for iid in resumed},
        **{(iid, "compensate_instance"): 1 for iid in compensated},
    }
    # the steps deferred to the instance: no step started a compensation of its own
    assert not [s for r in reports for s in r["step_actions"] if s[1] == "start_compensation"]

    services = Services(load_settings(app_env))
    try:
        for iid in resumed:
            record = services.ledger.get_instance(iid)
            assert (record.status.value, record.resume_count) == ("Running", 1)
        for iid in compensated:
            record = services.ledger.get_instance(iid)
            assert (record.status.value, record.resume_count) == ("Compensating", 0)
    finally:
        services.close()
