"""The operator's two ways to end a running instance: **stop** and **cancel**.

* stop: the instance record moves to ``Stopped`` (owner ``operator:<user>``, the reason in its audit
  row), flagged for attention, and only then is the orchestration terminated. ``Stopped`` is
  unsupervised, so the watchdog never resumes a stopped instance nor compensates it, and the ledger
  fences off a scheduler still running (no later step is dispatched); the done steps stay as they
  are, which is why the instance waits in the attention inbox: an operator's later cancel undoes them.
* cancel: the record moves to ``Compensating`` with its scheduler deadline now (audited), then the
  orchestration is terminated; the watchdog's next tick finds no compensation running and starts
  one, which undoes the done steps in reverse order. A stopped instance can be cancelled.

Both write the ledger (record + audit row, one transaction) *before* the caller terminates anything:
an orchestration is never ended without an audit row naming the actor and the reason, even when the
terminate itself or anything after it fails.
"""

from __future__ import annotations

from datetime import datetime

from supervisor.operator import OperatorError, actor_for, move_instance, required_reason
from workflow_core import clock
from workflow_core.ledger import StepLedger
from workflow_core.ledger.instance import InstanceRecord, InstanceStatus

# What each action moves the record to, from which statuses (the decision table of this module).
STOP_TABLE: dict[str, dict[InstanceStatus, InstanceStatus]] = {
    "stop": {
        InstanceStatus.RUNNING: InstanceStatus.STOPPED,
        InstanceStatus.FAILED: InstanceStatus.STOPPED,
    },
    "cancel": {
        InstanceStatus.RUNNING: InstanceStatus.COMPENSATING,
        InstanceStatus.FAILED: InstanceStatus.COMPENSATING,
        InstanceStatus.STOPPED: InstanceStatus.COMPENSATING,
    },
}


def end_instance(
    ledger: StepLedger,
    instance_id: str,
    action: str,
    *,
    reason: str,
    user: str | None = None,
    actor: str | None = None,
    expected_status: str | None = None,
    now: datetime | None = None,
) -> InstanceRecord:
    """Mark the instance stopped or cancelled by ``actor`` for ``reason`` (record + audit row in one
    ETag-guarded write). The caller terminates the orchestration afterwards. ``expected_status``, when
    given, names the status the operator saw: a record that moved since raises :class:`OperatorError`
    saying what it is now."""
    table = STOP_TABLE[action]
    who = actor or actor_for(user or "")
    reason = required_reason(reason)
    when = now or clock.utcnow()

    def decide(record: InstanceRecord) -> tuple[InstanceStatus, dict]:
        if expected_status and record.status.value != expected_status:
            raise OperatorError(
                f"instance {instance_id!r} is {record.status.value} now, not {expected_status} as expected"
            )
        target = table.get(record.status)
        if target is None:
            allowed = ", ".join(s.value for s in table)
            done = "stopped" if action == "stop" else "cancelled"
            raise OperatorError(
                f"instance {instance_id!r} is {record.status.value}; only {allowed} instances can be {done}"
            )
        if target is InstanceStatus.STOPPED:  # its done steps stay: flagged until a cancel undoes them
            flag = f"stopped by {who}: {reason}; its done steps stay as they are until an operator cancels it"
            changes: dict = {"owner": who, "needs_attention": True, "attention_reason": flag}
        else:
            changes = {"owner": who, "needs_attention": False, "attention_reason": None}
            changes["scheduler_deadline"] = when
        return target, changes

    return move_instance(ledger, instance_id, actor=who, reason=f"operator {action}: {reason}", decide=decide)
