"""Bulk retry over 500 instances after a simulated outage (real Azurite): killed mid-run, restarted
from its cursor, it acts on each instance exactly once and every audit trail names the operation."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from supervisor.maintenance import bulk
from workflow_core import clock
from workflow_core.ledger import InstanceStatus, NewStep, StepLedger, StepStatus
from workflow_core.ledger.bulk_rows import CLAIM_LEASE, CLAIMED, PENDING, BulkRows

S = StepStatus
T0 = datetime(2030, 1, 1, tzinfo=UTC)


class Killed(BaseException):
    """The process died (not an Exception: nothing in the runner catches it)."""


_THREAD_NOW = threading.local()  # each writing thread's virtual time (the process clock is global)


def failed_instances(
    ledger: StepLedger, ns: range | list[int], workflow: str = "provision-tenant"
) -> list[str]:
    """Instance ``out-<n>`` for each n, its one step Failed with an HTTP 503, stamped at T0 + n
    seconds on its thread's own virtual clock; written by eight threads (the client is thread-safe)."""

    def one(n: int) -> str:
        _THREAD_NOW.at = T0 + timedelta(seconds=n)
        instance_id = f"out-{n:04d}"
        ledger.create_instance_with_steps(
            instance_id,
            workflow,
            actor="test",
            input_json="{}",
            scheduler_deadline=T0 + timedelta(hours=1),
            version=f"{workflow}@test",
            steps=[NewStep(step_id="call-api", step_name="call-api", agent="api.call")],
        )
        step = ledger.get(instance_id, "call-api")
        deadline = T0 + timedelta(hours=1)
        step = ledger.transition(step, S.DISPATCHED, actor="scheduler", deadline=deadline, attempt=1)
        ledger.transition(step, S.FAILED, actor="worker", deadline=deadline, last_error="HTTP 503 outage")
        return instance_id

    with clock.use_clock(lambda: _THREAD_NOW.at), ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, ns))


def failed_instance(ledger: StepLedger, n: int, workflow: str = "provision-tenant") -> str:
    return failed_instances(ledger, [n], workflow)[0]


def assert_acted_once_each(ledger: StepLedger, ids: list[str], bulk_id: str) -> None:
    """Each instance's trail names the operation exactly once, and its step is retrying."""

    def moves(instance_id: str) -> tuple[list, StepStatus]:
        naming = [a for a in ledger.audit_trail(instance_id) if f"[bulk {bulk_id}]" in (a.reason or "")]
        return naming, ledger.get(instance_id, "call-api").status

    with ThreadPoolExecutor(8) as pool:
        for instance_id, (naming, status) in zip(ids, pool.map(moves, ids), strict=True):
            assert len(naming) == 1, instance_id
            assert naming[0].actor == "operator:ana" and naming[0].to_status == S.RETRYING.value
            assert status is S.RETRYING, instance_id


def settled(store: bulk.BulkStore, op: bulk.BulkOperation) -> int:
    return sum(r["Result"] not in (PENDING, CLAIMED) for r in store.rows.instance_rows(op.bulk_id))


async def after_the_lease(run):
    """Run a runner later than a dead runner's claims last (CLAIM_LEASE): it takes them over."""
    later = clock.utcnow() + CLAIM_LEASE + timedelta(minutes=1)
    with clock.use_clock(lambda: later):
        return await run


def test_bulk_retry_over_500_acts_once_each_across_a_kill(ledger, monkeypatch):
    ids = failed_instances(ledger, range(500))
    failed_instance(ledger, 900, workflow="other-flow")  # not matched by the filter
    store = bulk.BulkStore(ledger)
    flt = bulk.BulkFilter(workflow="provision-tenant", status=InstanceStatus.RUNNING.value)
    op = store.create("retry", flt, reason="downstream back after outage", actor="operator:ana")

    real_settle = BulkRows.settle
    calls = {"n": 0}

    def dying_settle(self, claimed, result, why=""):
        calls["n"] += 1
        if calls["n"] == 137:  # after acting on the 137th, before recording it: the worst moment
            raise Killed
        return real_settle(self, claimed, result, why)

    monkeypatch.setattr(BulkRows, "settle", dying_settle)
    with pytest.raises(Killed):
        asyncio.run(bulk.run(store, op, rate_per_second=0))
    monkeypatch.setattr(BulkRows, "settle", real_settle)

    # a new process, after the dead runner's claim ran out: reads the operation back, carries it on
    store2 = bulk.BulkStore(ledger)
    resumed = store2.get(op.bulk_id)
    assert resumed is not None and not resumed.done and resumed.frozen
    finished = asyncio.run(after_the_lease(bulk.run(store2, resumed, rate_per_second=0)))
    assert finished.done

    progress = store2.progress(finished)
    assert progress["counts"]["acted"] == 500
    assert progress["counts"]["failed"] == progress["counts"]["skipped"] == 0
    assert set(progress["acted"]) == set(ids)
    assert_acted_once_each(ledger, ids, op.bulk_id)
    assert ledger.get("out-0900", "call-api").status is S.FAILED


def test_dry_run_lists_and_changes_nothing(ledger):
    ids = failed_instances(ledger, range(3))
    before = {i: len(ledger.audit_trail(i)) for i in ids}
    shown = bulk.preview(ledger, "skip", bulk.BulkFilter(error_contains="503"))
    assert sorted(shown["wouldAct"]) == ids and shown["wouldSkip"] == []
    assert {i: len(ledger.audit_trail(i)) for i in ids} == before
    assert all(ledger.get(i, "call-api").status is S.FAILED for i in ids)
    assert list(ledger.table_client().query_entities("PartitionKey eq '~bulk'")) == []  # nothing written


def test_what_cannot_be_acted_on_is_skipped_with_why(ledger):
    failed_instance(ledger, 1)
    store = bulk.BulkStore(ledger)
    first = store.create("retry", bulk.BulkFilter(), reason="r", actor="operator:a")
    asyncio.run(bulk.run(store, first, rate_per_second=0))
    second = store.create("retry", bulk.BulkFilter(), reason="again", actor="operator:b")
    asyncio.run(bulk.run(store, second, rate_per_second=0))
    assert store.progress(first)["acted"] == ["out-0001"]
    (skipped,) = store.progress(second)["skipped"]
    assert skipped["instanceId"] == "out-0001" and "no step" in skipped["why"]


def test_an_unknown_action_or_no_reason_is_refused(ledger):
    store = bulk.BulkStore(ledger)
    with pytest.raises(bulk.operator.OperatorError, match="no bulk action"):
        store.create("delete-all", bulk.BulkFilter(), reason="r", actor="operator:a")
    with pytest.raises(bulk.operator.OperatorError, match="reason"):
        store.create("retry", bulk.BulkFilter(), reason="  ", actor="operator:a")


RUNNER = """
import asyncio, sys
from supervisor.maintenance import bulk
from workflow_core.ledger import StepLedger
conn, steps, idx, op_id = sys.argv[1:5]
ledger = StepLedger.from_connection_string(conn, steps, idx)
store = bulk.BulkStore(ledger)
asyncio.run(bulk.run(store, store.get(op_id), rate_per_second=0))
"""


def test_bulk_retry_survives_a_sigkill_of_the_process_running_it(ledger, azurite):
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    ids = failed_instances(ledger, range(500))
    store = bulk.BulkStore(ledger)
    op = store.create("retry", bulk.BulkFilter(), reason="after the outage", actor="operator:ana")
    root = Path(__file__).resolve().parents[2]
    args = [azurite.connection_string, ledger.ledger_table_name, ledger.index_table_name, op.bulk_id]
    env = {**os.environ, "PYTHONPATH": str(root)}
    process = subprocess.Popen([sys.executable, "-c", RUNNER, *args], cwd=root, env=env)
    try:
        deadline = time.monotonic() + 120
        while settled(store, op) < 120 and time.monotonic() < deadline:
            assert process.poll() is None, "the runner ended before it could be killed"
            time.sleep(0.2)  # each look reads all 500 outcome rows: a tighter loop starves the runner
        process.send_signal(signal.SIGKILL)  # mid-run, wherever it is
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    killed_at = settled(store, op)
    assert 120 <= killed_at < 500

    resumed = bulk.BulkStore(ledger).get(op.bulk_id)
    finished = asyncio.run(after_the_lease(bulk.run(store, resumed, rate_per_second=0)))
    assert finished.done and store.progress(finished)["counts"]["acted"] == 500
    assert_acted_once_each(ledger, ids, op.bulk_id)


def test_a_bulk_retry_costs_seven_table_requests_per_instance(azurite, unique_name):
    """Per instance (docs/capacity.md): its record read by the snapshot's listing, its claim, one read
    of its record and steps, the move (one transaction, the step's deadline row written and its old
    one deleted), its outcome. Its audit trail is read only when a dead runner's claim is taken over."""
    from collections import Counter

    from tests.helpers.request_counter import RequestCounter

    def run_over(n: int) -> Counter[str]:
        with RequestCounter() as counter:
            ledger = StepLedger.from_connection_string(
                azurite.connection_string, unique_name("s"), unique_name("i")
            )
            ledger.create_tables()
            failed_instances(ledger, range(n))
            store = bulk.BulkStore(ledger)
            op = store.create("retry", bulk.BulkFilter(), reason="r", actor="operator:a")
            with counter.measure() as made:
                assert asyncio.run(bulk.run(store, op, rate_per_second=0)).done
        return Counter(f"{r.service} {r.op}" for r in made)

    one, four = run_over(1), run_over(4)
    per_instance = {k: (four[k] - one[k]) / 3 for k in four | one}
    assert per_instance == {
        "table read": 1,
        "table update": 2,
        "table query": 1,
        "table batch": 1,
        "table insert": 1,
        "table delete": 1,
    }
