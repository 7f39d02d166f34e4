"""A sequential step's success taken unread, until the scheduler's next ledger write proves it.

The result handler raises a success the worker keyed with a basis row without reading the ledger
(``contracts.ReplyVersions``); ``decisions.provisional_outcome`` takes it, and the workflow
orchestrator carries its basis (``contracts.ResultBasis``) to its next write: the next step's first
dispatch or the settle, whose transaction deletes that row or which writes nothing and answers
``basis-refused``. This module holds what the orchestrator needs for that: which steps may be taken
so (``next_write_proves``), what it keeps meanwhile (``Taken``) and how it goes back to the step and
asks the ledger when a write refuses it (``Taken.confirm``). Deterministic, like all orchestrator code.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, replace
from typing import Any

from orchestrators.attempts import Provisional, StepResult, StepRun, run_step
from orchestrators.decisions import BASIS_REFUSED, should_checkpoint
from orchestrators.state import Progress
from workflow_core.workflows import StepDefinition, WorkflowDefinition


def next_write_proves(
    definition: WorkflowDefinition,
    stages: list[tuple[StepDefinition, ...]],
    index: int,
    completed_here: int,
    steps_left: int,
) -> bool:
    """May the single step of ``stages[index]`` take its success unread? Only when the scheduler's
    next ledger write carries its basis: the next single step's dispatch, or the settle. Before a
    parallel group or a checkpoint the ledger would have to be asked anyway (``Taken.confirm``)."""
    if index + 1 == len(stages):
        return True
    if len(stages[index + 1]) > 1:
        return False
    return not should_checkpoint(completed_here + 1, definition.history_checkpoint_every, steps_left - 1)


@dataclass(frozen=True)
class Taken:
    """The last step's success, taken unread (``decisions.provisional_outcome``), with the run and
    the progress from before it: enough to go back to that step when the ledger refuses it."""

    run: StepRun
    provisional: Provisional
    before: Progress

    @property
    def basis(self) -> dict[str, Any]:
        return self.provisional.basis

    def confirm(
        self, context: Any, status: Any
    ) -> Generator[Any, Any, tuple[Progress, dict[str, Any] | None, list[tuple[str, StepResult]]]]:
        """Ask the ledger about the step (polling while its attempt is under way, retrying as its
        policy says): the progress with the ledger's output, no snapshot, and the step if it failed."""
        status.step = self.run.step_id
        status.progress = self.before
        asked = replace(self.run, expected=None, basis=None, provisional=False)
        result = yield from run_step(context, asked, status, resume=self.provisional)
        if not result.succeeded:
            return self.before, None, [(self.run.step_id, result)]
        return self.before.after(self.run.step_id, result.output), result.instance, []


def basis_refused(answer: Any) -> bool:
    """Did ``settle_instance`` refuse the basis it was given (``activities.basis``)?"""
    return isinstance(answer, dict) and answer.get("outcome") == BASIS_REFUSED
