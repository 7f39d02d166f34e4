"""Work for a message-only pool carries its input inline, never by blob reference (docs/agents.md,
"Write an agent in another language"): its agents cannot read blobs, so such a dispatch sends nothing
and records the attempt Failed, non-retryable (no retry makes the input smaller), answering ``settled``.
"""

from __future__ import annotations

from typing import Any

from activities.common import grace_deadline, retry_on_conflict
from activities.scheduler.inputs import ACTOR, S
from workflow_core.contracts import StepDispatch
from workflow_core.ledger import StepRecord
from workflow_core.ledger.model import COMP_DISPATCHED, COMP_FAILED
from workflow_core.payloads import INLINE_PAYLOAD_CHARS, is_reference
from workflow_core.runtime import Services
from workflow_core.workflows.loader import agent_pools


def needs_blob(value: Any) -> bool:
    """Is ``value``, or a member of it (a compensation's step input and output), a blob reference?"""
    return is_reference(value) or (isinstance(value, dict) and any(map(is_reference, value.values())))


def fail_blob_input(record: StepRecord, d: StepDispatch, services: Services) -> StepRecord | None:
    """The row with the attempt failed, when the dispatched agent is message-only and its input
    ``d.input`` (as stored) needs a blob; None when the message may be sent."""
    agent = (record.agent if d.kind == "work" else record.compensator) or ""
    pools = agent_pools()
    if not needs_blob(d.input) or not pools.is_message_only(pools.pool_of(agent)):
        return None
    error = (
        f"the {d.kind} input for agent {agent!r} is over {INLINE_PAYLOAD_CHARS:,} characters of JSON and "
        f"stored by blob reference, and its pool {pools.pool_of(agent)!r} is message-only: its agents "
        "cannot read blobs, so the message is not sent (work for a message-only pool is inline only)"
    )
    ledger, deadline = services.ledger, grace_deadline(services.settings.watchdog_grace_seconds)
    fields = {"actor": ACTOR, "reason": error, "last_error": error, "non_retryable": True}
    fields["deadline"] = deadline

    def decide(r: StepRecord) -> StepRecord:
        if d.kind == "work":
            if r.status is not S.DISPATCHED or r.attempt != d.attempt:
                return r
            return ledger.transition(r, S.FAILED, **fields)
        if r.status is not S.COMPENSATING or r.compensation_attempt != d.attempt:
            return r
        if r.compensation_status != COMP_DISPATCHED:
            return r
        return ledger.update(r, compensation_status=COMP_FAILED, **fields)

    read = lambda: ledger.get(record.instance_id, record.step_id)  # noqa: E731
    return retry_on_conflict(read, decide, what=f"refuse the blob input of {d.kind} {d.step_id}")
