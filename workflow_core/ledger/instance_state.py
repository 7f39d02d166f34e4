"""The one instance state every actor consults: may this action be taken on this instance now?
(the table, and why the check and its write are one: docs/operations.md, "Who may act on an instance").
Ask :func:`refusal` with the record *and* its steps: an old finished instance whose step an operator
is compensating is live.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from azure.data.tables import UpdateMode

from workflow_core.ledger.entities import if_match
from workflow_core.ledger.families import INSTANCE_ROW
from workflow_core.ledger.instance import (
    PURGEABLE_INSTANCE_STATUSES,
    TERMINAL_INSTANCE_STATUSES,
    InstanceRecord,
    InstanceStatus,
)
from workflow_core.ledger.model import StepRecord, StepStatus

IS, S = InstanceStatus, StepStatus


class Action(StrEnum):
    RETRY = "retry"  # a step
    SKIP = "skip"  # a step
    COMPENSATE = "compensate"  # a step, or the instance through one of its steps
    RESUME = "resume"
    STOP = "stop"
    CANCEL = "cancel"
    PURGE = "purge"  # retention's mark (and sas purge)


# Where each instance action moves the record, from which statuses. Resume from Running: the scheduler
# is stranded (or the operator believes so): the watchdog resumes it now if its orchestration is gone;
# from Failed: the instance gave up, it runs again.
INSTANCE_MOVES: dict[Action, dict[InstanceStatus, InstanceStatus]] = {
    Action.RESUME: {IS.RUNNING: IS.RUNNING, IS.FAILED: IS.RUNNING},
    Action.STOP: {IS.RUNNING: IS.STOPPED, IS.FAILED: IS.STOPPED},
    Action.CANCEL: {IS.RUNNING: IS.COMPENSATING, IS.FAILED: IS.COMPENSATING, IS.STOPPED: IS.COMPENSATING},
}
# A step someone is working on, or will be at once: its instance is live whatever its record says.
LIVE_STEP_STATUSES = frozenset({S.DISPATCHED, S.RUNNING, S.RETRYING, S.COMPENSATING})
_DONE = {Action.RESUME: "resumed", Action.STOP: "stopped", Action.CANCEL: "cancelled"}


class InstanceRefused(Exception):
    """The action may not be taken on the instance now: ``code`` names why (a 409's problem code)."""

    def __init__(self, instance_id: str, action: str, code: str, reason: str) -> None:
        super().__init__(reason)
        self.instance_id, self.action, self.code, self.reason = instance_id, action, code, reason


def refusal(
    action: Action | str,
    record: InstanceRecord,
    steps: Sequence[StepRecord] = (),
    *,
    action_in_flight: bool = False,
) -> tuple[str, str] | None:
    """``(code, reason)`` when ``action`` may not be taken on the instance as read, else None."""
    action = Action(action)
    iid, status = record.instance_id, record.status
    if status is IS.PURGING:
        return "instance-purging", (
            f"instance {iid!r} is being purged (Purging): retention is deleting it, no action is taken on it"
        )
    if action is Action.PURGE:
        if status not in PURGEABLE_INSTANCE_STATUSES:
            return "not-finished", f"instance {iid!r} is {status.value}: only finished instances are purged"
        if record.needs_attention:
            return "flagged", f"instance {iid!r} is flagged for an operator: {record.attention_reason or ''}"
        live = [s for s in steps if s.status in LIVE_STEP_STATUSES]
        if live:
            return "live", (
                f"instance {iid!r} is live: step {live[0].step_id!r} is {live[0].status.value}"
                " (an operator's action on a finished instance keeps it until the action is done)"
            )
        if action_in_flight:
            return "action-in-flight", f"instance {iid!r} has an operator action in flight"
        return None
    moves = INSTANCE_MOVES.get(action)
    if moves is not None and status not in moves:
        allowed = ", ".join(s.value for s in moves)
        hint = ""
        if action is Action.RESUME and status is IS.COMPENSATION_FAILED:
            hint = " (retry its CompensationFailed step instead)"
        code = "already-finished" if status in TERMINAL_INSTANCE_STATUSES else "illegal-move"
        return code, (
            f"instance {iid!r} is {status.value}; only {allowed} instances can be {_DONE[action]}{hint}"
        )
    return None


def check(action: Action | str, record: InstanceRecord, steps: Sequence[StepRecord] = (), **kw) -> None:
    """:func:`refusal` as an exception (:class:`InstanceRefused`)."""
    refused = refusal(action, record, steps, **kw)
    if refused is not None:
        raise InstanceRefused(record.instance_id, str(action), *refused)


def instance_guard(record: InstanceRecord) -> tuple:
    """A transaction operation that only checks (If-Match) that the instance record is still the
    version ``record`` was read as, and bumps its ETag: a purge's mark read before it is void."""
    return unchanged(record.instance_id, INSTANCE_ROW, record.etag)


def unchanged(partition: str, row_key: str, etag: str | None) -> tuple:
    """An If-Match merge of nothing: the transaction fails if the row changed since ``etag``."""
    keys = {"PartitionKey": partition, "RowKey": row_key}
    return ("update", keys, {"mode": UpdateMode.MERGE, **if_match(etag)})


def decision_table() -> list[tuple[str, dict[str, str]]]:
    """(instance status, {action: "allowed" or the refusal's code}) for every status, as the docs
    show it; steps all settled and no action in flight (a live step or one in flight refuses purge)."""
    records = [InstanceRecord(instance_id="i", workflow="w", version="w@v", status=status) for status in IS]
    return [(r.status.value, {a.value: (refusal(a, r) or ("allowed",))[0] for a in Action}) for r in records]
