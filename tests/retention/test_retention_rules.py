"""Who retention takes: finished, unflagged instances past their workflow's retention period, at most
a batch per tick; a workflow's own ``retention_days`` wins over RETENTION_DAYS."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from supervisor.maintenance.retention import Retention
from workflow_core import clock
from workflow_core.ledger import InstanceStatus
from workflow_core.workflows import parse_workflow

IS = InstanceStatus
T0 = datetime(2030, 1, 1, tzinfo=UTC)


def done(ledger, instance_id: str, workflow: str, at: datetime) -> None:
    with clock.use_clock(lambda: at):
        record = ledger.create_instance(
            instance_id,
            workflow,
            actor="t",
            input_json="{}",
            scheduler_deadline=at + timedelta(minutes=5),
            version=f"{workflow}@t",
        )
        ledger.transition_instance(record, IS.SUCCEEDED, actor="t")


def test_a_workflows_own_retention_wins_and_batches_are_bounded(ledger):
    done(ledger, "short-1", "short-lived", T0)
    done(ledger, "long-1", "kept-long", T0)
    for n in range(3):
        done(ledger, f"default-{n}", "provision-tenant", T0 + timedelta(seconds=n))
    retention = Retention(
        ledger, retention_days=30, per_workflow={"short-lived": 7, "kept-long": 365}, batch_size=2
    )
    now = T0 + timedelta(days=10)  # past 7 days, not past 30 or 365
    report = asyncio.run(retention.run(now))
    assert report.purged == ["short-1"]
    now = T0 + timedelta(days=31)
    first = asyncio.run(retention.run(now))
    second = asyncio.run(retention.run(now))
    assert len(first.purged) == 2 and len(second.purged) == 1  # bounded per tick, the rest next tick
    assert sorted(first.purged + second.purged) == ["default-0", "default-1", "default-2"]
    assert ledger.find_instance("long-1").status is IS.SUCCEEDED


def test_retention_days_is_a_definition_field_outside_the_version():
    from workflow_core.workflows import version_of

    text = """
name: tiny-flow
steps:
  - id: only
    agent: echo.say
    deadline_seconds: 60
"""
    plain = parse_workflow(text)
    kept = parse_workflow(text + "retention_days: 90\n")
    assert kept.retention_days == 90 and plain.retention_days is None
    assert version_of(kept) == version_of(plain)
    with pytest.raises(Exception, match="retention_days"):
        parse_workflow(text + "retention_days: 0\n")


def test_a_purge_forgets_the_instances_idempotency_keys_api_wide(ledger):
    from workflow_core.ledger.idempotency import (
        KEY_INDEX_PARTITION,
        IdempotencyKeys,
        key_index_row,
    )

    done(ledger, "keyed-1", "provision-tenant", T0)
    done(ledger, "kept-1", "provision-tenant", T0 + timedelta(days=40))
    assert IdempotencyKeys(ledger).claim_or_replay("keyed-1", "key-a", "POST /a", "op") is None
    assert IdempotencyKeys(ledger).claim_or_replay("kept-1", "key-b", "POST /b", "op") is None
    unanswered = asyncio.run(Retention(ledger, retention_days=30).run(T0 + timedelta(days=31)))
    assert unanswered.purged == []  # an operator action in flight (no answer yet) keeps it
    IdempotencyKeys(ledger).record_answer("keyed-1", "key-a", 200, {})
    report = asyncio.run(Retention(ledger, retention_days=30, batch_size=10).run(T0 + timedelta(days=31)))
    assert report.purged == ["keyed-1"]
    keys = {e["RowKey"] for e in ledger._index.query_entities(f"PartitionKey eq '{KEY_INDEX_PARTITION}'")}
    assert keys == {key_index_row("key-b")}  # the purged instance's key row went, the live one's stayed
    assert (
        IdempotencyKeys(ledger).claim_or_replay("kept-1", "key-a", "POST /c", "op") is None
    )  # the key is free again


def test_an_instance_an_operator_compensates_long_after_it_succeeded_is_not_purged(ledger):
    from supervisor import operator
    from workflow_core.ledger import NewStep, StepStatus

    S = StepStatus
    with clock.use_clock(lambda: T0):
        ledger.create_instance_with_steps(
            "refund-1",
            "provision-tenant",
            actor="t",
            input_json="{}",
            scheduler_deadline=T0 + timedelta(minutes=5),
            version="provision-tenant@t",
            steps=[NewStep(step_id="charge", step_name="charge", agent="pay.charge")],
        )
        step = ledger.get("refund-1", "charge")
        step = ledger.transition(step, S.DISPATCHED, actor="s", deadline=T0 + timedelta(minutes=5), attempt=1)
        step = ledger.transition(step, S.RUNNING, actor="w", deadline=T0 + timedelta(minutes=5))
        ledger.transition(step, S.SUCCEEDED, actor="w")
        ledger.transition_instance(ledger.get_instance("refund-1"), IS.SUCCEEDED, actor="s")
    now = T0 + timedelta(days=40)
    with clock.use_clock(lambda: now):
        operator.request_compensation(ledger, "refund-1", "charge", user="ana", reason="refund")
    report = asyncio.run(Retention(ledger, retention_days=30).run(now))
    assert report.marked == report.purged == []  # live: its step is Compensating
    assert ledger.get_instance("refund-1").status is IS.SUCCEEDED
    assert ledger.get("refund-1", "charge").status is S.COMPENSATING

    with clock.use_clock(lambda: now):
        ledger.transition(ledger.get("refund-1", "charge"), S.COMPENSATED, actor="compensator")
    assert asyncio.run(Retention(ledger, retention_days=30).run(now)).purged == ["refund-1"]
    assert ledger.find_instance("refund-1") is None and ledger.instance_rows("refund-1") == []
