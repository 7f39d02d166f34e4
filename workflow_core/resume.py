"""Where a workflow instance stands, read from the ledger: what a resumed scheduler starts from.

A resume must never run a completed step again: it starts after the longest prefix of whole stages
the ledger says completed, with their outputs, as ``continue_as_new`` would have. A step caught in
flight is not in the prefix: the resumed dispatch finds its attempt in the ledger and asks for its
outcome before anything is re-sent.
"""

from __future__ import annotations

from typing import Any

from workflow_core.ledger import StepRecord, StepStatus, decode_json
from workflow_core.payloads import PayloadStore, is_reference
from workflow_core.workflows import WorkflowDefinition
from workflow_core.workflows.store import canonical_data

COMPLETED = frozenset({StepStatus.SUCCEEDED, StepStatus.SKIPPED})


def resume_state(
    definition: WorkflowDefinition, steps: list[StepRecord], generation: int = 0
) -> dict[str, Any]:
    """The ``state`` (``Progress``) a resumed ``workflow_orchestrator`` takes (outputs as values)."""
    by_id = {r.step_id: r for r in steps}
    completed: list[str] = []
    outputs: dict[str, Any] = {}
    for stage in definition.stages:
        records = [by_id.get(step.id) for step in stage]
        if not all(r is not None and r.status in COMPLETED for r in records):
            break
        for record in records:
            assert record is not None
            completed.append(record.step_id)
            output = decode_json(record.result_ref)
            if is_reference(output):
                output = _payloads().resolve(output)
            outputs[record.step_id] = output if output is not None else {}
    return {"position": len(completed), "completed": completed, "outputs": outputs, "generation": generation}


def resume_input(
    definition: WorkflowDefinition,
    workflow_input: dict[str, Any],
    steps: list[StepRecord],
    *,
    epoch: int,
    generation: int,
    version: str,
) -> dict[str, Any]:
    """The whole input of a resumed ``workflow_orchestrator``; ``definition`` must be the pinned one,
    so a resume after a new version was deployed still runs the old one to its end."""
    if is_reference(workflow_input):
        workflow_input = _payloads().resolve(workflow_input)
    payload: dict[str, Any] = {"workflow": definition.name, "input": workflow_input, "epoch": epoch}
    if steps:  # no step rows: a scheduler that died before creating them; the resumed one creates them
        payload["state"] = resume_state(definition, steps, generation)
    payload["version"] = version
    payload["definition"] = canonical_data(definition)
    return payload


def _payloads() -> PayloadStore:
    from workflow_core.runtime import get_services

    return get_services().payloads
