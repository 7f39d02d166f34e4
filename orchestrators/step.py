"""The step orchestrator: runs one step of a parallel group to an outcome, as a sub-orchestration.

The dispatch records this orchestration's id on the step, so its result events (and the watchdog's
nudges) come here. Giving up and compensating stay with the workflow orchestrator, which sees the
whole group.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from orchestrators.attempts import Status, StepRun, run_step


def step_orchestrator(context: Any) -> Generator[Any, Any, dict[str, Any]]:
    """Run the ``StepRun`` in the input; return ``{"succeeded", "attempts", "output", "error"}``."""
    run = StepRun.from_payload(context.get_input())
    status = Status(context, orchestration="step", workflow=run.workflow, instance_id=run.instance_id)
    status.step = run.step_id
    result = yield from run_step(context, run, status)
    status("succeeded" if result.succeeded else "failed", result.attempts)
    return result.to_payload()
