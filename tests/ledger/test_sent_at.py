"""When a step's message went out, as the ledger row dates it (the send itself is not recorded)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from workflow_core.ledger import StepRecord, StepStatus

T0 = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)


def _row(**fields) -> StepRecord:
    return StepRecord(
        instance_id="inst-metrics",
        step_id="create_storage",
        workflow_name="provision-tenant",
        step_name="create_storage",
        sequence=0,
        agent="storage.create",
        status=StepStatus.DISPATCHED,
        **fields,
    )


def test_the_dispatched_write_dates_the_send_until_the_watchdog_resends():
    assert _row(updated_at=T0).sent_at() == T0
    resent = T0 + timedelta(minutes=3)
    assert _row(updated_at=T0, resent_at=resent).sent_at() == resent
    # the re-send's own write comes a moment after the time it records: the later one counts
    later = _row(updated_at=resent + timedelta(milliseconds=5), resent_at=resent)
    assert later.sent_at() == resent + timedelta(milliseconds=5)
    assert _row().sent_at() is None
