"""The scheduler's provisional successes, proven by its next write (``contracts.ResultBasis``).

A sequential work step's success reaches the scheduler unread: the worker recorded it with a *basis
row* named by the reply's digest, and the result handler raised the reply as it came. The next
ledger write the scheduler asks for (the next dispatch, or the settle) carries the basis and
deletes that row in its own entity-group transaction: the write lands only if the ledger recorded
exactly that reply. When the row is missing (a forged or altered reply; a re-run of a write that
already landed and deleted it), the activity reads the step instead and goes on only if the ledger
records that attempt as succeeded with that output; otherwise it writes nothing and answers
``basis-refused``, audited here as ``provisional-result-refused`` on the step.
"""

from __future__ import annotations

import logging

from activities.scheduler.inputs import ACTOR
from activities.verification import recorded_outcome
from workflow_core.contracts import ResultBasis
from workflow_core.ledger import StepLedger, StepNotFound
from workflow_core.ledger.known_rows import basis_row_key
from workflow_core.messages import payload_digest

log = logging.getLogger(__name__)

BASIS_REFUSED = "basis-refused"


def basis_rows(instance_id: str, basis: ResultBasis | None) -> list[tuple]:
    """The delete of the basis row, for the transaction of a write made on ``basis`` (none without)."""
    if basis is None:
        return []
    return [("delete", {"PartitionKey": instance_id, "RowKey": basis_row_key(basis.step_id, basis.digest)})]


def refused(ledger: StepLedger, instance_id: str, basis: ResultBasis | None, *, by: str) -> str | None:
    """Why the ledger does not back ``basis`` (read: the write's own proof failed), or None when it
    does (or there is no basis). ``by`` names the write, for the audit note."""
    if basis is None:
        return None
    try:
        record = ledger.get(instance_id, basis.step_id)
    except StepNotFound:
        log.warning("%s of %s: the basis step %r does not exist", by, instance_id, basis.step_id)
        return f"no step {basis.step_id!r} in the ledger"
    found = recorded_outcome(record, "work", basis.attempt)
    if found.state == "succeeded" and payload_digest(found.output or {}) == basis.output_digest:
        return None
    why = f"the scheduler took attempt {basis.attempt} as succeeded, unread; the ledger records " + (
        "another output"
        if found.state == "succeeded"
        else f"{found.state} ({record.status.value} at attempt {record.attempt})"
    )
    log.warning("%s of %s refused: %s", by, instance_id, why)
    ledger.note(
        instance_id,
        basis.step_id,
        actor=ACTOR,
        action="provisional-result-refused",
        reason=f"{by} not written: {why}",
        attempt=basis.attempt,
        status=record.status.value,
    )
    return why
