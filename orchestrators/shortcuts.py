"""What the scheduler knows of the ledger without reading it, and the writes that prove it.

Most reads of the scheduler's activities only confirm what the scheduler was just told. So it keeps:

* **known versions** (``known``, ``expected_rows``): the instance's snapshot and each step's ETag
  from the start; a first dispatch writes against them unread, and a version that moved fails the
  write's ETag check (the activity then reads and decides as it would have anyway).
* **a success taken unread** (``Taken``, ``decisions.provisional_outcome``).
* **when the next write can prove it** (``next_write_proves``): the next single step's first dispatch
  or the settle carries its basis and lands only if the ledger recorded exactly that reply (else
  ``basis-refused``). Before a group or a checkpoint, or after a refusal, the ledger is asked
  (``confirm``).

Nothing here decides what the ledger has not recorded: every shortcut is a write conditional on the
versions or row it assumed, in one entity-group transaction (docs/scheduler.md;
``tests/perf/test_request_counts.py`` pins what it saves).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, replace
from typing import Any

from orchestrators.attempts import Provisional, StepResult, StepRun, run_step
from orchestrators.decisions import BASIS_REFUSED, call_activity, should_checkpoint
from orchestrators.state import Progress, WorkflowStart
from workflow_core.contracts import ACTIVITY_SETTLE_INSTANCE
from workflow_core.workflows import StepDefinition, WorkflowDefinition
from workflow_core.workflows.model import new_step

Failed = list[tuple[str, StepResult]]  # the step(s) that gave up; empty when none did


def next_write_proves(
    definition: WorkflowDefinition,
    stages: list[tuple[StepDefinition, ...]],
    index: int,
    completed_here: int,
    steps_left: int,
) -> bool:
    """May the single step of ``stages[index]`` take its success unread? Only when the next ledger
    write carries its basis: the next single step's dispatch, or the settle."""
    if index + 1 == len(stages):
        return True
    if len(stages[index + 1]) > 1:
        return False
    return not should_checkpoint(completed_here + 1, definition.history_checkpoint_every, steps_left - 1)


@dataclass(frozen=True)
class Taken:
    """The last step's success taken unread, with its run and the progress from before it."""

    run: StepRun
    provisional: Provisional
    before: Progress


def basis_refused(answer: Any) -> bool:
    """Did ``settle_instance`` refuse the basis it was given (``activities.scheduler.instances``)?"""
    return isinstance(answer, dict) and answer.get("outcome") == BASIS_REFUSED


def expected_rows(
    definition: WorkflowDefinition,
    start: WorkflowStart,
    step: StepDefinition,
    instance: dict[str, Any] | None,
) -> dict[str, Any] | None:
    """``contracts.ExpectedRows`` for the first dispatch of ``step`` (None when a version is unknown)."""
    etag = start.rows.steps.get(step.id) if start.rows is not None else None
    if etag is None or instance is None:
        return None
    as_created = {"step_name", "agent", "compensator", "max_attempts", "heartbeat_timeout_seconds"}
    return {
        **new_step(step).model_dump(include=as_created),
        "step_etag": etag,
        "sequence": definition.position_of(step.id),
        "workflow_version": start.version,
        "instance": instance,
    }


class LedgerShortcuts:
    """The versions one scheduler knows unread and the success it took unread."""

    def __init__(
        self, context: Any, definition: WorkflowDefinition, start: WorkflowStart, status: Any
    ) -> None:
        self.context = context
        self.definition = definition
        self.start = start
        self.status = status
        self.known = start.rows.instance if start.rows is not None else None  # the instance snapshot
        # a later confirmed success leaves it in place (carried again, it only costs one read)
        self.taken: Taken | None = None

    def forget_instance(self) -> None:
        """The instance record was written elsewhere (a parallel group's members): read it next time."""
        self.known = None

    def confirm(self, progress: Progress) -> Generator[Any, Any, tuple[Progress, Failed]]:
        """Ask the ledger about the success taken unread (if any), before a write that will not carry
        it or after one refused it: polling while its attempt runs, retrying as its policy says."""
        if self.taken is None:
            return progress, []
        taken, self.taken = self.taken, None
        self.status.step = taken.run.step_id
        self.status.progress = taken.before
        asked = replace(taken.run, expected=None, basis=None, provisional=False)
        result = yield from run_step(self.context, asked, self.status, resume=taken.provisional)
        self.known = result.instance if result.succeeded else None
        if not result.succeeded:
            return taken.before, [(taken.run.step_id, result)]
        progress = taken.before.after(taken.run.step_id, result.output)
        self.status.progress = progress
        return progress, []

    def run_single(
        self,
        step: StepDefinition,
        prepare: Callable[[Progress], StepRun | StepResult],
        proves_next: bool,
        progress: Progress,
    ) -> Generator[Any, Any, tuple[Progress, Failed]]:
        """Run one sequential step: its first dispatch writes against the known versions carrying the
        taken basis; its success may be taken unread when ``proves_next``. ``prepare`` builds the run
        (or an unresolvable input's failure); a refused basis or an unresolvable input confirms the
        taken step first and prepares this one again."""
        while True:
            self.status.step = step.id
            prepared = prepare(progress)
            if isinstance(prepared, StepResult):
                result = prepared
            else:
                run = replace(
                    prepared,
                    expected=expected_rows(self.definition, self.start, step, self.known),
                    basis=self.taken.provisional.basis if self.taken is not None else None,
                    provisional=proves_next,
                )
                result = yield from run_step(self.context, run, self.status)
            if self.taken is None or not (result.basis_refused or isinstance(prepared, StepResult)):
                break
            progress, failed = yield from self.confirm(progress)
            if failed:
                return progress, failed
        self.known = result.instance
        if not result.succeeded:
            return progress, [(step.id, result)]
        if result.provisional is not None:
            self.taken = Taken(run, result.provisional, progress)
        progress = progress.after(step.id, result.output)
        self.status.progress = progress
        return progress, []

    def settle(self, progress: Progress) -> Generator[Any, Any, tuple[Progress, Failed]]:
        """``settle_instance`` as succeeded, against the known snapshot, carrying the taken basis."""
        while True:
            self.status.step = None
            self.status("settling")
            settle: dict[str, Any] = {"instance_id": self.context.instance_id, "outcome": "succeeded"}
            if self.known is not None:
                settle["expected"] = self.known
            if self.taken is not None:
                settle["basis"] = self.taken.provisional.basis
            settled = yield call_activity(self.context, ACTIVITY_SETTLE_INSTANCE, settle)
            if self.taken is None or not basis_refused(settled):
                return progress, []
            progress, failed = yield from self.confirm(progress)
            if failed:
                return progress, failed
