"""Names and message shapes shared by the scheduler, the agents and the supervisor.

One module so the orchestrator, the activities, the workers and the tests cannot drift apart on a
function name, an event name or a field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# ---- function names (what function_app registers and orchestrators call) -------------------------
WORKFLOW_ORCHESTRATOR = "workflow_orchestrator"
COMPENSATION_ORCHESTRATOR = "compensation_orchestrator"
STEP_ORCHESTRATOR = "step_orchestrator"  # runs one step of a parallel group as a sub-orchestration

ACTIVITY_CREATE_STEPS = "create_workflow_steps"
ACTIVITY_DISPATCH_STEP = "dispatch_step"
ACTIVITY_CHECK_STEP = "check_step"
ACTIVITY_SCHEDULE_RETRY = "schedule_retry"
ACTIVITY_GIVE_UP_STEP = "give_up_step"
ACTIVITY_PLAN_COMPENSATION = "plan_compensation"
ACTIVITY_DISPATCH_COMPENSATION = "dispatch_compensation"
ACTIVITY_CHECK_COMPENSATION = "check_compensation"
ACTIVITY_FINISH_COMPENSATION = "finish_compensation"
ACTIVITY_SETTLE_INSTANCE = "settle_instance"  # the workflow ended: the instance record says how

WORKER_FUNCTION = "agent_worker"
RESULT_FUNCTION = "agent_result_handler"
DEAD_LETTER_FUNCTION = "agent_dead_letter_handler"
WATCHDOG_FUNCTION = "supervisor_watchdog"

StepKind = Literal["work", "compensate"]


STEP_INFIX = ":step:"  # in the ids of a parallel group's step orchestrations


def result_event_name(step_id: str, attempt: int, kind: StepKind = "work") -> str:
    """External event an orchestration waits for; one per attempt, so a late result of attempt N
    can never satisfy the wait for attempt N+1."""
    prefix = "result" if kind == "work" else "compensation-result"
    return f"{prefix}:{step_id}:{attempt}"


def compensation_instance_id(instance_id: str) -> str:
    """Deterministic id of an instance's compensation orchestration: starting it twice is a no-op."""
    return f"{instance_id}:compensation"


def step_instance_id(instance_id: str, step_id: str, epoch: int = 0) -> str:
    """Deterministic id of the sub-orchestration that runs one step of a parallel group; it is the
    ``orchestration_id`` the step's dispatch records, so the step's result events go to it.

    ``epoch`` is the instance's resume count: a resumed scheduler never calls a child under an id a
    dead scheduler's child may still hold (a start for a running id is dropped, and the parent
    would wait forever), and the ledger's ``orchestration_id`` moves to the new child on dispatch.
    """
    base = f"{instance_id}{STEP_INFIX}{step_id}"
    return base if epoch == 0 else f"{base}:r{epoch}"


def is_step_instance_id(orchestration_id: str | None) -> bool:
    return bool(orchestration_id) and STEP_INFIX in orchestration_id


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StepDispatch(_Model):
    """Input of the dispatch activities: write the ledger (Dispatched/Compensating), then send."""

    instance_id: str
    orchestration_id: str
    workflow: str
    step_id: str
    attempt: int = Field(ge=1)
    deadline: str  # ISO 8601 UTC, computed from context.current_utc_datetime
    input: dict[str, Any] = Field(default_factory=dict)
    kind: StepKind = "work"


class WorkMessage(_Model):
    """Body of a message on the work queue."""

    kind: StepKind
    instance_id: str
    orchestration_id: str
    workflow: str
    step_id: str
    agent: str
    attempt: int
    deadline: str
    input: dict[str, Any] = Field(default_factory=dict)


class ResultMessage(_Model):
    """Body of a message on the result queue, and the payload of the orchestration's external event."""

    kind: StepKind
    instance_id: str
    orchestration_id: str
    step_id: str
    attempt: int
    outcome: Literal["succeeded", "failed"]
    output: dict[str, Any] | None = None
    error: str | None = None

    @classmethod
    def answering(
        cls, work: WorkMessage, *, ok: bool, output: dict[str, Any] | None = None, error: str | None = None
    ) -> ResultMessage:
        """The reply to ``work``: its output on success, its error on failure (never both)."""
        return cls(
            kind=work.kind,
            instance_id=work.instance_id,
            orchestration_id=work.orchestration_id,
            step_id=work.step_id,
            attempt=work.attempt,
            outcome="succeeded" if ok else "failed",
            output=output if ok else None,
            error=None if ok else error,
        )


class StepCheck(_Model):
    """What the ledger says about a step when the orchestration's deadline timer fired.

    ``extended``: an agent heartbeat moved the deadline; wait again until ``deadline``.
    ``succeeded``/``failed``: the result is in the ledger (its event was lost or late).
    ``timed_out``: the ledger now records TimedOut.
    """

    state: Literal["succeeded", "failed", "timed_out", "extended"]
    deadline: str | None = None
    output: dict[str, Any] | None = None
    error: str | None = None
