"""Retention under random crashes (real Azurite): a purge never leaves an instance partially visible
as live, never deletes an unfinished or flagged one, and the archive holds every row it deleted."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from datetime import UTC, datetime, timedelta

import pytest
from azure.storage.blob import ContainerClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.maintenance.retention import Retention
from workflow_core import clock
from workflow_core.ledger import InstanceStatus, StepLedger
from workflow_core.ledger.families import INSTANCE_ROW

IS = InstanceStatus
T0 = datetime(2030, 1, 1, tzinfo=UTC)
LATER = T0 + timedelta(days=40)
# (status, flagged): what each made instance ends as
KINDS = [
    (IS.SUCCEEDED, False),
    (IS.COMPENSATED, False),
    (IS.CANCELLED, False),
    (IS.COMPENSATED, True),  # flagged: never purged
    (IS.RUNNING, False),  # unfinished: never purged
    (IS.FAILED, False),
]
_ids = itertools.count()


class Crash(Exception):
    pass


class Crashing:
    """A client whose ``budget``-th request raises, as if the process died there."""

    def __init__(self, inner, budget: list[int]) -> None:
        self._inner, self._budget = inner, budget

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def call(*args, **kwargs):
            self._budget[0] -= 1
            if self._budget[0] < 0:
                raise Crash(name)
            result = attr(*args, **kwargs)
            return Crashing(result, self._budget) if name == "get_blob_client" else result

        return call


@pytest.fixture
def archive(azurite, unique_name):
    container = ContainerClient.from_connection_string(azurite.connection_string, unique_name("arch"))
    container.create_container()
    yield container
    container.close()


def make(ledger: StepLedger, status: InstanceStatus, flagged: bool) -> str:
    instance_id = f"r{next(_ids):05d}"
    record = ledger.create_instance(
        instance_id,
        "provision-tenant",
        actor="test",
        input_json="{}",
        scheduler_deadline=T0 + timedelta(minutes=5),
        version="provision-tenant@test",
    )
    ledger.note(instance_id, "step-a", actor="test", action="note", reason="a row to purge")
    if status is IS.COMPENSATED:
        record = ledger.transition_instance(record, IS.COMPENSATING, actor="test", scheduler_deadline=T0)
    if status is not IS.RUNNING:
        changes = {"needs_attention": True, "attention_reason": "look"} if flagged else {}
        ledger.transition_instance(record, status, actor="test", **changes)
    return instance_id


def rows(ledger: StepLedger, instance_id: str) -> dict[str, dict]:
    found = ledger._steps.query_entities("PartitionKey eq @pk", parameters={"pk": instance_id})
    return {e["RowKey"]: dict(e) for e in found}


def archived(archive: ContainerClient, instance_id: str) -> set[str]:
    try:
        text = archive.get_blob_client(f"{instance_id}.jsonl").download_blob().readall().decode()
    except Exception:
        return set()
    return {json.loads(line).get("RowKey") for line in text.splitlines()} - {None}


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    kinds=st.lists(st.sampled_from(range(len(KINDS))), min_size=1, max_size=5),
    crashes=st.lists(st.integers(min_value=0, max_value=40), max_size=3),
    with_archive=st.booleans(),
)
def test_purge_under_random_crashes(ledger, archive, kinds, crashes, with_archive):
    with clock.use_clock(lambda: T0):
        made = {make(ledger, *KINDS[k]): KINDS[k] for k in kinds}
    before = {i: rows(ledger, i) for i in made}
    purged_calls: list[str] = []

    async def purge_history(orchestration_id: str) -> None:
        purged_calls.append(orchestration_id)

    def retention(budget: list[int] | None):
        led = ledger
        arch = archive if with_archive else None
        if budget is not None:
            led = StepLedger.__new__(StepLedger)
            led.__dict__.update(ledger.__dict__)
            led._steps, led._index = Crashing(ledger._steps, budget), Crashing(ledger._index, budget)
            arch = Crashing(archive, budget) if with_archive else None
        return Retention(led, batch_size=100, purge_history=purge_history, archive=arch)

    def check() -> None:
        for instance_id, (status, flagged) in made.items():
            now_rows = rows(ledger, instance_id)
            eligible = status in (IS.SUCCEEDED, IS.COMPENSATED, IS.CANCELLED) and not flagged
            if not eligible:
                assert now_rows == before[instance_id], "an unfinished or flagged instance was touched"
                continue
            record = now_rows.get(INSTANCE_ROW)
            if record is not None and record["InstanceStatus"] != IS.PURGING.value:
                assert now_rows == before[instance_id], "rows went while the instance still looked live"
            gone = set(before[instance_id]) - set(now_rows)
            if with_archive and gone:
                assert gone <= archived(archive, instance_id), "a deleted row is not in the archive"

    for budget in crashes:
        with contextlib.suppress(Crash):
            asyncio.run(retention([budget]).run(LATER))
        check()
    report = asyncio.run(retention(None).run(LATER))
    assert not report.failed
    check()
    for instance_id, (status, flagged) in made.items():
        eligible = status in (IS.SUCCEEDED, IS.COMPENSATED, IS.CANCELLED) and not flagged
        assert (rows(ledger, instance_id) == {}) is eligible
        if eligible:
            assert instance_id in purged_calls
            assert ledger.find_instance(instance_id) is None
            listed, _ = ledger.list_instances(limit=1000)
            assert instance_id not in {r.instance_id for r in listed}
            if with_archive:
                assert set(before[instance_id]) <= archived(archive, instance_id)
