"""Two watchdog ticks at once over the same overdue steps: each step is acted on exactly once.

Each tick runs in its own thread with its own event loop (``asyncio.run``) and its own services:
its own ``StepLedger`` / ``TableClient`` and queue client on the same tables and queues, as two
Function App instances would. Only the ETag claim keeps them apart.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from supervisor.watchdog import run_tick
from tests.helpers.app import drain
from tests.helpers.durable import RecordingClient
from tests.helpers.rows import NOW, make_step
from workflow_core.contracts import compensation_instance_id
from workflow_core.ledger import StepStatus
from workflow_core.runtime import Services
from workflow_core.settings import load_settings

S = StepStatus
STEPS = 200


def test_two_concurrent_ticks_act_on_each_step_exactly_once(app_env, services, ledger):
    client = RecordingClient()
    kinds: dict[str, str] = {}

    def setup(i: int) -> None:
        instance = f"wf-race-{i:03d}"
        if i % 3 == 0:  # unclaimed past the grace, never re-sent -> re-sent
            make_step(ledger, instance, S.DISPATCHED)
            client.statuses[instance] = "Running"
            kinds[instance] = "resend"
        elif i % 3 == 1:  # orchestration missed its timer -> failed result raised
            make_step(ledger, instance, S.RUNNING)
            client.statuses[instance] = "Running"
            kinds[instance] = "fail_step"
        else:  # orchestration gone -> its instance record has the compensation started
            make_step(ledger, instance, S.RUNNING)
            client.statuses[instance] = "Failed"
            kinds[instance] = "compensate_instance"

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(setup, range(STEPS)))
    assert len(ledger.overdue(NOW, limit=1000)) == STEPS

    barrier = threading.Barrier(2)
    reports: dict[str, list] = {"a": [], "b": []}
    failures: list[BaseException] = []

    def watchdog(name: str) -> None:
        own = Services(load_settings(app_env))  # its own ledger, table client and queue client
        try:
            barrier.wait()
            while True:  # small batches, so the two ticks interleave a lot
                report = asyncio.run(
                    run_tick(client, own, now=NOW, tick_id=f"{name}{len(reports[name])}", batch_size=25)
                )
                reports[name].append(report)
                if report.overdue == 0:
                    return
        except BaseException as exc:  # surfaced below
            failures.append(exc)
        finally:
            own.close()

    threads = [threading.Thread(target=watchdog, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not failures, failures
    all_reports = reports["a"] + reports["b"]
    assert sum(r.errors for r in all_reports) == 0

    # Every step claimed exactly once, and both ticks did part of the work.
    assert sum(r.claimed for r in all_reports) == STEPS
    assert all(sum(r.claimed for r in reports[n]) > 0 for n in ("a", "b")), "the ticks did not overlap"
    # one decision per step: its own, or its instance record's (the step is timed out, unannounced)
    decisions = [(d.instance_id, d.action) for r in all_reports for d in r.decisions]
    decisions += [(i, action) for r in all_reports for i, _, action, _ in r.instance_decisions]
    assert Counter(i for i, _ in decisions) == Counter(list(kinds))
    assert dict(decisions) == kinds

    # External effects, counted where they landed: sends in the real queue, events and starts.
    sent = Counter(m.message_id for m in drain(services.transport, services.settings.work_queue))
    expected_sends = {f"work:{i}:create_storage:1" for i, k in kinds.items() if k == "resend"}
    assert set(sent) == expected_sends and set(sent.values()) == {1}
    events = Counter(instance for instance, _, _ in client.events)
    assert set(events) == {i for i, k in kinds.items() if k == "fail_step"} and set(events.values()) == {1}
    starts = Counter(instance for _, instance, _ in client.starts)
    expected_starts = {compensation_instance_id(i) for i, k in kinds.items() if k == "compensate_instance"}
    assert set(starts) == expected_starts and set(starts.values()) == {1}

    # And the ledger agrees: one supervisor claim per step (and per instance whose scheduler is
    # gone, of its record); nothing is overdue any more.
    for instance in list(kinds)[:20]:
        claims = Counter(
            a.step_id
            for a in ledger.audit_trail(instance)
            if a.actor.startswith("supervisor:") and a.reason.startswith("claimed")
        )
        expected = {"create_storage": 1, "*": 1} if kinds[instance] == "compensate_instance" else {}
        assert claims == {"create_storage": 1, **expected}, (instance, claims)
    assert ledger.overdue(NOW, limit=1000) == []
