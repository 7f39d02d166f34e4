"""Shapes the orchestrators accept and carry: their inputs, the state kept across continue_as_new,
and the ``plan_compensation`` activity's plan. Validated on entry: a malformed start is one clear
failure, not a ``KeyError`` in the middle of a run.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from workflow_core.workflows import RetryPolicy, WorkflowDefinition, from_canonical
from workflow_core.workflows.store import canonical_data, version_of


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Progress(_Strict):
    """How far a workflow instance got; carried into the next generation by continue_as_new."""

    position: int = Field(default=0, ge=0, description="index of the next step to run")
    completed: list[str] = Field(default_factory=list, description="step ids in completion order")
    outputs: dict[str, Any] = Field(default_factory=dict, description="output of each completed step")
    generation: int = Field(default=0, ge=0, description="how many times the instance continued as new")

    def after(self, step_id: str, output: Any) -> Progress:
        return Progress(
            position=self.position + 1,
            completed=[*self.completed, step_id],
            outputs={**self.outputs, step_id: output},
            generation=self.generation,
        )


class StartedRows(_Strict):
    """The versions the HTTP starter wrote (``contracts.ExpectedRows``), for an instance's first scheduler."""

    instance: dict[str, Any]
    steps: dict[str, str] = Field(default_factory=dict)


class WorkflowStart(_Strict):
    """Input of ``workflow_orchestrator``. ``version`` and ``definition`` pin the instance: the
    definition's canonical JSON travels with every generation and resume, so a replay never reads the
    YAML deployed now (docs/scheduler.md, "Compatibility")."""

    workflow: str
    input: dict[str, Any] = Field(default_factory=dict)
    state: Progress | None = None
    epoch: int = Field(default=0, ge=0, description="resumes so far: names this scheduler's children")
    version: str = Field(description="pinned definition version, name@digest")
    definition: dict[str, Any] = Field(description="its canonical JSON")
    trace: dict[str, str] | None = Field(default=None, description="W3C trace context (observability only)")
    rows: StartedRows | None = Field(default=None, description="the starter's row versions")

    @classmethod
    def of(cls, definition: WorkflowDefinition, workflow_input: dict[str, Any] | None = None, **fields: Any):
        """The start of an instance pinned to ``definition`` as it is now (what the starter sends)."""
        return cls(
            workflow=definition.name,
            input=workflow_input or {},
            version=version_of(definition),
            definition=canonical_data(definition),
            **fields,
        )

    def pinned(self) -> WorkflowDefinition:
        """The carried definition (pure: no I/O, verified against ``version``)."""
        definition = from_canonical(self.version, self.definition)
        if definition.name != self.workflow:
            raise ValueError(f"carried definition is {definition.name!r}, not workflow {self.workflow!r}")
        return definition


class CompensationStart(_Strict):
    """Input of ``compensation_orchestrator`` (the scheduler and the supervisor both start it)."""

    instance_id: str
    workflow: str
    reason: str = ""
    trace: dict[str, str] | None = None  # W3C trace context of the instance (observability only)


class PlannedCompensation(BaseModel):
    """One step to undo, as ``plan_compensation`` returns it (unknown fields, diagnostics, ignored)."""

    model_config = ConfigDict(extra="ignore")

    step_id: str
    compensator: str
    input: dict[str, Any] | None = None
    output: Any = None
    deadline_seconds: float = Field(gt=0)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)


class CompensationPlan(BaseModel):
    model_config = ConfigDict(extra="ignore")

    steps: list[PlannedCompensation] = Field(default_factory=list)
