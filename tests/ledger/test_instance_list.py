"""The operators' instance list: newest first, filters that combine, paging that never repeats or loses
an instance, and a listing row that is an index, never the truth."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from workflow_core import clock
from workflow_core.ledger import InstanceStatus, InvalidLedgerInput

T0 = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture
def fake_now(monkeypatch):
    """A settable clock, so each instance gets a distinct start time."""
    state = {"now": T0}
    monkeypatch.setattr(clock, "utcnow", lambda: state["now"])
    return state


def _create(ledger, fake_now, n: int, *, workflow: str = "provision-tenant", key: str | None = None):
    fake_now["now"] = T0 + timedelta(seconds=n)
    return ledger.create_instance(
        f"inst-{n:04d}",
        workflow,
        actor="test",
        input_json="{}",
        scheduler_deadline=fake_now["now"] + timedelta(minutes=5),
        business_key=key,
        version=f"{workflow}@test",
    )


def test_paging_over_250_instances_returns_each_exactly_once_newest_first(ledger, fake_now):
    for n in range(250):
        _create(ledger, fake_now, n)
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page, token = ledger.list_instances(limit=40, continuation=token)
        seen += [r.instance_id for r in page]
        pages += 1
        if token is None:
            break
        # an instance started between two pages sorts before the first page: it never shifts one
        if pages == 2:
            _create(ledger, fake_now, 999)
    assert len(seen) == len(set(seen)) == 250
    assert seen == [f"inst-{n:04d}" for n in reversed(range(250))]
    assert pages == 7


def test_filters_combine_and_are_checked_against_the_record(ledger, fake_now):
    for n in range(12):
        record = _create(
            ledger,
            fake_now,
            n,
            workflow="order-fulfilment" if n % 2 else "provision-tenant",
            key=f"t{n % 3}-x",
        )
        if n % 4 == 0:
            ledger.transition_instance(record, InstanceStatus.SUCCEEDED, actor="test")
    running_orders, _ = ledger.list_instances(status="Running", workflow="order-fulfilment")
    assert [r.instance_id for r in running_orders] == [f"inst-{n:04d}" for n in (11, 9, 7, 5, 3, 1)]
    keyed, _ = ledger.list_instances(business_key_prefix="t1", workflow="provision-tenant")
    assert [r.instance_id for r in keyed] == ["inst-0010", "inst-0004"]
    window, _ = ledger.list_instances(
        started_from=T0 + timedelta(seconds=3), started_to=T0 + timedelta(seconds=6)
    )
    assert [r.instance_id for r in window] == ["inst-0005", "inst-0004", "inst-0003"]
    done, _ = ledger.list_instances(status=InstanceStatus.SUCCEEDED)
    assert [r.instance_id for r in done] == ["inst-0008", "inst-0004", "inst-0000"]


def test_a_stale_listing_row_is_never_believed_and_is_repaired(ledger, fake_now):
    record = _create(ledger, fake_now, 1)
    # a crash between the record's write and the listing row's: the row still says Running
    settled = ledger.transition_instance(record, InstanceStatus.SUCCEEDED, actor="test")
    ledger.write_listing_row(record)
    running, _ = ledger.list_instances(status="Running")
    assert running == []  # the record says Succeeded
    succeeded, _ = ledger.list_instances(status="Succeeded")
    assert [r.instance_id for r in succeeded] == [settled.instance_id]  # the row was repaired


def test_bad_arguments_are_clear_errors(ledger):
    with pytest.raises(InvalidLedgerInput, match="limit must be between 1 and 1000"):
        ledger.list_instances(limit=0)
    with pytest.raises(InvalidLedgerInput, match="continuation token"):
        ledger.list_instances(continuation="not-a-token!")
    with pytest.raises(InvalidLedgerInput, match="unknown instance status"):
        ledger.list_instances(status="Sleeping")
