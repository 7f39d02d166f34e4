"""The demo's narration: the step ledger's timeline printed as it happens, on the virtual clock.

Every step transition with its (virtual) time since the start, who noticed an overdue step (the
orchestration's own deadline timer or the supervisor's watchdog) and what was done about it. Kept
apart from ``devtools.demo``'s command line and fault wiring, which only start it and read it.
"""

from __future__ import annotations

import contextlib
import re
from datetime import datetime, timedelta
from typing import Any, TextIO


def offset(delta: timedelta) -> str:
    seconds = max(delta.total_seconds(), 0.0)
    minutes, secs = divmod(seconds, 60)
    return f"+{int(minutes):02d}:{secs:04.1f}"


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


class Narrator:
    """Turns ledger writes (``LedgerEvent``) into one readable line per step transition."""

    def __init__(
        self,
        out: TextIO,
        start: datetime,
        grace: float,
        verbose: bool = False,
        undone: Any = None,
        width: int = 15,
    ) -> None:
        self.out = out
        self.width = width  # of the step column: the longest step id
        self.undone = undone  # (instance, step) -> how many remote effects the compensator undid
        self.start = start
        self.grace = grace
        self.verbose = verbose
        self.instance_id: str | None = None
        self.lines = 0

    def at(self, when: datetime) -> str:
        return offset(when - self.start)

    def say(self, when: datetime, step: str, text: str) -> None:
        if self.instance_id:
            text = text.replace(self.instance_id, self.instance_id[:8])
        self.out.write(f"  {self.at(when)}  {step:<{self.width}} {text}\n")
        self.out.flush()
        self.lines += 1

    def __call__(self, e: Any) -> None:  # a LedgerEvent
        if self.instance_id is not None and e.instance_id != self.instance_id:
            return
        text = self.describe(e)
        if text:
            self.say(e.at, e.step_id if e.step_id != "*" else "workflow", text)

    def describe(self, e: Any) -> str | None:
        r = e.record
        watchdog = e.actor.startswith("supervisor:")
        if e.action == "created":
            return f"steps written to the ledger as Pending ({e.reason.split(': ', 1)[-1]})"
        if e.action == "note":
            return self._note(e)
        if e.action == "heartbeat":
            return f"agent heartbeat: deadline moved to {self.at(r.deadline)}" if self.verbose else None
        if e.action == "update":
            if watchdog and e.reason.startswith("claimed by watchdog"):
                late = e.reason.rsplit("overdue by ", 1)[-1].replace("s", " s")
                return f"OVERDUE: the watchdog noticed it ({late} past its deadline)"
            if watchdog and e.reason.startswith("resend:"):
                return f"watchdog RE-SENT the work message (unclaimed); new deadline {self.at(r.deadline)}"
            if e.reason.startswith("given up"):
                return f"gave up after {r.attempt} attempt(s): its work will be undone"
            if e.reason.startswith("compensator failed"):
                return f"compensator failed (attempt {r.compensation_attempt}): {e.reason.split(': ', 1)[-1]}"
            return f"({e.reason})" if self.verbose else None
        # transitions
        to, before = e.to_status, e.from_status
        if to == "Dispatched":
            deadline = self.at(r.deadline) if r.deadline else "?"
            return f"dispatched attempt {r.attempt}/{r.max_attempts} to agent {r.agent}, deadline {deadline}"
        if to == "Running":
            return f"agent claimed attempt {r.attempt}"
        if to == "Succeeded":
            return f"SUCCEEDED on attempt {r.attempt}"
        if to == "Failed":
            if e.actor == "dead-letter-handler":
                return f"attempt {r.attempt} FAILED: its message was dead-lettered ({r.last_error})"
            return f"attempt {r.attempt} FAILED: {r.last_error}"
        if to == "TimedOut":
            if watchdog:
                gone = re.search(r"orchestration \S+ is (\w+) while", e.reason)
                if gone:
                    return f"the watchdog closed attempt {r.attempt}: its orchestration is {gone.group(1)}"
                return f"the watchdog timed attempt {r.attempt} out ({e.reason.split(': ', 1)[0]})"
            if "passed its deadline" in e.reason:
                return f"OVERDUE: the orchestration's deadline timer fired: attempt {r.attempt} timed out"
            return f"attempt {r.attempt} abandoned ({e.reason})"
        if to == "Retrying":
            when = e.reason.rsplit(" at ", 1)[-1]
            with contextlib.suppress(ValueError):
                when = self.at(datetime.fromisoformat(when))
            return f"RETRY scheduled: attempt {r.attempt + 1} at {when} (exponential backoff)"
        if to == "Compensating":
            if before == "Compensating":
                return f"compensation retried: attempt {r.compensation_attempt} to {r.compensator}"
            return f"COMPENSATING: undo attempt {r.compensation_attempt} sent to agent {r.compensator}"
        if to == "Compensated":
            if self.undone is not None and not self.undone(e.instance_id, e.step_id):
                return "COMPENSATED (the compensator found nothing to undo)"
            return "COMPENSATED (its remote effect is undone)"
        if to == "CompensationFailed":
            return "COMPENSATION FAILED: listed for an operator (ledger.needing_attention)"
        if to == "Cancelled":
            if r.attempt == 0:
                return "cancelled: it never ran"
            return "cancelled: it gave up and has no compensator (nothing to undo)"
        return f"{before} -> {to}"

    def _note(self, e: Any) -> str | None:
        reason = e.reason
        if e.note == "recovery":
            action, _, detail = reason.partition(": ")
            if action == "note_overrun":
                return f"watchdog: within its {self.grace:.0f} s grace, left to the orchestration's own timer"
            if action == "start_compensation":
                return "watchdog STARTED THE COMPENSATION: " + detail.split("; ")[0].removeprefix(
                    "supervisor: "
                )
            return f"watchdog: {action.replace('_', ' ')}" + (f" ({detail})" if self.verbose else "")
        known = {
            "late-result-ignored": "a late reply arrived after the workflow finished: ignored (audited)",
            "result-resent": "a duplicate work message: the recorded reply was re-sent, no new work",
            "duplicate-delivery-ignored": "a duplicate copy of the work message: ignored",
            "stale-attempt-ignored": "a work message for an older attempt: ignored",
            "settled-step-ignored": "an old work message reached an agent; the step is settled: ignored",
            "send-failed": "the work message could not be sent: the deadline will recover it",
            "message-resent": "work message re-sent",
        }
        if e.note in known:
            return known[e.note]
        return f"note {e.note}: {reason}" if self.verbose else None
