"""What the ledger's audit trail says an agent under the conformance kit did wrong, in one line.

The scheduler and result handler already record the reason a reply changed nothing
(``agent-report-refused``, ``result-mismatch``, ``dead-letter``...): the kit reads it, so a check
fails as soon as its verdict is known, naming the fault rather than timing out. Each function takes
the audit entries of one instance (``LedgerAudit.audit_trail``) and returns the fault or None.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

REFUSED = "agent-report-refused"  # activities.replies.agent_reports.REFUSED
MISMATCH = "result-mismatch"
DEAD_LETTER = "dead-letter"
IN_FLIGHT = ("Dispatched", "Running")
# Faults that fail every check the same way: once one is found, the kit runs no further check.
PROTOCOL_FAULTS = (
    "wrong reply token",
    "stale reply token",
    "contradicting replies",
    "no reply",
    "heartbeats without an end",
    "crash",
)


def fault(trail: Sequence[Any], step_id: str) -> str | None:
    """The first fault the trail of ``step_id`` shows, named."""
    entries = [e for e in trail if e.step_id == step_id]
    accepted_attempts = {e.attempt for e in entries if e.action == "heartbeat" or e.to_status == "Running"}
    for e in entries:
        if e.action == REFUSED and "reply token" in e.reason:  # not a late heartbeat of a finished one
            earlier = e.attempt is not None and e.attempt > 1 and bool(accepted_attempts - {e.attempt})
            if earlier:
                why = f"a reply for attempt {e.attempt} carried another attempt's token"
                return f"stale reply token: {why} ({e.reason})"
            return f"wrong reply token: the attempt's reply_token was not echoed ({e.reason})"
        if e.action == MISMATCH:
            return f"contradicting replies: two outcomes for one attempt ({e.reason})"
        if e.action == DEAD_LETTER:
            return f"crash or dead-letter on every delivery: the work message was dead-lettered ({e.reason})"
    return None


def stalled(row: Any, trail: Sequence[Any], step_id: str, deadline_seconds: float) -> str | None:
    """A step still in flight past its own deadline: endless heartbeats, or no reply at all."""
    if row.status.value in ("Succeeded", "Failed", "Compensated", "Cancelled"):
        return None
    beats = sum(1 for e in trail if e.step_id == step_id and e.action == "heartbeat")
    if row.status.value in ("TimedOut", "Retrying") or row.attempt > 1:
        if beats:
            return f"heartbeats without an end: {beats} heartbeat(s), then no reply within the deadline"
        return f"no reply within the step's deadline ({deadline_seconds:g}s): the attempt timed out"
    return None


def overdue(row: Any, trail: Sequence[Any], step_id: str, seconds: float, now: datetime) -> bool:
    """The attempt is still in flight ``seconds`` after its dispatch as the ledger recorded it: no
    reply is coming. Counted from the dispatch, not from when a check began, so a start that a loaded
    machine delays is no fault of the agent's."""
    sent = [
        e.at
        for e in trail
        if e.step_id == step_id and e.to_status == "Dispatched" and e.attempt == row.attempt
    ]
    return row.status.value in IN_FLIGHT and bool(sent) and now > sent[-1] + timedelta(seconds=seconds)


def timeline(trail: Sequence[Any]) -> list[str]:
    """An audit trail, one line per entry: the kit's ``--timeline`` file."""
    return [
        f"{e.at.isoformat()} {e.step_id} {e.actor} {e.action} {e.from_status or ''}->{e.to_status or ''}"
        f" attempt={e.attempt} {e.reason}".rstrip()
        for e in trail
    ]
