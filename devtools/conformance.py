"""The conformance kit: drive a black-box agent process through the app's own code and check the protocol.

``sas conformance -- <agent command line>`` runs :func:`run_checks`: a
:class:`~devtools.harness.PatternHarness` on Azurite with one extra workflow, ``conformance``, whose
one step needs ``conformance.echo``, and no in-process worker: the agent under test (started with the
app's settings plus ``CONFORMANCE_EFFECTS``) is the work queue's only reader. The scheduler, handlers
and watchdog are the app's: a check passes only when the ledger says so (docs/agents.md, "Check an
agent with the conformance kit").
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from devtools import conformance_verdicts as verdicts
from devtools.azurite import Azurite
from devtools.harness import PatternHarness
from workflow_core import clock
from workflow_core.messages import work_message
from workflow_core.transport import message_id_for

ROOT = Path(__file__).resolve().parents[1]
STEP_DEADLINE_SECONDS = 10  # short, so an agent that never replies is found out quickly
AGENT = "conformance.echo"
STEP = "echo"
WORKFLOW = {
    "name": "conformance",
    "description": "One step whose agent, conformance.echo, is the agent under test.",
    "input": {
        "required": ["value"],
        "properties": {
            "value": {"type": "string"},
            "slow_seconds": {"type": "number", "default": 0},
            "heartbeat_seconds": {"type": "number", "default": 300},
            "crash_once": {"type": "string", "default": ""},
        },
    },
    "steps": [
        {
            "id": STEP,
            "agent": AGENT,
            "input": {k: f"$input.{k}" for k in ("value", "slow_seconds", "heartbeat_seconds", "crash_once")},
            "deadline_seconds": STEP_DEADLINE_SECONDS,
            "retry": {"max_attempts": 3, "initial_interval_seconds": 1},
        }
    ],
}
STEP_TIMEOUT = timedelta(seconds=40)  # a verdict is usually known much sooner (``_finish``)


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool
    detail: str


class CheckFailed(AssertionError):
    """A check's finding: its message is the line the table shows."""


class Conformance:
    """One agent under test next to one harness; each ``check_*`` method raises :class:`CheckFailed`."""

    def __init__(self, h: PatternHarness, argv: Sequence[str], scratch: Path) -> None:
        self.h, self.argv, self.scratch = h, list(argv), scratch
        self.effects = scratch / "effects.log"
        self.runs = 0
        self.process: subprocess.Popen | None = None
        self.instances: list[str] = []  # every instance a check started: their timelines

    def start_agent(self) -> None:
        self.runs += 1
        env = {**os.environ, "CONFORMANCE_EFFECTS": str(self.effects)}
        with (self.scratch / f"agent-{self.runs}.log").open("ab") as out:
            self.process = subprocess.Popen(
                self.argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def stop_agent(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def agent_output(self) -> str:
        logs = sorted(self.scratch.glob("agent-*.log"), key=lambda p: int(p.stem.split("-")[1]))
        return "".join(p.read_text(errors="replace") for p in logs)

    def _alive(self) -> None:
        if self.process is None or self.process.poll() is not None:
            code = None if self.process is None else self.process.returncode
            raise CheckFailed(f"the agent process is not running (exit code {code})")

    def _wait(self, predicate: Callable[[], bool], seconds: float, what: str) -> None:
        try:
            self.h.run_until(predicate, timeout=timedelta(seconds=seconds))
        except Exception as exc:
            raise CheckFailed(f"{what} within {seconds:g}s ({type(exc).__name__})") from None

    def _pause(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        self.h.run_until(lambda: time.monotonic() >= end, timeout=timedelta(seconds=seconds + 30))

    def effect_count(self, key: str) -> int:
        lines = self.effects.read_text(encoding="utf-8").splitlines() if self.effects.exists() else []
        return lines.count(key)

    def _verdict(self, iid: str) -> str | None:
        """The fault the ledger already shows for ``iid``, or None (undecided or fine)."""
        trail = self.h.ledger.audit_trail(iid)
        found = verdicts.fault(trail, STEP)
        if found is None:
            found = verdicts.stalled(self.h.ledger.get(iid, STEP), trail, STEP, STEP_DEADLINE_SECONDS)
        if found is None and self.process is not None and self.process.poll() is not None:
            found = f"crash: the agent process exited (code {self.process.returncode}) and was not restarted"
        return found

    def _no_reply(self, iid: str) -> str:
        """The fault of a step still in flight when a correct agent would have replied."""
        row = self.h.ledger.get(iid, STEP)
        within = f"within the step's deadline ({STEP_DEADLINE_SECONDS}s)"
        if row.last_heartbeat is None:
            return f"no reply {within}: not even a heartbeat"
        age = (clock.utcnow() - row.last_heartbeat).total_seconds()
        if age < STEP_DEADLINE_SECONDS / 2:  # still beating, long after a correct agent replied
            return f"heartbeats without an end: the last one {age:.0f}s ago, and no reply {within}"
        return f"no reply {within} after its heartbeat"

    def _finish(self, iid: str, value: str, *, restarts: bool = False) -> None:
        """The instance completed with the echo as the step's output, and its effect made once; ends
        as soon as the ledger shows a fault (``conformance_verdicts``), or the attempt is still in
        flight 2 s past the step's deadline from its dispatch (``verdicts.overdue``)."""
        self.instances.append(iid)
        found: list[str] = []

        def decided() -> bool:  # a crash check's agent exits and times out on purpose: tokens only
            trail, row = self.h.ledger.audit_trail(iid), self.h.ledger.get(iid, STEP)
            fault = verdicts.fault(trail, STEP) if restarts else self._verdict(iid)
            if not (fault or restarts) and verdicts.overdue(
                row, trail, STEP, STEP_DEADLINE_SECONDS + 2, clock.utcnow()
            ):
                fault = self._no_reply(iid)
            found.extend([fault] if fault else [])
            return bool(fault) or row.status.value in ("Succeeded", "Failed", "Compensated", "Cancelled")

        try:
            self.h.run_until(decided, timeout=STEP_TIMEOUT)
        except Exception:
            raise CheckFailed(
                self._verdict(iid) or f"no reply within {STEP_TIMEOUT.total_seconds():g}s (no fault recorded)"
            ) from None
        if found:
            raise CheckFailed(found[0])
        try:
            status = self.h.run_until_complete(iid, timeout=timedelta(seconds=15))
        except Exception as exc:
            raise CheckFailed(
                self._verdict(iid) or f"the workflow did not complete ({type(exc).__name__})"
            ) from None
        if fault := verdicts.fault(self.h.ledger.audit_trail(iid), STEP):
            raise CheckFailed(fault)
        if status.runtime_status.value != "Completed" or (status.output or {}).get("status") != "succeeded":
            raise CheckFailed(f"the workflow ended {status.runtime_status.value}: {status.output}")
        from activities.common import step_output

        output = step_output(self.h.ledger.get(iid, STEP))
        if output != {"echo": value}:
            raise CheckFailed(f"the step's output is {output!r}, not {{'echo': {value!r}}}")
        key = f"{iid}:{STEP}"  # the effect of a succeeded step must be made exactly once
        if (made := self.effect_count(key)) != 1:
            raise CheckFailed(
                f"success without effect: the agent replied succeeded but made no effect for key {key}"
                if not made
                else f"effect without idempotency: the effect was made {made} times for idempotency key {key}"
            )

    def _start(self, **inputs: Any) -> tuple[str, str]:
        value = f"v-{uuid.uuid4().hex[:8]}"
        return self.h.start_workflow("conformance", {"value": value, **inputs}), value

    def check_valid_result(self) -> str:
        self._alive()
        iid, value = self._start()
        self._finish(iid, value)
        return "echoed its input; the ledger recorded Succeeded"

    def check_duplicate_delivery(self) -> str:
        self.h.duplicate_send(STEP)
        iid, value = self._start()
        self._finish(iid, value)
        self._pause(1.0)  # the second delivery's reply, if any, is handled too
        self._finish(iid, value)
        return "two deliveries of one work message: one effect, one outcome"

    def check_heartbeat(self) -> str:
        started = clock.utcnow()
        iid, value = self._start(slow_seconds=3, heartbeat_seconds=300)
        seen: list[Any] = []  # the deadlines the step had while in progress

        def sample() -> bool:
            row = self.h.ledger.get(iid, STEP)
            if row.deadline is not None and row.status.value in verdicts.IN_FLIGHT:
                seen.append(row.deadline)
            return row.status.value == "Succeeded"

        try:
            self._wait(sample, STEP_DEADLINE_SECONDS + 5, "the slow step did not succeed")
        except CheckFailed:
            raise CheckFailed(self._verdict(iid) or self._no_reply(iid)) from None
        self._finish(iid, value)
        moved = int((max(seen) - started).total_seconds()) if seen else 0
        if moved < 120:  # the step's own deadline is 10 s: only a heartbeat (of 300 s) moves it this far
            raise CheckFailed(f"no heartbeat moved the deadline: at most {moved}s after the start, not ~300s")
        return f"the deadline moved to {moved}s after the start (the step's own: {STEP_DEADLINE_SECONDS}s)"

    def _probe_finished_step(self, deadline: datetime, **body: Any) -> tuple[Any, int]:
        """Finish an instance, then send a work message for the attempt after its last, one the ledger
        never dispatched (no TTL: it must be delivered), and give the agent time to handle it."""
        iid, value = self._start()
        self._finish(iid, value)
        before = self.h.ledger.get(iid, STEP)
        message = work_message(before, deadline=deadline)
        attempt = before.attempt + 1
        message.body.update(attempt=attempt, **body)
        message.application_properties["attempt"] = attempt
        sent = dataclasses.replace(message, message_id=message_id_for(iid, STEP, attempt), expires_at=None)
        self.h.transport.send(self.h.settings.work_queue, sent)
        self._pause(3.0)
        return before, attempt

    def check_stale_attempt(self) -> str:
        deadline = clock.utcnow() + timedelta(minutes=5)
        before, stale = self._probe_finished_step(deadline, reply_token=secrets.token_hex(32))
        self._alive()
        after = self.h.ledger.get(before.instance_id, STEP)
        fields = ("etag", "status", "attempt", "result_ref", "owner")
        if changed := [f for f in fields if getattr(after, f) != getattr(before, f)]:
            raise CheckFailed(
                f"a work message for attempt {stale} (not the ledger's) changed {', '.join(changed)}"
            )
        return f"attempt {stale} with a token the ledger never issued: the step row is unchanged"

    def check_malformed(self) -> str:
        from workflow_core.ledger.parking import parked_messages
        from workflow_core.transport import OutgoingMessage

        probe = f"conformance-malformed-{uuid.uuid4().hex[:8]}"
        body = {"kind": "work", "agent": AGENT, "conformance_probe": probe}
        self.h.transport.send(self.h.settings.work_queue, OutgoingMessage(body=body, message_id=probe))
        found: list[Any] = []

        def parked() -> bool:
            found[:] = [
                p for p in parked_messages(self.h.ledger, 1000) if probe in p.body or p.message_id == probe
            ]
            return bool(found)

        self._wait(
            parked, 30, "the malformed work message was not parked (in the ledger, or on the poison queue)"
        )
        self._alive()
        if not found[0].reason.strip():
            raise CheckFailed("the malformed work message was parked without a reason")
        return f"parked: {found[0].reason[:80]}"

    def check_crash_recovery(self) -> str:
        marker = self.scratch / f"crash-{uuid.uuid4().hex[:8]}"
        iid, value = self._start(crash_once=str(marker))
        process = self.process
        assert process is not None
        self._wait(lambda: process.poll() is not None, 30, "a crash_once input did not make the agent exit")
        self.start_agent()
        # The watchdog sees the crashed attempt's deadline passed until the ledger shows that attempt
        # ended (timed out, or finished from its redelivery); then the retry gets its whole deadline.
        self.h.watchdog_skew = timedelta(minutes=30)
        try:

            def ended() -> bool:  # timed out (a later attempt, or TimedOut/Retrying) or finished
                row = self.h.ledger.get(iid, STEP)
                return row.attempt > 1 or row.status.value not in verdicts.IN_FLIGHT

            self._wait(ended, 30, "the crashed attempt was neither timed out by the watchdog nor finished")
        finally:
            self.h.watchdog_skew = timedelta(0)
        self._finish(iid, value, restarts=True)
        return "exited mid-step; after a restart and the watchdog, finished with one effect"

    def check_expiry(self) -> str:
        """A work message that arrives after its attempt expired (``expires_at`` an hour ago, the
        worker's fast-clock allowance far behind) must make no effect."""
        past, key = clock.utcnow() - timedelta(hours=1), f"expired-probe-{uuid.uuid4().hex}"
        self._probe_finished_step(past, idempotency_key=key, expires_at=past.isoformat())
        if self.effect_count(key):
            raise CheckFailed(
                f"ignoring expiry: a work message expired at {past.isoformat()} made its effect"
            )
        return "a work message past its expires_at made no effect"


# short name (``sas conformance --check``) -> (the table's name, the check), in the order they run
_CHECKS: dict[str, tuple[str, Callable[[Conformance], str]]] = {
    "valid": ("valid message, valid result", Conformance.check_valid_result),
    "duplicate": ("duplicate delivery, one effect", Conformance.check_duplicate_delivery),
    "heartbeat": ("heartbeats extend the deadline", Conformance.check_heartbeat),
    "stale": ("stale attempt changes nothing", Conformance.check_stale_attempt),
    "malformed": ("malformed message parked", Conformance.check_malformed),
    "crash": ("crash mid-step recovered once", Conformance.check_crash_recovery),
    "expiry": ("expired work makes no effect", Conformance.check_expiry),
}
CHECKS = list(_CHECKS.values())
CHECK_NAMES = {short: name for short, (name, _) in _CHECKS.items()}


def run_checks(
    argv: Sequence[str],
    scratch: Path,
    azurite: Azurite | None = None,
    only: Sequence[str] = (),
    timeline: Path | None = None,
) -> tuple[list[CheckResult], str]:
    """Run every check (or those named in ``only``: a short name of ``CHECK_NAMES`` or a full one)
    against the agent ``argv`` starts, in order: one result per check, and what the agent printed (its
    runs in ``scratch``). ``timeline``: a file that gets each instance's audit trail."""
    wanted = {CHECK_NAMES.get(n, n) for n in only}
    if unknown := wanted - {name for name, _ in CHECKS}:
        raise ValueError(f"no check named {sorted(unknown)[0]!r} (checks: {', '.join(CHECK_NAMES)})")
    import agent_runner.conformance_echo  # noqa: F401 - the app checks every agent has a handler

    if str(ROOT) not in sys.path:  # function_app.py, which the harness hosts, is no package's module
        sys.path.insert(0, str(ROOT))

    results = []
    with PatternHarness(
        azurite, clock="real", watchdog_every=timedelta(seconds=1), extra_workflows={"conformance": WORKFLOW}
    ) as h:
        h.host.remove_pump(h.work_pump)  # the agent under test is the work queue's only reader
        kit = Conformance(h, argv, scratch)
        kit.start_agent()
        fatal = ""
        try:
            for name, check in CHECKS:
                if wanted and name not in wanted:
                    continue
                if fatal:
                    results.append(CheckResult(name, False, f"not run: the agent already failed: {fatal}"))
                    continue
                try:
                    results.append(CheckResult(name, True, check(kit)))
                except CheckFailed as exc:
                    results.append(CheckResult(name, False, str(exc)))
                    if str(exc).startswith(verdicts.PROTOCOL_FAULTS):  # fail fast: it fails every check
                        fatal = str(exc).split(":", 1)[0]
                except Exception as exc:  # the kit could not drive the check: a failure all the same
                    results.append(CheckResult(name, False, f"{type(exc).__name__}: {exc}"))
                if kit.process is None or kit.process.poll() is not None:
                    kit.start_agent()  # a check that killed it leaves the next one an agent
        finally:
            kit.stop_agent()
            if timeline is not None:
                trails = {iid: verdicts.timeline(h.ledger.audit_trail(iid)) for iid in kit.instances}
                lines = [f"# {iid}\n" + "\n".join(trail) for iid, trail in trails.items()]
                timeline.write_text("\n\n".join(lines) + "\n", encoding="utf-8")
    return results, kit.agent_output()
