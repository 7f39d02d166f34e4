"""A reply that finds its instance's scheduler gone makes the instance due now (docs/supervisor.md,
"A dead scheduler found by a reply"): one ETag-guarded write of the record, so the watchdog's next
tick resumes or compensates it instead of waiting for the promise. Only a Running instance the
scheduler owns, not already due, whose own orchestration is the one found gone.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from workflow_core import clock
from workflow_core.ledger.errors import InstanceConflict, InstanceNotFound
from workflow_core.ledger.instance import InstanceRecord, InstanceStatus

# Orchestration runtime statuses in which the orchestration still reacts (to its timers and to raised
# events); anything else (Completed, Failed, Terminated, Canceled, not found) is gone.
ALIVE_STATUSES = frozenset({"Running", "Pending", "ContinuedAsNew", "Suspended"})
# DurableOrchestrationClient.raise_event raises a bare Exception for these HTTP answers
# (azure-functions-durable 1.x): 410 "Instance with ID <id> is gone: either completed or failed",
# 404 "No instance with ID <id> found.".
_GONE = re.compile(r"^(Instance with ID .* is gone|No instance with ID .* found)", re.DOTALL)
# A promise due within this much is due already: two writers' clocks a little apart do not both write.
DUE_SLACK = timedelta(seconds=1)
SCHEDULER_OWNER = "scheduler"
REASON_PREFIX = "scheduler gone"  # how the record's audit row begins


def is_instance_gone(exc: BaseException) -> bool:
    """Did ``raise_event`` fail because the orchestration does not exist or has finished?"""
    return _GONE.match(str(exc)) is not None


def is_alive(status: Any) -> bool:
    """Does a ``get_status`` answer (a ``DurableOrchestrationStatus``; its ``runtime_status`` is None
    for no such instance) say the orchestration still runs?"""
    value = getattr(status, "runtime_status", None)
    return str(getattr(value, "value", value)) in ALIVE_STATUSES


def may_bring_forward(record: InstanceRecord | None, orchestration_id: str, now: datetime) -> bool:
    """Would a gone ``orchestration_id`` make ``record`` (as read) due now?"""
    return (
        record is not None
        and record.status is InstanceStatus.RUNNING
        and record.owner == SCHEDULER_OWNER
        and (record.orchestration_id or record.instance_id) == orchestration_id
        and record.scheduler_deadline is not None
        and record.scheduler_deadline > now + DUE_SLACK
    )


def bring_forward(
    ledger: Any, record: InstanceRecord | None, orchestration_id: str, *, actor: str, why: str
) -> InstanceRecord | None:
    """Make ``record`` due now because ``orchestration_id`` is gone (``why``: how that was learnt);
    the record as written, or None when it was not (not due for it, or changed since it was read)."""
    now = clock.utcnow()
    if record is None or not may_bring_forward(record, orchestration_id, now):
        return None
    assert record.scheduler_deadline is not None
    ahead = (record.scheduler_deadline - now).total_seconds()
    reason = (
        f"{REASON_PREFIX}: orchestration {orchestration_id} is not running ({why}); the scheduler's promise "
        f"({ahead:.0f}s ahead) brought forward to now, for the watchdog's next tick"
    )
    try:
        return ledger.update_instance(record, actor=actor, reason=reason, scheduler_deadline=now)
    except (InstanceConflict, InstanceNotFound):  # written since it was read: that write decides
        return None
