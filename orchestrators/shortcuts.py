"""What the scheduler knows of the ledger without reading it, and the writes that prove it.

Most reads of the scheduler's activities (the rows they are about to write; for a raised success,
the step's recorded outcome) only confirm what the scheduler was just told. So it keeps three things:

* **known versions** (``known``): the instance record's snapshot as the starter wrote it, then as
  each confirmed result carried it, and each step's ETag from the start (``expected_rows``). A first
  dispatch writes against them without reading; a version that moved makes the write fail its
  ETag check, and the activity reads and decides as it would have anyway.
* **a success taken unread** (``Taken``): a sequential step's success raised from a worker's reply
  keyed with a basis row, taken before the ledger is read (``decisions.provisional_outcome``).
* **when the next write can prove it** (``next_write_proves``): only the next single step's first
  dispatch or the settle carries the basis; its transaction deletes the basis row, so it lands only
  if the ledger recorded exactly that reply, and otherwise writes nothing and answers
  ``basis-refused``. Before a parallel group or a checkpoint, which would not carry it, and when a
  write refuses it, the scheduler goes back to that step and asks the ledger (``confirm``).

Safety: nothing here decides anything the ledger has not recorded. Every shortcut is a write that is
conditional on the very versions (ETag) or row (basis) it assumed, in one entity-group transaction;
when the assumption is wrong the write does not land and the scheduler falls back to reading
(``tests/perf/test_request_counts.py`` pins what it saves). :class:`LedgerShortcuts` is the one
object the workflow orchestrator passes along, keeping these versions to itself.
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
    """May the single step of ``stages[index]`` take its success unread? Only when the scheduler's
    next ledger write carries its basis: the next single step's dispatch, or the settle. Before a
    parallel group or a checkpoint the ledger would have to be asked anyway (``LedgerShortcuts.confirm``)."""
    if index + 1 == len(stages):
        return True
    if len(stages[index + 1]) > 1:
        return False
    return not should_checkpoint(completed_here + 1, definition.history_checkpoint_every, steps_left - 1)


@dataclass(frozen=True)
class Taken:
    """The last step's success, taken unread, with the run and the progress from before it: enough
    to go back to that step when the ledger refuses it."""

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
    """``contracts.ExpectedRows`` for the first dispatch of ``step``: its row as the starter created
    it (the ETag from the start, the fields from the pinned definition, as ``new_step`` writes them)
    and the instance's snapshot; None when either version is unknown."""
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
    """The versions one scheduler knows unread and the success it took unread (see the module)."""

    def __init__(
        self, context: Any, definition: WorkflowDefinition, start: WorkflowStart, status: Any
    ) -> None:
        self.context = context
        self.definition = definition
        self.start = start
        self.status = status
        self.known = start.rows.instance if start.rows is not None else None  # the instance snapshot
        # The last success taken unread; a later confirmed success leaves it in place (a write that
        # carries it again finds its basis row gone and reads the step: correct, one read dearer).
        self.taken: Taken | None = None

    def forget_instance(self) -> None:
        """The instance record was written elsewhere (a parallel group's members): read it next time."""
        self.known = None

    def confirm(self, progress: Progress) -> Generator[Any, Any, tuple[Progress, Failed]]:
        """Before a write that will not carry the taken success (a group, a checkpoint), or when one
        refused it: ask the ledger about that step (polling while its attempt is under way, retrying
        as its policy says). Nothing taken: nothing to ask."""
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
        """Run one sequential step to an outcome: its first dispatch writes against the known
        versions and carries the taken success's basis; its own success may be taken unread when
        ``proves_next``. ``prepare`` builds the run from the progress (or the failure of an input that
        cannot be resolved): when the ledger refuses the basis, or the input was built on the taken
        success and cannot be resolved, that step is confirmed and this one prepared again."""
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
        """``settle_instance`` as succeeded, against the known snapshot and carrying the taken
        success's basis; a refused basis sends the scheduler back to that step first."""
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
