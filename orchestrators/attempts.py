"""Running one step (or one compensator) to an outcome: dispatch, race the result against the
deadline, ask the ledger when the deadline wins, back off and retry.

Shared by both orchestrators; only the activity names differ between work and compensation. The
generators here are sub-generators: callers ``yield from`` them inside an orchestrator function.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from orchestrators import decisions
from orchestrators.decisions import AttemptOutcome, Extended, as_utc, call_activity, to_iso
from workflow_core.contracts import (
    ACTIVITY_CHECK_COMPENSATION,
    ACTIVITY_CHECK_STEP,
    ACTIVITY_DISPATCH_COMPENSATION,
    ACTIVITY_DISPATCH_STEP,
    ACTIVITY_SCHEDULE_RETRY,
    ACTIVITY_VERIFY_RESULT,
    StepDispatch,
    StepKind,
    result_event_name,
)
from workflow_core.workflows import RetryPolicy


class Status:
    """An orchestration's custom status: ``fixed`` fields, step, attempt, phase, until, ``extra``'s."""

    def __init__(self, context: Any, extra: Callable[[], dict[str, Any]] = dict, **fixed: Any) -> None:
        self.context, self.extra, self.fixed = context, extra, fixed
        self.step: str | None = None
        self.progress: Any = None  # the workflow orchestrator's Progress, for its ``extra``

    def __call__(self, phase: str, attempt: int | None = None, until: datetime | None = None) -> None:
        self.context.set_custom_status(
            {
                **self.fixed,
                "step": self.step,
                "attempt": attempt,
                "phase": phase,
                "until": to_iso(until) if until else None,
                **self.extra(),
            }
        )


@dataclass(frozen=True)
class StepRun:
    """Everything needed to run one step of one instance, whichever orchestrator runs it."""

    kind: StepKind
    instance_id: str  # the workflow instance (ledger partition), not necessarily this orchestration
    workflow: str
    step_id: str
    deadline_seconds: float
    retry: RetryPolicy
    input: dict[str, Any] = field(default_factory=dict)
    trace: dict[str, str] | None = None  # W3C trace context from the orchestration input, passed on
    # Never in a payload: the first dispatch writes against ``expected`` unread, carrying ``basis``
    # (the previous step's success taken unread); ``provisional``: this run's may be taken unread.
    expected: dict[str, Any] | None = None
    basis: dict[str, Any] | None = None
    provisional: bool = False

    def to_payload(self) -> dict[str, Any]:
        """JSON-ready fields, the input of ``step_orchestrator``."""
        return {
            **({"trace": self.trace} if self.trace else {}),
            "kind": self.kind,
            "instance_id": self.instance_id,
            "workflow": self.workflow,
            "step_id": self.step_id,
            "deadline_seconds": self.deadline_seconds,
            "retry": self.retry.model_dump(),
            "input": self.input,
        }

    @property
    def dispatch_activity(self) -> str:
        return ACTIVITY_DISPATCH_STEP if self.kind == "work" else ACTIVITY_DISPATCH_COMPENSATION

    @property
    def check_activity(self) -> str:
        return ACTIVITY_CHECK_STEP if self.kind == "work" else ACTIVITY_CHECK_COMPENSATION


@dataclass(frozen=True)
class Provisional:
    """A success taken unread, and where its attempt stood (to go back to it if its basis is refused)."""

    attempt: int
    tries: int
    deadline: str  # ISO 8601, the attempt's deadline in orchestration time
    basis: dict[str, Any]  # contracts.ResultBasis


@dataclass(frozen=True)
class StepResult:
    succeeded: bool
    attempts: int
    output: Any = None
    error: str | None = None
    # not in payloads: the snapshot the confirming event carried, a success taken unread until the
    # next write proves it, and whether the first dispatch wrote nothing for a refused basis
    instance: dict[str, Any] | None = None
    provisional: Provisional | None = None
    basis_refused: bool = False

    def to_payload(self) -> dict[str, Any]:
        """What ``step_orchestrator`` returns."""
        return {name: getattr(self, name) for name in ("succeeded", "attempts", "output", "error")}


def run_step(
    context: Any, run: StepRun, report: Status, resume: Provisional | None = None
) -> Generator[Any, Any, StepResult]:
    """Attempt ``run`` until it succeeds or its retry policy is exhausted.

    ``attempt`` numbers the ledger's attempts; ``tries`` counts this orchestration's, against
    ``max_attempts`` (the ledger may be ahead of a re-run). ``resume`` (a success taken unread that a
    later write refused) goes back to that attempt and polls the ledger without dispatching.
    """
    attempt, tries, skipped = 1, 0, 0
    waiting_since: datetime | None = None  # held back by the agent's limits since (no attempt spent)
    while True:
        if resume is not None:  # back to the attempt whose success was taken unread
            attempt, tries, deadline = resume.attempt, resume.tries, decisions.parse_iso(resume.deadline)
            resume = None
            outcome = yield from _await_outcome(
                context, run, attempt, deadline, report, True, None, listen=False
            )
        else:
            deadline = as_utc(context.current_utc_datetime) + timedelta(seconds=run.deadline_seconds)
            report("dispatching", attempt, deadline)
            # The ledger write (Dispatched, owner, deadline) comes before any wait: the watchdog sees it.
            first = attempt == 1 and tries == 0
            dispatch = StepDispatch(
                instance_id=run.instance_id,
                orchestration_id=context.instance_id,
                workflow=run.workflow,
                step_id=run.step_id,
                attempt=attempt,
                deadline=to_iso(deadline),
                input=run.input,
                kind=run.kind,
                trace=run.trace,
                expected=run.expected if first else None,
                basis=run.basis if first else None,
                provisional=run.provisional or None,
                held=waiting_since is not None or None,
            )
            dispatched = yield call_activity(
                context, run.dispatch_activity, dispatch.model_dump(exclude_none=True)
            )
            next_move = decisions.after_dispatch(dispatched)
            if next_move == decisions.BASIS_REFUSED:
                return StepResult(False, tries, error=dispatched.get("error"), basis_refused=True)
            if next_move == decisions.HELD:  # the agent's circuit or slots: ask again, within a budget
                waiting_since = waiting_since or as_utc(context.current_utc_datetime)
                budget = run.deadline_seconds * run.retry.max_attempts
                again = decisions.held_until(dispatched, context.current_utc_datetime, waiting_since, budget)
                if again is None:
                    why = dispatched.get("error") or "the agent's limits"
                    return StepResult(
                        False, tries, error=f"waited {budget:g} s and was never let through: {why}"
                    )
                report("held", attempt, again)
                yield from _park(context, again, dispatched.get("wake"))
                continue
            waiting_since = None
            if next_move == decisions.SKIP_ATTEMPT:
                skipped += 1
                if skipped > decisions.MAX_STALE_SKIPS:
                    raise decisions.ContractViolation(
                        f"{run.dispatch_activity} called {skipped} attempts in a row stale"
                    )
                attempt += 1
                continue
            tries += 1
            token = decisions.dispatch_token(dispatched)
            outcome = yield from _await_outcome(
                context, run, attempt, deadline, report, next_move == decisions.CHECK_NOW, token
            )
        if outcome.succeeded:
            taken = Provisional(attempt, tries, to_iso(deadline), outcome.basis) if outcome.basis else None
            return StepResult(
                True, tries, output=outcome.output, instance=outcome.instance, provisional=taken
            )
        # the jitter's seed: stable across replays, different per instance (no retries in lockstep)
        seed = f"{run.instance_id}:{run.step_id}:{run.kind}"
        next_start = decisions.retry_at(run.retry, tries, context.current_utc_datetime, seed)
        if next_start is None or outcome.permanent:  # permanent: retrying cannot fix it
            return StepResult(False, tries, error=outcome.error)
        # The backoff goes in the ledger first, so the watchdog leaves the step alone while it waits.
        report("scheduling_retry", attempt, next_start)
        yield call_activity(
            context,
            ACTIVITY_SCHEDULE_RETRY,
            {
                "instance_id": run.instance_id,
                "step_id": run.step_id,
                "attempt": attempt,
                "retry_at": to_iso(next_start),
                "kind": run.kind,
            },
        )
        report("backoff", attempt, next_start)
        yield context.create_timer(next_start)
        attempt += 1


def _park(context: Any, until: datetime, wake: Any) -> Generator[Any, Any, None]:
    """Wait until ``until``, or until the dispatch's ``wake`` event (docs/agent-limits.md). Without
    ``wake`` it is a plain timer; the event adds no scheduled action, so both shapes replay."""
    timer = context.create_timer(until)
    if not isinstance(wake, str) or not wake:
        yield timer
        return
    event = context.wait_for_external_event(wake)
    if (yield context.task_any([event, timer])) is event:
        timer.cancel()  # or the host keeps the instance Running until the timer fires


def _await_outcome(
    context: Any,
    run: StepRun,
    attempt: int,
    deadline: datetime,
    report: Status,
    check_first: bool,
    token: str | None,
    *,
    listen: bool = True,
) -> Generator[Any, Any, AttemptOutcome]:
    """Race the attempt's result event against its deadline timer, as often as heartbeats extend it
    (docs/scheduler.md, "One step"); one event task serves the whole attempt. ``check_first``: ask the
    ledger before racing.

    An event is a signal, never the outcome: it is taken as it is only with this attempt's ledger
    ``token``, or provisionally (``run.provisional``); otherwise ``verify_result`` reads the ledger. An
    event the ledger does not back is never waited for again (the SDK hands a buffered event to every
    later wait for its name): the ledger is polled every UNCONFIRMED_POLL instead.
    """
    event: Any = (
        context.wait_for_external_event(result_event_name(run.step_id, attempt, run.kind)) if listen else None
    )
    if check_first:
        verdict = yield from _check(context, run, attempt, deadline, report)
        if not isinstance(verdict, Extended):
            return verdict
        deadline = verdict.deadline
    while True:
        report("waiting", attempt, deadline)
        fire_at = decisions.timer_fire_at(context.current_utc_datetime, deadline)
        polling = event is None
        if polling:
            fire_at = min(fire_at, context.current_utc_datetime + decisions.UNCONFIRMED_POLL)
        timer = context.create_timer(fire_at)
        winner = timer if polling else (yield context.task_any([event, timer]))
        if polling:
            yield timer
        if winner is event:
            timer.cancel()  # or the host keeps the instance Running until the timer fires
            confirmed = decisions.confirmed_outcome(
                event.result, token, run.kind, run.step_id, attempt, deadline
            )
            if confirmed is not None:
                return confirmed
            if run.provisional:  # a success the worker keyed with a basis row: the next write proves it
                taken = decisions.provisional_outcome(
                    event.result, run.kind, run.instance_id, run.step_id, attempt
                )
                if taken is not None:
                    return taken
            verified = yield call_activity(
                context,
                ACTIVITY_VERIFY_RESULT,
                {
                    "instance_id": run.instance_id,
                    "step_id": run.step_id,
                    "attempt": attempt,
                    "kind": run.kind,
                    "claimed": decisions.claim_of(event.result),
                },
            )
            outcome = decisions.interpret_verdict(verified, deadline)
            if outcome is not None:
                return outcome
            event = None  # ignored: poll the ledger from now on
            continue
        if fire_at < deadline and not polling:
            continue  # an intermediate wake-up of a very long deadline: re-arm, nothing to check yet

        verdict = yield from _check(context, run, attempt, deadline, report)
        if isinstance(verdict, Extended):
            deadline = verdict.deadline
            continue
        return verdict


def _check(
    context: Any, run: StepRun, attempt: int, deadline: datetime, report: Status
) -> Generator[Any, Any, AttemptOutcome | Extended]:
    """Ask the ledger what became of the attempt (``check_step`` / ``check_compensation``)."""
    report("checking", attempt, deadline)
    check = yield call_activity(
        context,
        run.check_activity,
        {"instance_id": run.instance_id, "step_id": run.step_id, "attempt": attempt},
    )
    return decisions.interpret_check(check, context.current_utc_datetime, deadline)
