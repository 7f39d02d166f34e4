"""Watch the Scheduler Agent Supervisor pattern recover, in one process, in a few seconds.

    python -m devtools.demo provision-tenant --stall register_dns
    python -m devtools.demo --serve [--port 7071]   # the operator console, see devtools.console_demo

It runs the real app through ``devtools.harness`` on a virtual clock with its own Azurite, injects
the fault you ask for (README.md shows one run per fault) and narrates the step ledger.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import re
import sys
import time
import warnings
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TextIO

from devtools.demo_preflight import DemoError, check_definitions, demo_input
from devtools.logs import quiet_logging
from workflow_core.workflows import UnknownWorkflow, get_workflow


def offset(delta: timedelta) -> str:
    seconds = max(delta.total_seconds(), 0.0)
    minutes, secs = divmod(seconds, 60)
    return f"+{int(minutes):02d}:{secs:04.1f}"


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


#: What the audit notes an operator reads in the demo mean.
NOTES = {
    "late-result-ignored": "a late reply arrived after the workflow finished: ignored (audited)",
    "result-resent": "a duplicate work message: the recorded reply was re-sent, no new work",
    "duplicate-delivery-ignored": "a duplicate copy of the work message: ignored",
    "stale-attempt-ignored": "a work message for an older attempt: ignored",
    "settled-step-ignored": "an old work message reached an agent; the step is settled: ignored",
    "send-failed": "the work message could not be sent: the deadline will recover it",
    "message-resent": "work message re-sent",
}


@dataclass
class Narrator:
    """Turns ledger writes (``LedgerEvent``) into one readable line per step transition, printed as it
    happens on the virtual clock: who noticed an overdue step and what was done about it."""

    out: TextIO
    start: datetime
    grace: float
    verbose: bool = False
    undone: Any = None  # (instance, step) -> how many remote effects the compensator undid
    width: int = 15  # of the step column: the longest step id
    instance_id: str | None = None

    def at(self, when: datetime) -> str:
        return offset(when - self.start)

    def say(self, when: datetime, step: str, text: str) -> None:
        if self.instance_id:
            text = text.replace(self.instance_id, self.instance_id[:8])
        self.out.write(f"  {self.at(when)}  {step:<{self.width}} {text}\n")
        self.out.flush()

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
                why = detail.split("; ")[0].removeprefix("supervisor: ")
                return f"watchdog STARTED THE COMPENSATION: {why}"
            return f"watchdog: {action.replace('_', ' ')}" + (f" ({detail})" if self.verbose else "")
        if e.note in NOTES:
            return NOTES[e.note]
        return f"note {e.note}: {reason}" if self.verbose else None


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.demo",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n")[1],  # the usage lines
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("workflow", nargs="?", default="provision-tenant", help="workflow to run")
    fault = parser.add_mutually_exclusive_group()
    fault.add_argument("--stall", metavar="STEP", help="the agent never answers attempt 1 of STEP")
    fault.add_argument("--fail", metavar="STEP", help="the agent of STEP fails every attempt")
    fault.add_argument("--terminate", metavar="STEP", help="kill the orchestration while STEP is out")
    fault.add_argument(
        "--kill-scheduler", metavar="STEP", help="kill the orchestration right after STEP completed"
    )
    parser.add_argument(
        "--input", metavar="JSON", help="workflow input, a JSON object (default: its sample_input)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show every ledger write")
    parser.add_argument(
        "--serve",
        action="store_true",
        help="serve the operator console on sample instances (http://localhost:7071/api/console/)",
    )
    parser.add_argument(
        "--pools",
        action="store_true",
        help="agent pools: a sas-agent runner serving one pool is killed mid-step while another flows",
    )
    return parser.parse_args(argv)


def _preflight(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The workflow definition and input, checked the way the app checks them at start-up."""
    check_definitions()
    try:
        definition = get_workflow(args.workflow)
    except UnknownWorkflow as exc:
        raise DemoError(str(exc)) from None
    target = args.stall or args.fail or args.terminate or args.kill_scheduler
    if target is not None and target not in definition.step_ids:
        raise DemoError(f"{args.workflow} has no step {target!r}; steps: {', '.join(definition.step_ids)}")
    return definition, demo_input(definition, args.input)


def main(argv: list[str] | None = None, out: TextIO = sys.stdout) -> int:
    given = sys.argv[1:] if argv is None else argv
    if "--serve" in given:
        from devtools.console_demo import main as serve

        return serve(argv, out)
    if "--pools" in given:
        from devtools.demo_pools import main as pools

        return pools(out)
    args = _parse(argv)
    quiet_logging()
    warnings.filterwarnings("ignore")

    from activities.worker.handlers import faults
    from devtools.azurite import Azurite
    from devtools.harness import HarnessError, PatternHarness

    try:
        definition, workflow_input = _preflight(args)
    except DemoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    wall = time.monotonic()
    out.write(f"Scheduler Agent Supervisor demo: workflow {args.workflow!r}\n")
    out.write("  starting Azurite (tables for the ledger, queues for the agents)...\n")
    out.flush()
    faults.clear()
    width = max(15, *(len(s.id) for s in definition.steps))
    with Azurite() as azurite, PatternHarness(azurite) as h:
        grace = h.settings.watchdog_grace_seconds
        compensated = functools.partial(h.effects, kind="compensate")
        h.on_event = narrator = Narrator(out, h.now(), grace, args.verbose, compensated, width)
        steps = " -> ".join(
            " | ".join(f"{s.id} ({duration(s.deadline_seconds)})" for s in stage)
            for stage in definition.stages
        )
        out.write(f"  steps and deadlines: {steps}\n")
        out.write(f"  agent transport    : {h.transport_label}\n")
        every = h.watchdog_every.total_seconds()
        out.write(f"  watchdog           : every {every:.0f} s, grace {grace:.0f} s\n")
        out.write("  clock              : virtual; it jumps to the next timer whenever nothing can run\n")
        held, step = None, args.stall or args.fail or args.terminate or args.kill_scheduler
        if args.stall or args.fail:
            agent = definition.step(step).agent
            faults.inject(agent, faults.Stall(times=1) if args.stall else faults.Fail(), step=step)
            does = "never answers attempt 1" if args.stall else "fails every attempt"
            out.write(f"  injected fault     : {step}'s agent ({agent}) {does}\n")
        elif step:
            # a killed scheduler's reply is held: it dies with the step done and nothing in flight
            held = h.hold(step, queue="work" if args.terminate else "results")
            when = f"dies right after {step} completes"
            if args.terminate:
                when = f"is terminated while {step} is out"
            out.write(f"  injected fault     : the orchestration {when}\n")
        reported: list[Any] = []
        said = {"Stall": "the agent went silent on attempt", "Fail": "the agent fails attempt"}

        def report_faults() -> int:  # a pump: prints injected faults as they fire
            for event in faults.events()[len(reported) :]:
                reported.append(event)
                if event.rule in said:
                    narrator.say(h.now(), event.step_id, f"(injected) {said[event.rule]} {event.attempt}")
            return 0

        h.host.add_pump(report_faults, "demo")
        out.write(f"\n  time      {'step':<{width}} what happened\n")
        try:
            iid = h.start_workflow(args.workflow, workflow_input)
        except HarnessError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        narrator.instance_id = iid
        started = f"started: POST /api/workflows/{args.workflow}/instances -> 202, instance {iid}"
        narrator.say(h.now(), "workflow", started)
        if held is not None:
            h.run_until(lambda: bool(h.held(held)))
            why = "nobody waits for the step any more"
            if args.kill_scheduler:
                why = f"{step} is done, nothing is in flight"
            h.host.terminate(iid, "terminated by the demo")
            narrator.say(h.now(), "workflow", f"ORCHESTRATION TERMINATED ({why})")
            h.run_until(lambda: h.settled(iid), timeout=timedelta(hours=6))
            h.release(held)
            h.host.run_until_idle()
            record = h.ledger.get_instance(iid)
            runs = ", ".join(f"{s} x{h.handler_calls(iid, s)}" for s in definition.step_ids)
            outcome = (
                f"{record.status.value} after {record.resume_count} resume(s) by the watchdog; "
                f"handler runs per step: {runs}"
            )
        else:
            status = h.run_until_complete(iid, timeout=timedelta(hours=6))
            output = status.output if isinstance(status.output, dict) else {}
            outcome = output.get("status", status.runtime_status.value)
        narrator.say(h.now(), "workflow", f"FINISHED: {outcome}")
        out.write(f"\n  final ledger\n  {'step':<{width}} status               attempts  compensation\n")
        for r in h.ledger.list_for_instance(iid):
            undo = ""
            if r.compensation_attempt:
                undo = f"{r.compensation_status or ''} (attempt {r.compensation_attempt})"
            out.write(f"  {r.step_id:<{width}} {r.status.value:<20} {r.attempt:<9} {undo}\n")
        decisions = [d.action for d in h.decisions(iid)] + [
            action for r in h.tick_reports for i, _, action, _ in r.instance_decisions if i == iid
        ]
        timer = sum(1 for e in h.events_for(iid) if e.to_status == "TimedOut" and e.actor == "scheduler")
        out.write(
            f"\n  recovery: {timer} timeout(s) caught by the orchestration's timer; watchdog decisions: "
            f"{', '.join(decisions) or 'none'}\n"
        )
        effects = sum(h.effects(iid, s) for s in definition.step_ids)
        undone = sum(h.effects(iid, s, kind="compensate") for s in definition.step_ids)
        inbox = [r for r in h.ledger.needing_attention() if r.instance_id == iid]
        out.write(
            f"  remote effects: {effects} made, {undone} undone, {len(h.double_effects([iid]))} made twice; "
            f"steps needing an operator: {len(inbox)}\n"
        )
        out.write(
            f"  {duration(h.elapsed().total_seconds())} of workflow time in "
            f"{time.monotonic() - wall:.1f} s of real time\n"
        )
    faults.clear()
    return 0


if __name__ == "__main__":
    sys.exit(main())
