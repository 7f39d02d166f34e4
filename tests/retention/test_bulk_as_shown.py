"""Bulk operations do what was shown (real Azurite): the dry run and the act agree, an instance that
stopped matching is recorded as such and left alone, an instance that started matching after the
confirmation is never swept up, canary runs are never listed, and two runners racing on one
operation act on each instance once and report only their own work."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta

from supervisor import bulk, operator
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


def test_two_runners_on_one_operation_act_once_each_and_report_only_their_own_work(azurite, ledger):
    ids = [instance(ledger, f"race-{n:03d}", S.FAILED) for n in range(40)]
    op = bulk.BulkStore(ledger).create("retry", bulk.BulkFilter(), reason="back", actor="operator:a")
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def runner(name: str) -> None:
        own = StepLedger.from_connection_string(
            azurite.connection_string, ledger.ledger_table_name, ledger.index_table_name
        )  # a process of its own: its own clients
        store = bulk.BulkStore(own)
        try:
            start.wait()
            asyncio.run(bulk.run(store, store.get(op.bulk_id), runner=name, rate_per_second=0))
        except BaseException as exc:
            errors.append(exc)
        finally:
            own.close()

    threads = [threading.Thread(target=runner, args=(name,)) for name in ("timer", "request")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == []
    store = bulk.BulkStore(ledger)
    progress = store.progress(store.get(op.bulk_id))
    assert progress["done"] and sorted(progress["acted"]) == ids
    assert progress["skipped"] == progress["noLongerMatches"] == progress["failed"] == []
    assert {runner.split("-")[0] for runner in progress["actedBy"].values()} <= {"timer", "request"}
    for iid in ids:
        moves = [a for a in ledger.audit_trail(iid) if f"[bulk {op.bulk_id}]" in (a.reason or "")]
        assert len(moves) == 1 and ledger.get(iid, "call").status is S.RETRYING
