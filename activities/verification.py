"""Trust only the ledger: what it recorded for one attempt, and the activity that asks it.

A result message or event is a *claim* (docs/contracts.md, "Trust only the ledger"): it is acted on
only as the step row records it for that very attempt, and every mismatch is audited on the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from activities.common import audit, step_output
from workflow_core.contracts import ResultVerdict, StepKind, fit_text
from workflow_core.ledger import StepRecord, StepStatus
from workflow_core.ledger.model import COMP_FAILED, COMP_TIMED_OUT
from workflow_core.runtime import Services

S = StepStatus
ACTOR = "scheduler"


@dataclass(frozen=True)
class Recorded:
    """The ledger's word on one attempt; ``exact`` = the row is at that very attempt."""

    state: Literal["succeeded", "failed", "timed_out", "unconfirmed"]
    exact: bool
    output: dict[str, Any] | None = None
    error: str | None = None
    permanent: bool = False
    why: str = ""


UNDOING = frozenset({S.COMPENSATING, S.COMPENSATED, S.COMPENSATION_FAILED})


def recorded_outcome(
    r: StepRecord, kind: StepKind, attempt: int, *, undone_succeeded: bool = False
) -> Recorded:
    """What the ledger says about ``attempt`` of ``kind`` on step row ``r``. A later attempt
    supersedes this one (timed_out), except that any attempt's success is the step's; an earlier one
    means the ledger never dispatched it (unconfirmed); a Skipped step counts as succeeded. With
    ``undone_succeeded``, a step undone since that recorded an output succeeded (it did, before)."""
    if kind == "work":
        if r.status is S.SKIPPED:
            return Recorded("succeeded", r.attempt == attempt, output=step_output(r) or {})
        if r.attempt > attempt:
            if r.status is S.SUCCEEDED:
                return Recorded("succeeded", False, output=step_output(r) or {})
            return Recorded("timed_out", False, error=f"ledger is at attempt {r.attempt} ({r.status.value})")
        if r.attempt < attempt:
            return Recorded("unconfirmed", False, why=f"ledger is at attempt {r.attempt} ({r.status.value})")
        undone = undone_succeeded and r.status in UNDOING and r.result_ref is not None
        if r.status is S.SUCCEEDED or undone:
            return Recorded("succeeded", True, output=step_output(r) or {})
        if r.status is S.FAILED:
            return Recorded("failed", True, error=r.last_error, permanent=r.non_retryable)
        if r.status in (S.TIMED_OUT, S.RETRYING):
            return Recorded("timed_out", True, error=r.last_error)
        if r.status in (S.PENDING, S.DISPATCHED, S.RUNNING):
            return Recorded("unconfirmed", True, why=f"attempt {attempt} is {r.status.value}")
        return Recorded("failed", True, error=r.last_error or f"step is {r.status.value}")
    if r.status is S.COMPENSATED and r.compensation_attempt >= attempt:
        return Recorded("succeeded", r.compensation_attempt == attempt, output={})
    if r.compensation_attempt != attempt:
        why = f"ledger is at compensation attempt {r.compensation_attempt} ({r.status.value})"
        if r.compensation_attempt > attempt:
            return Recorded("timed_out", False, error=why)
        return Recorded("unconfirmed", False, why=why)
    if r.status is S.COMPENSATION_FAILED or (
        r.status is S.COMPENSATING and r.compensation_status == COMP_FAILED
    ):
        return Recorded("failed", True, error=r.last_error, permanent=r.non_retryable)
    if r.status is not S.COMPENSATING:
        return Recorded("failed", True, error=f"step is {r.status.value}")
    if r.compensation_status == COMP_TIMED_OUT:
        return Recorded("timed_out", True, error=r.last_error)
    return Recorded("unconfirmed", True, why=f"compensation attempt {attempt} is {r.compensation_status}")


def verdict_of(found: Recorded) -> ResultVerdict:
    """The scheduler's view of what the ledger recorded: what ``verify_result`` answers, and what the
    result handler puts in the event it raises (``ConfirmedResult.verdict``)."""
    return ResultVerdict(
        state=found.state,
        output=found.output if found.state == "succeeded" else None,
        error=None if found.error is None else fit_text(found.error),
        permanent=found.permanent,
    )


def attempt_token(r: StepRecord, kind: StepKind, attempt: int) -> str | None:
    """The row's attempt token if it is the token of ``attempt`` of ``kind`` (else None: the row's
    token, if any, belongs to another attempt)."""
    if kind == "work":
        # a compensation's dispatch gave the row a new token: the work attempt's is gone
        return r.attempt_token if r.attempt == attempt and r.status not in UNDOING else None
    return r.attempt_token if r.compensation_attempt == attempt and r.status in UNDOING else None


def verify_result(payload: dict[str, Any], services: Services) -> dict[str, Any]:
    """``{instance_id, step_id, attempt, kind, claimed}`` -> ``ResultVerdict``: the ledger's outcome of
    the attempt, whatever the event (``claimed``) said; audits an event the ledger does not back."""
    kind: StepKind = "compensate" if payload.get("kind") == "compensate" else "work"
    attempt, claimed, ledger = int(payload["attempt"]), payload.get("claimed"), services.ledger
    record = ledger.get(payload["instance_id"], payload["step_id"])
    found = recorded_outcome(record, kind, attempt)
    if isinstance(claimed, dict):  # a short, printable summary of what the event claimed
        parts = [f"{k}={claimed.get(k)!r}" for k in ("outcome", "attempt", "step_id", "kind") if k in claimed]
        said = claimed.get("outcome")
        claim = fit_text(", ".join(parts) or "a payload without an outcome", 500)
    else:
        claim, said = fit_text(f"a {type(claimed).__name__} payload", 200), None
    event = f"{kind} result event for attempt {attempt} ({claim})"
    if found.state == "unconfirmed":
        audit(ledger, record, ACTOR, "unconfirmed-result-ignored", f"{event} ignored: {found.why}", attempt)
    elif said != ("succeeded" if found.state == "succeeded" else "failed"):
        why = f"{event} disagrees with the ledger ({found.state}); the ledger's outcome is used"
        audit(ledger, record, ACTOR, "result-mismatch", why, attempt)
    verdict = verdict_of(found)
    if verdict.output is not None:  # the scheduler builds later inputs from it: the value itself
        verdict = verdict.model_copy(update={"output": services.payloads.resolve(verdict.output)})
    return verdict.model_dump()
