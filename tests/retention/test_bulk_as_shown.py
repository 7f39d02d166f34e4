"""Bulk operations do what was shown (real Azurite): the dry run and the act agree, an instance that
stopped matching is recorded as such and left alone, an instance that started matching after the
confirmation is never swept up, canary runs are never listed, and two runner processes racing on
one operation (as the timer and the request) act on each instance once and report only their own
work, and an instance another operator's process moves meanwhile is left to that move."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from datetime import UTC, datetime, timedelta

from supervisor import operator
from supervisor.maintenance import bulk
from workflow_core import clock
from workflow_core.ledger import InstanceStatus, NewStep, StepLedger, StepStatus

S, IS = StepStatus, InstanceStatus
T0 = datetime(2030, 1, 1, tzinfo=UTC)


def instance(ledger: StepLedger, iid: str, step: StepStatus, *, workflow: str = "provision-tenant") -> str:
    """An instance whose one step is Failed (``step`` Failed) or Succeeded (and the instance too)."""
    with clock.use_clock(lambda: T0):
        record = ledger.create_instance_with_steps(
            iid,
            workflow,
            actor="test",
            input_json="{}",
            scheduler_deadline=T0 + timedelta(hours=1),
            version=f"{workflow}@test",
            steps=[NewStep(step_id="call", step_name="call", agent="api.call")],
        )[0]
        row = ledger.get(iid, "call")
        row = ledger.transition(row, S.DISPATCHED, actor="s", deadline=T0 + timedelta(hours=1), attempt=1)
        if step is S.FAILED:
            ledger.transition(row, S.FAILED, actor="w", deadline=T0 + timedelta(hours=1), last_error="503")
            ledger.transition_instance(
                record, IS.FAILED, actor="s", needs_attention=True, attention_reason="x"
            )
        else:
            row = ledger.transition(row, S.RUNNING, actor="w", deadline=T0 + timedelta(hours=1))
            ledger.transition(row, S.SUCCEEDED, actor="w")
            ledger.transition_instance(ledger.get_instance(iid), IS.SUCCEEDED, actor="s")
    return iid


def test_the_dry_run_shows_what_the_act_does_and_why_it_skips(ledger):
    instance(ledger, "ok-1", S.FAILED)
    instance(ledger, "done-1", S.SUCCEEDED)
    flt = bulk.BulkFilter(workflow="provision-tenant")
    shown = bulk.preview(ledger, "retry", flt)
    assert shown["wouldAct"] == ["ok-1"]
    assert [s["instanceId"] for s in shown["wouldSkip"]] == ["done-1"] and "no step" in shown["wouldSkip"][0][
        "why"
    ]
    store = bulk.BulkStore(ledger)
    op = store.create("retry", flt, reason="back", actor="operator:a")
    progress = store.progress(asyncio.run(bulk.run(store, op, rate_per_second=0)))
    assert progress["acted"] == shown["wouldAct"]
    assert [(s["instanceId"], s["why"]) for s in progress["skipped"]] == [
        (s["instanceId"], s["why"]) for s in shown["wouldSkip"]
    ]


def test_an_instance_that_stopped_matching_is_recorded_and_left_alone(ledger):
    instance(ledger, "moved-1", S.FAILED)
    store = bulk.BulkStore(ledger)
    op = store.create(
        "cancel", bulk.BulkFilter(status=IS.FAILED), reason="give up", actor="operator:a", matched=["moved-1"]
    )
    # another operator resumes it after the bulk cancel over `status: Failed` was confirmed
    operator.resume_instance(ledger, "moved-1", user="bo", reason="retrying by hand")
    progress = store.progress(asyncio.run(bulk.run(store, op, rate_per_second=0)))
    assert progress["acted"] == []
    (row,) = progress["noLongerMatches"]
    assert row["instanceId"] == "moved-1" and "it is Running" in row["why"]
    assert ledger.get_instance("moved-1").status is IS.RUNNING  # never moved to Compensating


def test_an_instance_that_starts_matching_after_the_confirmation_is_not_swept_up(ledger):
    instance(ledger, "early-1", S.FAILED)
    store = bulk.BulkStore(ledger)
    op = store.create("retry", bulk.BulkFilter(status=IS.FAILED), reason="back", actor="operator:a")
    asyncio.run(bulk.run(store, op, rate_per_second=0, max_instances=0))  # the request froze it
    assert store.get(op.bulk_id).frozen
    instance(ledger, "late-1", S.FAILED)  # fails after the operator confirmed
    progress = store.progress(asyncio.run(bulk.run(store, store.get(op.bulk_id), rate_per_second=0)))
    assert progress["acted"] == ["early-1"] and progress["matched"] == 1
    assert ledger.get("late-1", "call").status is S.FAILED


def test_canary_runs_are_never_listed(ledger):
    instance(ledger, "canary-1", S.FAILED, workflow="sas-canary")
    instance(ledger, "real-1", S.FAILED)
    assert bulk.preview(ledger, "stop", bulk.BulkFilter(status=IS.FAILED))["wouldAct"] == ["real-1"]
    store = bulk.BulkStore(ledger)
    op = store.create("stop", bulk.BulkFilter(status=IS.FAILED), reason="outage", actor="operator:a")
    assert store.progress(asyncio.run(bulk.run(store, op, rate_per_second=0)))["acted"] == ["real-1"]
    assert ledger.get_instance("canary-1").status is IS.FAILED


# ---- two OS processes, as the timer and the request (or a second operator) would be ----------------


def _process(role: str, connection: str, tables: tuple[str, str], bulk_id: str, ids: list[str], barrier, out):
    """One process: ``resume`` resumes ``ids`` one by one (last first) as another operator would;
    any other role runs the operation as that runner (``bulk.run``), with the instances it acted on
    recorded as they are acted on (the runner's own count, to check the progress against)."""
    own = StepLedger.from_connection_string(connection, *tables)  # its own clients
    done: list[str] = []
    real = bulk.act_on

    def act_on(ledger: StepLedger, op: bulk.BulkOperation, iid: str) -> tuple[str, str, bool]:
        outcome = real(ledger, op, iid)
        if outcome[0] == bulk.ACTED:
            done.append(iid)
        return outcome

    bulk.act_on = act_on
    try:
        store = bulk.BulkStore(own)
        op = store.get(bulk_id)
        barrier.wait()
        if role == "resume":
            for iid in reversed(ids):
                try:
                    operator.resume_instance(own, iid, user="bo", reason="retrying by hand")
                    done.append(iid)
                except operator.OperatorError:
                    pass  # cancelled by the bulk operation first: no longer Failed
        else:
            asyncio.run(bulk.run(store, op, runner=role, rate_per_second=0))
        out.put({"role": role, "pid": os.getpid(), "done": done})
    except BaseException as exc:  # reported to the test, not lost in the child's stderr
        out.put({"role": role, "pid": os.getpid(), "crash": repr(exc)})
    finally:
        own.close()


def race(
    ledger: StepLedger, azurite, bulk_id: str, roles: tuple[str, str], ids: list[str]
) -> dict[str, list]:
    """Run ``roles`` as two spawned OS processes started together; what each one did, by role."""
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(2, timeout=120), ctx.Queue()
    tables = (ledger.ledger_table_name, ledger.index_table_name)
    processes = [
        ctx.Process(
            target=_process, args=(role, azurite.connection_string, tables, bulk_id, ids, barrier, out)
        )
        for role in roles
    ]
    for p in processes:
        p.start()
    reports = [out.get(timeout=300) for _ in processes]
    for p in processes:
        p.join(30)
    assert [r.get("crash") for r in reports] == [None, None]
    assert len({r["pid"] for r in reports} | {os.getpid()}) == 3
    return {r["role"]: r["done"] for r in reports}


def test_two_runner_processes_on_one_operation_act_once_each_and_report_only_their_own_work(azurite, ledger):
    ids = [instance(ledger, f"race-{n:03d}", S.FAILED) for n in range(24)]
    # not yet frozen: both runners list and write the snapshot at once, then act
    op = bulk.BulkStore(ledger).create("retry", bulk.BulkFilter(), reason="back", actor="operator:a")
    did = race(ledger, azurite, op.bulk_id, ("timer", "request"), ids)

    store = bulk.BulkStore(ledger)
    progress = store.progress(store.get(op.bulk_id))
    assert progress["done"] and progress["matched"] == len(ids) and sorted(progress["acted"]) == ids
    # nothing reported as skipped, no longer matching or failed: neither runner reports the other's work
    assert progress["skipped"] == progress["noLongerMatches"] == progress["failed"] == []
    # each instance acted on by one runner, and its progress row names that one
    assert did["timer"] and did["request"]  # both runners did act: they raced
    assert sorted(did["timer"] + did["request"]) == ids
    for role in ("timer", "request"):
        assert {progress["actedBy"][iid].split("-")[0] for iid in did[role]} == {role}
    for iid in ids:
        moves = [a for a in ledger.audit_trail(iid) if f"[bulk {op.bulk_id}]" in (a.reason or "")]
        assert len(moves) == 1 and ledger.get(iid, "call").status is S.RETRYING


def test_an_instance_resumed_by_another_process_during_the_operation_is_not_acted_on(azurite, ledger):
    """A bulk cancel over ``status: Failed`` in one process, another operator resuming the same
    instances (last first) in another: each instance is either cancelled or resumed, never both."""
    ids = [instance(ledger, f"both-{n:03d}", S.FAILED) for n in range(24)]
    store = bulk.BulkStore(ledger)
    op = store.create(
        "cancel", bulk.BulkFilter(status=IS.FAILED), reason="give up", actor="operator:a", matched=ids
    )
    did = race(ledger, azurite, op.bulk_id, ("timer", "resume"), ids)

    progress = store.progress(store.get(op.bulk_id))
    assert progress["done"] and progress["skipped"] == progress["failed"] == []
    cancelled, resumed = set(did["timer"]), set(did["resume"])
    assert cancelled and resumed and not cancelled & resumed and cancelled | resumed == set(ids)
    assert set(progress["acted"]) == cancelled
    assert {row["instanceId"] for row in progress["noLongerMatches"]} == resumed
    assert all("it is Running" in row["why"] for row in progress["noLongerMatches"])
    for iid in ids:
        trail = ledger.audit_trail(iid)
        cancels = [a for a in trail if f"[bulk {op.bulk_id}]" in (a.reason or "")]
        resumes = [a for a in trail if "retrying by hand" in (a.reason or "")]
        assert len(cancels) + len(resumes) == 1  # one of the two moves, never both
        want = IS.RUNNING if iid in resumed else IS.COMPENSATING
        assert ledger.get_instance(iid).status is want
